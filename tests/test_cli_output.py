"""Sizes with units, one-line usage errors, and the claims record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import code_env, flat

from common.cli import UsageError, make_parser, parse_size
from common.output import ASSUMPTION, EXACT, MEASURED, Report, fmt_bytes, format_table


@pytest.mark.parametrize("text,expected", [
    ("64MB", 64_000_000), ("256KiB", 262_144), ("1e6", 1_000_000), ("4096", 4096), ("1.5GB", 1_500_000_000),
    ("25MiB", 25 * 2**20), ("  8 kb ", 8000), ("3B", 3), (4096, 4096),
])
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-5MB", "0", "12XB", "1e400", "abc", "0.1"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


@pytest.mark.parametrize("argv", [["--world-size", "0"], ["--world-size", "x"], ["--size", "64XB"],
                                  ["--beta-gbs", "0"], ["--alpha-us", "-1"], ["--size", "-1"], ["--nope"]])
def test_bad_flags_exit_2_with_one_line(argv: list[str]) -> None:
    code = ("from common.cli import make_parser; "
            "make_parser('x', world_size=4, alpha_us=5.0, beta_gbs=25.0, size='64MB').parse_args()")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=code_env())
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_parser_defaults() -> None:
    args = make_parser("x", world_size=4, size="256KiB").parse_args(["--world-size", "7"])
    assert args.world_size == 7 and args.size == 262_144 and args.quick is False


def test_quick_scales_defaults_only() -> None:
    parser = make_parser("x", steps=3, bucket_cap_mb=4.0, world_size=4,
                         quick={"steps": 2, "bucket_cap_mb": 1.0, "world_size": lambda a: 10 * a.steps})
    for argv, want in [([], (3, 4 * 2**20, 4)), (["--quick"], (2, 2**20, 20)),
                       (["--quick", "--steps", "7"], (7, 2**20, 70)),          # given: kept
                       (["--quick", "--bucket-cap-mb", "3", "--world-size", "5"], (2, 3 * 2**20, 5))]:
        args = parser.parse_args(argv)
        assert (args.steps, args.bucket_cap_bytes, args.world_size) == want, argv
    assert "(default: 3; --quick: 2)" in flat(parser.format_help())
    with pytest.raises(KeyError):
        make_parser("x", steps=3, quick={"stpes": 2}).parse_args([])


def test_a_long_value_is_quoted_cut_with_its_length() -> None:
    code = "from common.cli import make_parser; make_parser('x', world_size=4, size='1MB').parse_args()"
    for argv in (["--world-size", "9" * 100_000], ["--size", "x" * 100_000], ["y" * 100_000]):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=code_env())
        assert proc.returncode == 2 and len(proc.stderr) < 300, proc.stderr[:500]
        assert "…" in proc.stderr and "(100,000 characters)" in proc.stderr


def test_claims_status_and_json(tmp_path, capsys) -> None:
    args = make_parser("x").parse_args(["--json", str(tmp_path / "out.json")])
    rep = Report("demo.py", "demo", args)
    rep.part(1, "numbers")
    assert rep.claim("same", 3.151, 3.15, "ms", EXACT, places=2).status == "agrees"
    assert rep.claim("off", 48, 37, "", ASSUMPTION, why="MB vs MiB").status == "differs"
    assert rep.claim("here", 9.0, 130.0, "µs", MEASURED).status == "other machine"
    assert rep.claim("flag", True, True).status == "agrees"
    assert rep.claim("about", 2.9e-5, 1e-5, factor=3).status == "agrees"
    assert rep.claim("too small", 0.0, 1e-5, factor=3).status == "differs"  # rtol=1 would accept 0
    assert rep.claim("measured flag", False, True, kind=MEASURED).status == "other machine"
    rep.table(["a", "b"], [[1, "x"], [22, "yy"]])
    rep.finish()
    data = json.loads((tmp_path / "out.json").read_text())
    assert [c["status"] for c in data["claims"]] == ["agrees", "differs", "other machine", "agrees", "agrees",
                                                      "differs", "other machine"]
    assert data["parts"]["Part 1"]["tables"]["table1"]["rows"] == [[1, "x"], [22, "yy"]]
    out = capsys.readouterr().out
    assert "why: MB vs MiB" in out and "== Part 1: numbers" in out
    assert [c["rule"] for c in data["claims"]][:3] == ["rounds to 2 decimal places", "exact", "exact"]
    assert data["claims"][0]["decision"] == "3.151 rounds to 3.15 at 2 decimal places; the notes print 3.15"


def test_claim_rules_are_strict() -> None:
    rep = Report("demo.py", "demo", make_parser("x").parse_args([]))
    assert rep.claim("a", 3.16, 3.15, places=2).status == "differs"     # no tolerance beyond rounding
    assert rep.claim("b", 3.145, 3.15, places=2).status == "agrees"     # half away from zero, in decimal
    assert rep.claim("c", 1.96875, 2.0).status == "differs"             # exact unless told otherwise
    assert rep.claim("d", 0.1 + 0.2, 0.3).status == "agrees"            # ... up to float arithmetic
    assert rep.claim("e", 31, 10, factor=3).status == "differs"
    with pytest.raises(ValueError):
        rep.claim("f", 1.0, 1.0, factor=0.5)
    assert not rep.claim("g", 2.0, 2.0, erratum=True).erratum           # agrees: no error in the notes here
    with pytest.raises(TypeError):                                       # no tolerance to reach for
        rep.claim("i", 3.16, 3.15, rtol=0.05)
    slip = rep.claim("h", 1.875, 1.92, "ms", places=2, erratum=True, why="MiB read as MB")
    assert slip.status == "differs" and slip.erratum


def test_claims_off_the_notes_setting_are_not_compared(capsys) -> None:
    parser = make_parser("x", alpha_us=10.0, bucket_cap_mb=25)
    parser.add_argument("--step-ms", type=float, default=2.0)
    at = Report("demo.py", "demo", parser.parse_args(["--quick"]))
    assert at.claim("t", 5.0, 5.0, places=0).status == "agrees"          # --quick is no setting by default ...
    assert at.claim("t", 5.0, 5.0, places=0, setting=("quick",)).status == "other setting"  # ... unless named
    assert at.at_notes_setting() and not at.at_notes_setting(("quick",))
    off = Report("demo.py", "demo", parser.parse_args(["--step-ms", "3", "--bucket-cap-mb", "1"]))
    claim = off.claim("t", 5.0, 5.0, places=0)
    assert claim.status == "other setting" and claim.rule == "not compared"
    assert "--step-ms 3 (notes' setting: 2)" in claim.decision
    assert "--bucket-cap-mb 1 MiB (notes' setting: 25 MiB)" in claim.decision
    assert off.claim("t", 5.0, 5.0, places=0, setting=("alpha_us",)).status == "agrees"
    assert off.claim("t", 5.0, 5.0, places=0, setting=()).status == "agrees"
    out = flat(capsys.readouterr().out)
    assert "why: not at the notes' setting:" in out and "--step-ms 3" in out
    with pytest.raises(KeyError):
        off.claim("t", 5.0, 5.0, setting=("no_such_flag",))


def test_figure_names_carry_lecture_and_script(tmp_path) -> None:
    args = make_parser("x", figs=True).parse_args(["--save-figs", str(tmp_path)])
    rep = Report(str(tmp_path / "lecture15" / "03_overlap.py"), "demo", args)
    assert rep.figure_name("timeline") == "lecture15_03_timeline"
    assert rep.figure_name("lecture15_03_timeline") == "lecture15_03_timeline"
    assert Report("x/lecture15/model_vs_real.py", "d").figure_name("fit") == "lecture15_model_vs_real_fit"


def test_table_alignment_and_bytes() -> None:
    lines = format_table(["n", "name"], [[1, "a"], [1000, "bb"]]).splitlines()
    assert lines[0].index("name") == lines[2].index("a")
    assert lines[3].startswith("  1,000")
    assert fmt_bytes(25 * 2**20, binary=True) == "25 MiB" and fmt_bytes(64e6) == "64 MB"
