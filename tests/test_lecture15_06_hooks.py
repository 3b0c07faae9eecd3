"""lecture15/06_comm_hooks.py: torch's DDP comm hooks against exact DDP and against our byte counts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import load_script, python, run_script

from common import checker

SCRIPT = "lecture15/06_comm_hooks.py"
CODE = Path(__file__).resolve().parents[1] / "code"


@pytest.fixture
def run(quick_run) -> tuple[dict, str]:
    """The script's --quick run, from the session's reproduction."""
    found = quick_run(SCRIPT)
    return found.data, found.stdout


def test_every_row_is_decided_and_holds(run) -> None:
    data, stdout = run
    claims = {c["ref"]: c for c in data["claims"]}
    rows = [r.id for r in checker.rows_for(SCRIPT)]
    assert sorted(claims) == sorted(rows) and len(rows) == 12
    assert all(c["status"] == "agrees" for c in claims.values()), [c for c in claims.values()
                                                                    if c["status"] != "agrees"]
    assert all(len(line) <= 100 for line in stdout.splitlines())
    assert stdout.count("check: ") == 2 and "FAILED" not in stdout


def test_bytes_counted_are_ours_and_compression_shrinks_them(run) -> None:
    values = {k: v for part in run[0]["parts"].values() for k, v in part.get("values", {}).items()}
    for short in ("allreduce", "fp16", "psgd_ef", "psgd_noef"):
        assert values[f"{short}_sent_counted"] == values[f"{short}_sent_predicted"] > 0
    assert values["fp16_sent_counted"] * 2 == values["allreduce_sent_counted"]
    assert values["psgd_ef_calls_counted"] == 3 * values["allreduce_calls_counted"]
    assert values["psgd_ef_sent_counted"] < values["allreduce_sent_counted"] / 10
    assert values["allreduce_hook_vs_ddp"] == 0.0
    assert values["psgd_noef_loss_ratio"] > values["psgd_ef_loss_ratio"] > 1.0


def test_the_payload_formula_agrees_with_torchs_own_test() -> None:
    """Our PowerSGD payload, shape by shape, against torch's _should_compress (an independent reference)."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    payload = load_script(SCRIPT).powersgd_payload
    for shape in [(64, 32), (32, 64), (3, 3), (8, 2, 2), (5, 5), (100,), (1, 1000), (7, 9)]:
        for rank in (1, 2, 4):
            n, m = shape[0], math.prod(shape[1:])
            r = min(n, m, rank)
            compress = _should_compress(n, m, r, 2)[0]
            want = [0, n * r, m * r] if compress else [n * m, 0, 0]
            assert payload([shape], rank) == want, (shape, rank)


# PyTorch's side made to differ (fp16 in place of allreduce_hook) and ours (one number too many in
# PowerSGD's P): both self-checks must fail, the run must end in exit 1 with one line naming the first.
BROKEN = """
import sys
sys.path.insert(0, {code!r})
sys.argv = ["06_comm_hooks.py", "--world-size", "2", "--steps", "4", "--batch", "8"]
import importlib.util
spec = importlib.util.spec_from_file_location("hooks", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules["hooks"] = module
spec.loader.exec_module(module)
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

module.HOOKS["allreduce_hook"] = (lambda: None, default_hooks.fp16_compress_hook)
right = module.powersgd_payload
module.powersgd_payload = lambda shapes, rank: [n + (i == 1) for i, n in enumerate(right(shapes, rank))]
from common.cli import run_main
run_main(module.main)
"""


def test_a_disagreement_ends_the_run_naming_it(tmp_path: Path) -> None:
    wrapper = tmp_path / "broken_hooks.py"
    wrapper.write_text(BROKEN.format(code=str(CODE), script=str(CODE / SCRIPT)), encoding="utf-8")
    proc = python(wrapper, timeout=240)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("06_comm_hooks.py: error: allreduce_hook against DDP without a hook: "
                               "max |difference| "), lines[0]
    assert lines[0].endswith("above the tolerance 1e-06 (and 1 more)"), lines[0]
    assert proc.stdout.count("FAILED") == 2
    assert "check: bytes each hook all-reduces against ours" in proc.stdout


def test_bad_input_is_refused_before_any_launch() -> None:
    proc = run_script(SCRIPT, "--batch", "30", expect_rc=2, timeout=60)   # 30 do not split over 4 ranks
    assert len(proc.stderr.strip().splitlines()) == 1 and "multiple of --world-size" in proc.stderr


# The quantization hook's error as DDP wraps it, its first callback run at once (the caller's whole
# stack under "At:") or later on gloo's thread (its own frame only): both happened in one suite.
TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/algorithms/ddp_comm_hooks/"
INLINE = ("RuntimeError: Got the following error when running the callback: RuntimeError: Got the "
          "following error when running the callback: IndexError: invalid index\n\nAt:\n"
          f"  {TORCH}quantization_hooks.py(92): quantize_and_allgather\n"
          f"  {TORCH}quantization_hooks.py(119): quantization_pertensor_hook\n"
          "  /work/code/lecture15/06_comm_hooks.py(129): try_broken\n  <string>(1): <module>\n\n\n"
          f"At:\n  {TORCH}quantization_hooks.py(105): dequantize_and_aggregate\n")


def test_the_whole_error_does_not_depend_on_which_thread_ran_the_callback() -> None:
    keep = load_script(SCRIPT).innermost_frames
    lines = INLINE.splitlines(keepends=True)
    on_gloo_thread = "".join(lines[:4] + lines[7:])       # only the hook's own frame in the first list
    assert keep(INLINE) == keep(on_gloo_thread) != keep(INLINE.replace("(92)", "(93)"))
    assert keep(INLINE).count("At:\n  torch/distributed/") == 2 and "try_broken" not in keep(INLINE)
