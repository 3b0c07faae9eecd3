"""How trained weights are judged against one process: "= one process" is a gap within a share of
how far the weights moved there (Report.check_trained and Report.mark_trained print the test), and a
setting whose weights barely move is refused before any rank starts (refuse_still_weights)."""

from __future__ import annotations

from common.error_types import UsageError

# "= one process" for trained weights is judged against how far they moved there: a right engine
# differs from one process by round-off, a wrong one (no update, a missing average, a stale shard)
# by a share of the movement. An absolute tolerance alone passes a wrong engine whose weights barely
# moved (9e-11 in 07 and 08 at --layers 16, under their 1e-9).
MOVED_SHARE = 1e-6        # the largest gap a right engine leaves, as a share of the movement
FLOAT32_MOVED_SHARE = 1e-3  # the same in float32 (2^-24 relative round-off a step, carried by training):
                            # a hook or engine that is wrong by a factor is still a share of ~1 off
ROUND_OFF_ULPS = 64       # the round-off a gap may carry, in units of the largest weight's last place


def movement_floor(largest_weight: float, eps: float, share: float = MOVED_SHARE) -> float:
    """The least movement a check can judge: `share` of it must exceed the weights' round-off."""
    return ROUND_OFF_ULPS * eps * largest_weight / share


def refuse_still_weights(moved: float, largest_weight: float, eps: float, setting: str,
                         share: float = MOVED_SHARE,
                         remedy: str = "fewer --layers, or another --seed") -> None:
    """A usage error, before any rank starts, for a setting whose weights move too little in one
    process for check_trained to tell a wrong engine from round-off."""
    floor = movement_floor(largest_weight, eps, share)
    if not moved >= floor:
        raise UsageError(f"{setting}: the weights move {moved:.1e} in one process, under {floor:.1e}: too "
                         f"little to tell a wrong engine from round-off ({remedy})")


def trained_test(gap: float, moved: float, step_one: float | None, tolerance: float, share: float,
                 relative: bool) -> tuple[bool, float, str, str]:
    """The test of trained weights against one process (Report.check_trained, Report.mark_trained):
    (ok, the gap as a share of the movement, the test in words, what failed in words)."""
    off = gap / moved if moved > 0 else float("inf")
    trained_ok = off <= share  # a NaN gap fails
    first_ok = step_one is None or step_one <= tolerance
    name = "step 1 largest |difference| / its size" if relative else "step 1 max |difference|"
    first = "" if step_one is None else f"{name} {step_one:.3g} {'≤' if first_ok else '>'} {tolerance:g}"
    trained = (f"trained weights {gap:.3g} = {off:.1e} × the {moved:.2g} they moved "
               f"{'≤' if trained_ok else '>'} {share:g}")
    wrong = ([first] if not first_ok else []) + ([trained] if not trained_ok else [])
    return first_ok and trained_ok, off, f"{first}; {trained}" if first else trained, "; ".join(wrong)
