"""code/cs336/09_zero.py: ZeroRedundancyOptimizer and FSDP2 on real ranks, run as a student would
(--quick --json: every row of engines.toml agrees, the uneven splits are the engines' rules, what gloo
ran is FSDP2's reduce-scatters as all-reduces of the padded buffer), and made to disagree: a
ZeroRedundancyOptimizer that never broadcasts its updated shards must end the run in exit 1 with one
line naming ZeRO-1 and its gap from one process. (Engines that shard, reshard or count otherwise
make the rows differ: tests/suite/test_mutations_cs336_tp_zero.py.)"""

from __future__ import annotations

from pathlib import Path

from conftest import assert_usage_error, every_row_agrees, load_script, run_patched

SCRIPT = "cs336/09_zero.py"
CODE = Path(__file__).resolve().parents[2] / "code"
SMALL = ["--world-size", "3", "--layers", "4", "--width", "10", "--batch", "6"]


def test_quick_run_every_row_agrees(quick_run) -> None:
    proc = quick_run(SCRIPT)      # the session's reproduction ran it
    data = proc.data
    every_row_agrees(SCRIPT, data)
    # Part 1's marks: every engine equals one process
    part1 = data["parts"]["Part 1"]["tables"]["vs_one_process"]["rows"]
    assert [row[0] for row in part1] == ["ZeRO-1", "FSDP2", "FSDP2-no-reshard"]
    assert all(row[-1] == "ok" for row in part1)
    memory = data["parts"]["Part 2"]["values"]
    # 6 matrices of 130² on 4 ranks: 2, 2, 1, 1 of Adam's m and v (16 B an element), whole params + grads
    whole = 2 * 8 * 6 * 130 * 130
    assert memory["ZeRO-1_bytes"] == " ".join(f"{whole + 16 * n * 130 * 130:,}" for n in (2, 2, 1, 1))
    # 130 rows cut like torch.chunk: 33, 33, 33, 31 (tensor_split would give 33, 33, 32, 32); 32 B a value
    assert memory["FSDP2_bytes"] == " ".join(f"{32 * 6 * rows * 130:,}" for rows in (33, 33, 33, 31))
    assert memory["FSDP2_sum"] == memory["FSDP2_ledger_sum"] == 32 * 6 * 130 * 130
    counted = data["parts"]["Part 3"]["values"]
    assert counted["FSDP2_counted"].startswith("all-gather: 12 calls")       # 2L with resharding
    assert counted["FSDP2-no-reshard_counted"].startswith("all-gather: 6 calls")
    assert counted["unseen"] == 0
    # on the wire here: the padded W's (6·4·33·130·8 B) all-gathered, and all-reduced for each
    # reduce-scatter; ZeRO-1's all-reduce and broadcasts as handed (6·130²·8 B each kind)
    padded, weights = 6 * 4 * 33 * 130 * 8, 6 * 130 * 130 * 8
    assert counted["FSDP2_wire"] == (f"all-gather: 12 calls, {2 * padded:,} B; "
                                     f"all-reduce: 6 calls, {padded:,} B")
    assert counted["ZeRO-1_wire"] == f"all-reduce: 1 calls, {weights:,} B; broadcast: 6 calls, {weights:,} B"


def test_the_engines_rules_on_uneven_sizes() -> None:
    module = load_script(SCRIPT)
    assert module.greedy_partition([5, 3, 3, 2, 1], 3) == [5, 5, 4]
    assert module.chunk_rows(250, 4) == [63, 63, 63, 61] and module.chunk_rows(5, 4) == [2, 2, 1, 0]


# Each rank updates only the parameters it owns and never sends them: the others keep stale copies.
NO_BROADCAST = """
class Stale(module.ZeroRedundancyOptimizer):
    def _sync_params(self):
        pass
module.ZeroRedundancyOptimizer = Stale
"""
def _broken(tmp_path: Path, patch: str) -> str:
    return run_patched(tmp_path, SCRIPT, patch, SMALL)


def test_unsent_shards_end_the_run_naming_zero1(tmp_path: Path) -> None:
    line = _broken(tmp_path, NO_BROADCAST)
    assert line.startswith("09_zero.py: error: ZeRO-1 against one process: trained weights "), line


def test_bad_input_is_one_line() -> None:
    assert_usage_error(SCRIPT, "--steps", "2")
