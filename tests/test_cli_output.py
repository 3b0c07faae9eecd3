"""Sizes with units, one-line usage errors, and the claims record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import code_env

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


def test_claims_status_and_json(tmp_path, capsys) -> None:
    args = make_parser("x").parse_args(["--json", str(tmp_path / "out.json")])
    rep = Report("demo.py", "demo", args)
    rep.part(1, "numbers")
    assert rep.claim("same", 3.151, 3.15, "ms", EXACT).status == "agrees"
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


def test_table_alignment_and_bytes() -> None:
    lines = format_table(["n", "name"], [[1, "a"], [1000, "bb"]]).splitlines()
    assert lines[0].index("name") == lines[2].index("a")
    assert lines[3].startswith("  1,000")
    assert fmt_bytes(25 * 2**20, binary=True) == "25 MiB" and fmt_bytes(64e6) == "64 MB"
