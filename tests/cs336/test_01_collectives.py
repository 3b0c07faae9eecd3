"""CS336 lecture 8's collectives (cs336/01_collectives.py): the seven primitives on real ranks against
numpy, and the script run as a student would, its claims read from --json."""

from __future__ import annotations

import json
import signal
from functools import reduce as fold
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_usage_error, flat, load_script, run_script
from rank_faults import signal_a_rank_during

from common.launch import launch
from cs336 import primitives as prim
from lecture14.rank_ops import op_data

SCRIPT = "cs336/01_collectives.py"
N = 7  # numbers per rank: neither 2 nor 3 divides it


def inputs(w: int, n: int = N) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.float32) + 10 * (r + 1) for r in range(w)]


@pytest.fixture(scope="module", params=[2, 3])
def ranks(request: pytest.FixtureRequest) -> tuple[int, list[dict]]:
    module = load_script(SCRIPT)
    return request.param, launch(module.collectives_worker, request.param, N, 0, timeout_s=30)


def test_seven_primitives_equal_numpy(ranks: tuple[int, list[dict]]) -> None:
    w, results = ranks
    xs = inputs(w)
    total, whole = np.sum(xs, axis=0), np.concatenate(xs)
    for r, res in enumerate(results):
        got = {k: (None if b is None else np.asarray(b, np.float32),
                   None if a is None else np.asarray(a, np.float32))
               for k, (b, a) in res["seven"].items()}
        assert np.array_equal(got["broadcast"][1], xs[0])
        assert np.array_equal(got["scatter"][1], np.array_split(xs[0], w)[r])
        assert (got["scatter"][0] is None) == (r != 0)
        assert np.array_equal(got["all-gather"][1], whole)
        assert np.array_equal(got["reduce-scatter"][1], np.array_split(total, w)[r])
        assert np.array_equal(got["all-reduce"][1], total)
        if r == 0:
            assert np.array_equal(got["gather"][1], whole) and np.array_equal(got["reduce"][1], total)
        else:
            assert got["gather"][1] is None
        for name in res["seven"]:
            if name not in ("broadcast", "scatter") or r == 0:   # those two take the root's data only
                assert np.array_equal(got[name][0], xs[r]), name  # what the rank put in
            else:
                assert got[name][0] is None, name


def test_split_ops_and_chains_equal_numpy(ranks: tuple[int, list[dict]]) -> None:
    w, results = ranks
    xs, total = inputs(w), np.sum(inputs(w), axis=0)
    for res in results:
        assert res["split"]["exact"]["rs_ag"] == res["split"]["exact"]["all_reduce"] == total.tolist()
        rnd = res["split"]["random"]
        np.testing.assert_allclose(rnd["rs_ag"], rnd["all_reduce"], rtol=0, atol=1e-5)
    signs = [op_data(r, N).numpy() for r in range(w)]
    for name, fn in (("SUM", np.add), ("MIN", np.minimum), ("MAX", np.maximum), ("PRODUCT", np.multiply)):
        assert np.array_equal(np.asarray(results[0]["ops"][name], np.float32), fold(fn, signs)), name
    chains = results[0]["chains"]
    for way in (1, -1):
        order = prim.chain_order(w, way)
        assert order[-1] == 0 and sorted(order) == list(range(w))
        assert chains["sum", way] == total.tolist()
        assert chains["subtract", way] == fold(np.subtract, [xs[r] for r in order]).tolist()
        assert all(res["chains"]["sum", way] is None for res in results[1:])  # only the root ends a chain
    np.testing.assert_allclose(chains["float32 sum", 1], chains["float32 sum", -1], rtol=0, atol=1e-5)


def test_quick_run_claims(tmp_path: Path, quick_run) -> None:
    run = quick_run(SCRIPT, json_to=tmp_path / "o.json")
    assert all(len(line) <= 100 for line in run.stdout.splitlines())   # the page's width
    # the words that say these bytes are priced, never sent here (the labels are what is tested)
    assert "bytes each rank sends on a ring, the ring model" in flat(run.stdout)
    assert "bytes per rank, ring model" in flat(run.stdout)
    data = run.data
    claims = {c["ref"]: c for c in data["claims"]}
    shapes = [ref for ref in claims if ref.startswith("CS-coll-shape-")]
    assert len(shapes) == 7 and all(claims[ref]["status"] == "agrees" for ref in shapes)  # = simulator, table
    seven = data["parts"]["Part 1"]["tables"]["seven"]["rows"]
    # every rank's buffers = the simulator's, except the 3 + 3 that gather and reduce leave undefined
    assert [row[4] for row in seven].count("yes") == 7 * 4 - 6 and {row[4] for row in seven} == {"yes", "-"}
    # the all-reduce of 10..14, 20..24, 30..34, 40..44 (the primitive named on its first rank's row)
    at = [row[0] for row in seven].index("all-reduce")
    assert [row[3] for row in seven[at:at + 4]] == ["100 104 108 112 116"] * 4
    shown = {row[0]: row[3] for row in data["parts"]["Part 2"]["tables"]["shapes"]["rows"]}
    assert shown["scatter"] == "rank 0: 5 → 2 1 1 1"  # scatter of 5 numbers on 4 ranks
    outcome = data["parts"]["Part 5"]["values"]["skip_outcome"]
    assert outcome.startswith("rank 3 finished its work while rank 0, rank 1, rank 2 waited"), outcome
    differs = {ref for ref, c in claims.items() if c["status"] != "agrees"}
    assert differs == {"CS-coll-volume-scatter", "CS-coll-volume-gather", "CS-ring-bound"}, differs
    assert all(claims[ref]["why"] for ref in differs)
    assert claims["CS-coll-volume-scatter"]["ours"] == 3
    assert claims["CS-coll-volume-gather"]["ours"] == 3
    assert claims["CS-coll-volume-all-reduce"]["ours"] == 1.5
    assert claims["CS-ring-bound"]["ours"] == 1.5
    assert claims["CS-coll-skip"]["ours"] is True
    assert len(claims) >= 20
    assert set(data["parts"]) >= {"Part 1", "Part 2", "Part 3", "Part 4", "Part 5"}


@pytest.mark.parametrize("rank, sig, says", [
    (3, signal.SIGKILL, "rank 3 was killed by SIGKILL"),     # the rank that skips, killed
    (1, signal.SIGSTOP, "rank 1 stopped responding"),        # a rank that waits, stopped
])
def test_a_rank_killed_or_stopped_in_part_5_is_a_failure(rank: int, sig: int, says: str) -> None:
    """Part 5 stages a skipped collective: another fault during it fails the run, named."""
    proc = signal_a_rank_during(SCRIPT, 5, rank, sig, "--quick", "--timeout-s", "8",
                                after_s=2.5 if sig == signal.SIGSTOP else 0.0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    # the one-line stderr contract: the staged failure named
    assert "error: Part 5 staged a skipped collective" in lines[0] and says in lines[0]


def test_other_world_size_keeps_the_p4_slips(tmp_path: Path) -> None:
    """The notes' volume column is computed at their p = 4 whatever --world-size: its slips stay found."""
    run_script(SCRIPT, "--world-size", "3", "--quick", "--json", str(tmp_path / "o.json"))
    claims = {c["ref"]: c for c in json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["claims"]}
    for ref in ("CS-coll-volume-scatter", "CS-coll-volume-gather"):
        assert claims[ref]["status"] == "differs" and claims[ref]["erratum"] and claims[ref]["ours"] == 3
    assert all(c["status"] != "other setting" for c in claims.values())


def test_bad_flags() -> None:
    # one of each path: the script's own check, its own flag's type, a shared flag's type
    assert_usage_error(SCRIPT, "--world-size", "1")
    assert_usage_error(SCRIPT, "--numbers", "0")
    assert_usage_error(SCRIPT, "--size", "0B")
