"""Sizes with units, one-line usage errors, and the claims record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import code_env, flat

from common import agreement, checker
from common.checker import ASSUMPTION, MEASURED, Row
from common.cli import make_parser
from common.error_types import UsageError
from common.flags import parse_size
from common.output import Report
from common.text import format_table
from common.units import fmt_bytes


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
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                              env=code_env())
        assert proc.returncode == 2 and len(proc.stderr) < 300, proc.stderr[:500]
        assert "…" in proc.stderr and "(100,000 characters)" in proc.stderr


def _report_with(tmp_path, rows: list[Row], *argv: str, parser=None) -> Report:
    """A Report whose script has `rows` (the checker's rows, given here instead of a notes' table)."""
    args = (parser or make_parser("x")).parse_args(["--json", str(tmp_path / "out.json"), *argv])
    rep = Report("demo.py", "demo", args)
    rep.rows = rows
    return rep


def _row(id: str, **fields) -> Row:
    base = dict(document="demo", section="§0", statement=id, script="demo/demo.py", value=id, what=id)
    return Row(id=id, **{**base, **fields})


def test_claims_status_and_json(tmp_path, capsys) -> None:
    rows = [_row("same", notes=3.15, unit="ms", places=2),
            _row("off", notes=37, basis=ASSUMPTION, why="MB vs MiB"),
            _row("here", notes=130.0, unit="µs", basis=MEASURED), _row("flag", notes=True),
            _row("about", notes=1e-5, factor=3), _row("too_small", notes=1e-5, factor=3),
            _row("measured_flag", notes=True, basis=MEASURED)]
    rep = _report_with(tmp_path, rows)
    rep.part(1, "numbers")
    rep.value("same", 3.151)
    rep.value("off", 48)
    rep.value("here", 9.0)
    rep.value("flag", True)
    rep.value("about", 2.9e-5)
    rep.value("too_small", 0.0)
    rep.value("measured_flag", False)
    rep.table(["a", "b"], [[1, "x"], [22, "yy"]])
    rep.finish()
    data = json.loads((tmp_path / "out.json").read_text())
    assert [c["status"] for c in data["claims"]] == ["agrees", "differs", "other machine", "agrees", "agrees",
                                                      "differs", "other machine"]   # rtol=1 would accept 0
    assert data["parts"]["Part 1"]["tables"]["table1"]["rows"] == [[1, "x"], [22, "yy"]]
    out = capsys.readouterr().out
    assert "why: off: MB vs MiB" in out and "== Part 1: numbers" in out   # Report's printed layout, tested
    assert [c["rule"] for c in data["claims"]][:3] == ["rounds to 2 decimal places", "exact", "exact"]
    assert data["claims"][0]["decision"] == "3.151 rounds to 3.15 at 2 decimal places; the notes print 3.15"


def test_claim_rules_are_strict() -> None:
    def status(ours, notes, **fields) -> str:
        return checker.decide(_row("x", notes=notes, **fields), "P", {"x": ours}, []).status

    assert status(3.16, 3.15, places=2) == "differs"      # no tolerance beyond rounding
    assert status(3.145, 3.15, places=2) == "agrees"      # half away from zero, in decimal
    assert status(1.96875, 2.0) == "differs"              # exact unless told otherwise
    assert status(0.1 + 0.2, 0.3) == "agrees"             # ... up to float arithmetic
    assert status(31, 10, factor=3) == "differs"
    with pytest.raises(ValueError):
        agreement.compare(1.0, 1.0, None, 0.5)
    # Agrees, so no slip.
    some = checker.all_errata()[0].id
    assert not checker.decide(_row("x", notes=2.0, erratum=some), "P", {"x": 2.0}, []).erratum
    with pytest.raises(TypeError):                        # no tolerance to reach for
        _row("x", notes=3.15, rtol=0.05)
    slip = checker.decide(_row("x", notes=1.92, unit="ms", places=2, erratum=some, why="MiB read as MB"),
                          "P", {"x": 1.875}, [])
    assert slip.status == "differs" and slip.erratum


def test_claims_off_the_notes_setting_are_not_compared(tmp_path, capsys) -> None:
    parser = make_parser("x", alpha_us=10.0, bucket_cap_mb=25)
    parser.add_argument("--step-ms", type=float, default=2.0)
    every = ("--alpha-us", "--bucket-cap-mb", "--step-ms")
    at = _report_with(tmp_path, [], "--quick", parser=parser)
    assert not at._off(_row("t", notes=5.0, depends=every))                 # --quick is no setting ...
    assert at._off(_row("t", notes=5.0, depends=("--quick",)))             # ... unless a row names it
    assert at.at_notes_setting() and not at.at_notes_setting(("quick",))
    rows = [_row("t", notes=5.0, places=0, depends=every), _row("a", notes=5.0, depends=("--alpha-us",)),
            _row("n", notes=5.0, depends=())]
    off = _report_with(tmp_path, rows, "--step-ms", "3", "--bucket-cap-mb", "1", parser=parser)
    off.value("t", 5.0)
    off.value("a", 5.0)
    off.value("n", 5.0)
    claims = {c["ref"]: c for c in off.finish()["claims"]}
    assert claims["t"]["status"] == "other setting" and claims["t"]["rule"] == "not compared"
    # the decision a reader sees names each flag off the notes' setting, with the notes' value
    assert "--step-ms 3 (notes' setting: 2)" in claims["t"]["decision"]
    assert "--bucket-cap-mb 1 MiB (notes' setting: 25 MiB)" in claims["t"]["decision"]
    assert claims["a"]["status"] == "agrees" and claims["n"]["status"] == "agrees"
    out = flat(capsys.readouterr().out)
    assert "why: t: not at the notes' setting:" in out and "--step-ms 3" in out   # the reason as printed
    with pytest.raises(KeyError):
        off._off(_row("t", notes=5.0, depends=("--no-such-flag",)))


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
