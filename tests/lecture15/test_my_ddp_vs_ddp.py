"""code/lecture15/my_ddp_vs_ddp.py: MyDDP's launch order, no_sync's placement and buffer syncs
against PyTorch DDP, read from the script's --quick --json (its rank functions, run under the
tests' own launch, are checked in test_my_ddp.py)."""

from __future__ import annotations

from conftest import flat


def test_vs_ddp_script_quick(quick_run) -> None:
    """Launch order, no_sync's placement and buffers against PyTorch DDP: self-checks, no rows."""
    run = quick_run("lecture15/my_ddp_vs_ddp.py")
    parts = run.data["parts"]
    # (a) buckets registered in reverse: ready last-to-first, launched in index order
    assert parts["Part 2"]["stack_order"] == {"ready": [3, 2, 1, 0], "launch": [0, 1, 2, 3]}
    # (b) each rule's launch order per rank: index order agrees across ranks, ready order does not
    launches = [row[1] for row in parts["Part 2"]["tables"]["rank_order"]["rows"]]
    assert launches == ["r0: [0, 1] | r1: [0, 1]", "r0: [0, 1] | r1: [1, 0]"]
    # the self-checks are the tables' "the same" columns: a mark per row (a failure ends the run)
    placement = {row[0]: row[1:] for row in parts["Part 1"]["tables"]["no_sync_placement"]["rows"]}
    assert placement["forward only"] == ["local only", "local only", "ok"]
    buffers = [row[1:] for row in parts["Part 3"]["tables"]["buffer_sync"]["rows"]]
    assert ["no_grad", "broadcast", "broadcast", "ok"] in buffers and all(row[-1] == "ok" for row in buffers)
    # MyDDP's refusal, as the student reads it (the message is what is tested)
    assert ("sparse gradients: MyDDP does not support sparse gradients: parameter '0.weight'"
            in flat(run.stdout))
    assert run.data["claims"] == []
