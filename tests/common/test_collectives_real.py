"""common.collectives_real on 3 real gloo ranks: pieces of unequal size gathered, scattered and
reduce-scattered (rows and columns), both with gloo's reduce_scatter and through the all-reduce an
older gloo needs, each call recorded with common.costmodel.collectives' size N."""

from __future__ import annotations

import torch

from common import collectives_real as real
from common.costmodel.collectives import split_sizes
from common.launch import launch

N, WIDTH = 7, 5   # 7 on 3 ranks: 3, 2, 2; 5 columns: 2, 2, 1


def _data(rank: int) -> torch.Tensor:
    return torch.arange(N * WIDTH, dtype=torch.float64).view(N, WIDTH) * (rank + 1)


def _worker(rank: int, world: int, lacks_reduce_scatter: bool) -> dict:
    if lacks_reduce_scatter:  # as an older gloo answers (the fork keeps this rank's copy only)
        real.gloo_lacks = lambda op: "no reduce_scatter" if op == "reduce_scatter" else None
    calls: list[tuple[str, int]] = []
    record = lambda name, nbytes: calls.append((name, nbytes))  # noqa: E731
    rows, cols = split_sizes(N, world), split_sizes(WIDTH, world)
    x = _data(rank)
    mine_rows, how = real.reduce_scatter_uneven(x, rows, record=record)
    mine_cols, _ = real.reduce_scatter_uneven(x, cols, dim=-1, record=record)
    gathered = real.all_gather_uneven(mine_cols, cols, dim=-1, record=record)
    whole = torch.arange(N, dtype=torch.float32) if rank == 0 else None
    return {"rows": mine_rows.tolist(), "cols": mine_cols.tolist(), "gathered": gathered.tolist(),
            "scattered": real.scatter_uneven(whole, rows, 0, torch.device("cpu")).tolist(),
            "how": how, "calls": calls}


def test_uneven_collectives_with_and_without_gloo_reduce_scatter() -> None:
    total = sum(_data(r) for r in range(3))
    rows, cols = split_sizes(N, 3), split_sizes(WIDTH, 3)
    x_bytes = N * WIDTH * 8
    for lacks in (False, True):
        for rank, res in enumerate(launch(_worker, 3, lacks)):
            assert res["rows"] == list(total.split(rows)[rank].tolist())
            assert res["cols"] == total.split(cols, dim=-1)[rank].tolist()
            assert res["gathered"] == total.tolist()
            assert res["scattered"] == list(torch.arange(N, dtype=torch.float32).split(rows)[rank].tolist())
            reduce = "all_reduce" if lacks else "reduce_scatter"
            assert ("all_reduce" in res["how"]) == lacks
            # the gather pads every slice to the widest (2 columns): 3 × 7 rows × 2 × 8 B
            assert res["calls"] == [(reduce, x_bytes), (reduce, x_bytes), ("all_gather", 3 * N * 2 * 8)]
