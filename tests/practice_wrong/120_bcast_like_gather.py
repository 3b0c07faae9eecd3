"""A wrong solution of 120, the reference but for one change:
broadcast factor (n-1)/n."""

import statistics

# busbw / algbw: the share of S each rank sends (and receives) in a bandwidth-optimal ring
RING_SHARE = {"all-reduce": lambda n: 2 * (n - 1) / n, "reduce-scatter": lambda n: (n - 1) / n,
              "all-gather": lambda n: (n - 1) / n, "broadcast": lambda n: (n - 1) / n}


def bandwidth_row(collective: str, world_size: int, in_bytes: int, out_bytes: int,
                  times_s: list[list[float]]) -> dict[str, float]:
    size = max(in_bytes, out_bytes)        # S, the total: reduce-scatter's input, all-gather's output
    slowest = [max(per_rank) for per_rank in zip(*times_s)]    # an iteration ends with its last rank
    seconds = statistics.median(slowest)
    algbw = size / seconds / 1e9           # GB/s, GB = 10⁹ bytes as in nccl-tests
    share = RING_SHARE[collective](world_size) if world_size > 1 else 0.0   # one rank: no link at all
    return {"size_bytes": size, "time_s": seconds, "algbw_GBps": algbw, "busbw_GBps": algbw * share}
