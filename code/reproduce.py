"""Reproduce every number in the notes: run each script, then list every claim with its status.

    python code/reproduce.py            # all scripts, default arguments (about a minute)
    python code/reproduce.py --quick    # the same, shorter runs (what CI smoke-tests)

Each script writes its parts and claims with --json; this collects them into one table:
agrees / differs (with the reason the script gives) / other machine (a timing measured here
against one measured elsewhere) / ours only. Exit status 1 if any script failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import json
import subprocess
import tempfile
import time
from collections import Counter

from common.cli import make_parser, run_main
from common.output import format_table
from common.suite import scripts


def run_one(script_path: Path, json_path: Path, quick: bool) -> tuple[int, float, str]:
    args = [sys.executable, str(script_path), "--json", str(json_path)] + (["--quick"] if quick else [])
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode, time.perf_counter() - start, tail


def main() -> None:
    parser = make_parser(__doc__, figs=False)
    parser.add_argument("--only", default="", help="run only scripts whose name contains this text")
    parser.add_argument("--all-claims", action="store_true", help="list agreeing claims too")
    args = parser.parse_args()
    failures, claims, timing = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, script in enumerate(s for s in scripts() if args.only in s.name):
            out = Path(tmp) / f"{i}.json"
            rc, wall, tail = run_one(script.path, out, args.quick)
            timing.append([script.name, f"{wall:.1f} s", "ok" if rc == 0 else f"FAILED (exit {rc})"])
            print(f"{script.name:40s} {wall:5.1f} s  {'ok' if rc == 0 else 'FAILED: ' + tail}", flush=True)
            if rc != 0:
                failures.append(script.name)
                continue
            for claim in json.loads(out.read_text(encoding="utf-8"))["claims"]:
                claims.append((script.name, claim))
    counts = Counter(c["status"] for _, c in claims)
    print(f"\n{len(claims)} claims: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()))
    shown = [(s, c) for s, c in claims if args.all_claims or c["status"] != "agrees"]
    if shown:
        print("\nClaims that do not simply agree (ours beside the notes', and why):" if not args.all_claims
              else "\nEvery claim:")
        rows = [[s, c["part"], c["what"][:60], _num(c["ours"], c["unit"]), _num(c["notes"], c["unit"]),
                 c["status"], (c["why"] or "")[:90]] for s, c in shown]
        print(format_table(["script", "part", "claim", "ours", "notes", "status", "why"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"timing": timing, "claims": [dict(c, script=s) for s, c in claims]},
                                              indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    if failures:
        print(f"\nFAILED: {', '.join(failures)}", file=sys.stderr)
        sys.exit(1)


def _num(value: object, unit: str) -> str:
    if value is None:
        return "-"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


if __name__ == "__main__":
    run_main(main)
