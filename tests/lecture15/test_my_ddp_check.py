"""code/lecture15/my_ddp_check.py: MyDDP and PyTorch DDP trained against one process, the handbook's
rows at its setting and at others, and its bad flags (the parametrized test names my_ddp_vs_ddp.py and
handbook_details.py's cases too: it stays whole in the file of the first script it names)."""

from __future__ import annotations

import re

import pytest
from conftest import assert_usage_error
from lecture15_shared import _run_claims


def test_check_script_quick(quick_run) -> None:
    out, claims = _run_claims(quick_run=quick_run)
    for what in ("MyDDP, 3 steps on 2 ranks,", "PyTorch DDP, 3 steps on 2 ranks,",
                 "MyDDP's no_sync accumulation, 3 steps,", "PyTorch DDP's no_sync accumulation, 3 steps,"):
        assert re.search(rf"check: {re.escape(what)} against one process: trained weights (\S+) = \S+ × the "
                         r"\S+ they moved ≤ 1e-06: ok", out), what
    # the self-check's printed gap (recorded nowhere else): float64 round-off, not float32's 7e-9
    assert re.search(r"trained weights \d\.\d\de-1[5-9] =", out)
    assert "per-repeat ratios" in out   # the timing's spread is said beside its ratio of medians
    # Every row compares at the notes' setting with --quick: none depends on the timing's length.
    statuses = {ref: c["status"] for ref, c in claims.items()}
    # PyTorch's default cap, 25 "MB" as bucket_cap_mb counts it (MiB): a reading, not an error
    default_cap = claims["HB-default-bucket-25MB"]
    assert statuses.pop("HB-default-bucket-25MB") == "agrees" and default_cap["reading"]
    assert not default_cap["erratum"] and default_cap["unit"] == "MiB" and default_cap["ours"] == 25
    assert statuses.pop("HB-myddp-step-ratio") == "ours only" and claims["HB-myddp-step-ratio"]["unit"] == "×"
    assert all(s == "agrees" for s in statuses.values()), statuses
    assert claims["HB-check-summary-line"]["ours"] == ("2 个 rank，2 个梯度桶，"
                                                       "每步在反向过程中发起 2 次 all-reduce")
    for ref in ("HB-ddp-equals-single-process", "HB-no-sync-equals-full-batch", "HB-no-sync-ddp-skips"):
        assert claims[ref]["kind"] == "observed on real ranks"


def test_check_script_other_knobs() -> None:
    out, claims = _run_claims("--world-size", "3", "--batch", "31", "--bucket-cap-mb", "1", "--steps", "2",
                          "--repeats", "3")
    assert claims["HB-check-summary-line"]["ours"] == ("3 个 rank，1 个梯度桶，"
                                                       "每步在反向过程中发起 1 次 all-reduce")
    assert "unequal shards" in out   # the reader is told why the shards differ (the words are tested)
    # What depends on the cap or the world size is not compared with the handbook's 2 ranks at 64 KiB ...
    for ref in ("HB-check-buckets", "HB-check-summary-line", "HB-buckets-fewer-messages"):
        assert claims[ref]["status"] == "other setting", claims[ref]
    assert claims["HB-check-buckets"]["ours"] == 1
    # ... correctness holds for any input, so it is compared (unequal shards, 3 ranks, one bucket).
    for ref in ("HB-ddp-equals-single-process", "HB-official-equals-single-process", "HB-replicas-identical",
                "HB-no-sync-equals-full-batch", "HB-no-sync-comm-share", "HB-no-sync-ddp-skips"):
        assert claims[ref]["status"] == "agrees", claims[ref]


# argparse's own checks (--world-size 0) and ours (a batch too small to split): one line, exit 2.
@pytest.mark.parametrize("script, flags", [("lecture15/my_ddp_check.py", ("--world-size", "0")),
                                           ("lecture15/my_ddp_check.py", ("--batch", "3")),
                                           ("lecture15/my_ddp_vs_ddp.py", ("--world-size", "1")),
                                           ("lecture15/handbook_details.py", ("--steps", "0"))])
def test_bad_flags(script: str, flags: tuple[str, str]) -> None:
    assert_usage_error(script, *flags)
