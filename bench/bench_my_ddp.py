"""Step time of the from-scratch MyDDP against PyTorch's DDP on real ranks, with the 1.2× target.

    python bench/bench_my_ddp.py [--world-size 2] [--repeats 100] [--bucket-cap-mb 64KiB]

The handbook's MLP (hidden 256, about 85k parameters) and a 4× wider one (about 1.1M), the same
buckets for both wrappers, steps interleaved and timed after a barrier; the step of a repeat is its
slowest rank's, and the table shows the median. A benchmark, not a test: it never fails a build.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This checkout's code/, ahead of anything installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

from typing import Any

from common.cli import make_parser
from common.error_types import UsageError
from common.launch import choose_backend, launch, preload_for_ddp
from common.output import Report
from common.script_end import run_main
from common.units import fmt_bytes
from lecture15.handbook_model import handbook_model
from lecture15.my_ddp_check import TARGET_RATIO, median_step, timing_rank

HIDDEN_SIZES = (256, 1024)   # the handbook's model, and one where communication weighs more


def bench_rank(rank: int, world: int, cfg: dict[str, Any]) -> list[dict[str, list[float]]]:
    return [timing_rank(rank, world, dict(cfg, hidden=hidden)) for hidden in HIDDEN_SIZES]


def main() -> None:
    parser = make_parser(__doc__, world_size=2, repeats=None, bucket_cap_mb="64KiB", batch=32, real=True,
                         context={"repeats": "per model and wrapper; default 100, 20 with --quick",
                                  "bucket_cap_mb": "of both wrappers; default: the handbook's 64 KiB"})
    args = parser.parse_args()
    if args.batch < args.world_size:
        raise UsageError(f"--batch {args.batch} must be at least --world-size {args.world_size} "
                         "(a sample per rank)")
    repeats = args.repeats or (20 if args.quick else 100)
    rep = Report(__file__, "MyDDP vs PyTorch DDP, median step time", args)
    cfg = {"batch": args.batch, "bucket_bytes": args.bucket_cap_bytes,
           "repeats": repeats, "warmup": 10}
    preload_for_ddp(args.world_size)  # PyTorch DDP() imports torch._dynamo: see there
    per_rank = launch(bench_rank, args.world_size, cfg, timeout_s=args.timeout_s)
    rows = []
    for i, hidden in enumerate(HIDDEN_SIZES):
        ranks = [r[i] for r in per_rank]
        mine, theirs = median_step(ranks, "MyDDP"), median_step(ranks, "PyTorch DDP")
        params = sum(p.numel() for p in handbook_model(hidden).parameters())
        ratio = mine / theirs
        rows.append([f"MLP hidden {hidden}", params, mine * 1e3, theirs * 1e3, ratio, f"≤ {TARGET_RATIO:g}",
                     "pass" if ratio <= TARGET_RATIO else "FAIL"])
    rep.table(["model", "parameters", "MyDDP ms", "PyTorch DDP ms", "ratio", "target", "verdict"], rows,
              name="step_times")
    rep.note(f"{args.world_size} ranks ({choose_backend(args.world_size)}, one thread each), "
             f"global batch {cfg['batch']}, bucket cap {fmt_bytes(args.bucket_cap_bytes, binary=True)} "
             f"for both, median of {repeats} interleaved steps")
    rep.finish()


if __name__ == "__main__":
    run_main(main)
