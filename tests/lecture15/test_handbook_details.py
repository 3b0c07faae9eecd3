"""code/lecture15/handbook_details.py: the handbook's practical details, its rows at --quick and its
DistributedSampler shares against the padding rule."""

from __future__ import annotations

import pytest
from conftest import load_script
from lecture15_shared import _run_claims


def test_details_script_quick(quick_run) -> None:
    out, claims = _run_claims(script="lecture15/handbook_details.py", quick_run=quick_run)
    statuses = {ref: c["status"] for ref, c in claims.items()}
    # DistributedSampler pads when K does not divide N: the handbook's unconditional "no overlap" is a
    # slip against PyTorch's source
    any_n = claims["HB-sampler-disjoint-any-n"]
    assert statuses.pop("HB-sampler-disjoint-any-n") == "differs"
    assert any_n["erratum"] == "HB-err-sampler-uneven" and any_n["error"] == "slip"
    # the reason a reader sees gives the counter-example
    assert "K = 4, N = 10 repeats 2 samples" in any_n["why"]
    assert all(s == "agrees" for s in statuses.values()), statuses
    assert claims["HB-bf16-hook-halves"]["ours"] == 0.5 and claims["HB-bucket-view-no-copy"]["ours"] is True
    # The handbook's 7B question, by hand: 2(K−1)/K of 14 GB per rank at 50 GB/s.
    assert claims["HB-7b-ring-bytes"]["ours"] == pytest.approx(2 * 63 / 64 * 14)
    assert claims["HB-7b-ring-time"]["ours"] == pytest.approx(2 * 63 / 64 * 14e9 / 50e9)


def test_sampler_shares_against_the_padding_rule() -> None:
    """torch's DistributedSampler, counted our way: K·ceil(N/K) indices, the N distinct ones all present
    (drop_last=False), or K·floor(N/K) distinct ones (drop_last=True)."""
    sampler_shares = load_script("lecture15/handbook_details.py").sampler_shares

    for k, n in ((4, 10), (3, 60), (8, 17), (5, 5), (7, 3)):
        shares = sampler_shares(k, n, drop_last=False)
        assert sum(map(len, shares)) == k * -(-n // k) and set().union(*shares) == set(range(n))
        if n >= k:
            dropped = sampler_shares(k, n, drop_last=True)
            taken = [i for s in dropped for i in s]
            assert len(taken) == len(set(taken)) == k * (n // k)
