"""Each fact once (issue 31): no script's output is more than a quarter self-checks. A script's
--json counts the check lines it printed (check_close / check_trained / check_equal lines, and the
"our checks" tables of engines.toml); the count is held against the lines that visibly are checks
too, so a script cannot pass by under-counting."""

from __future__ import annotations

CHECK_SHARE = 0.25


def _standalone_runs(quick: dict, full: dict) -> dict[str, dict]:
    """Each script's run at its defaults: the full reproduction for the scripts --quick shortens."""
    runs = {run["script"]: run for run in quick["runs"]}
    runs.update({run["script"]: run for run in full["runs"]})
    return runs


def test_no_output_is_more_than_a_quarter_checks(quick_reproduction: dict, full_reproduction: dict) -> None:
    over = []
    for script, run in sorted(_standalone_runs(quick_reproduction, full_reproduction).items()):
        assert run["rc"] == 0 and run.get("json"), script
        lines = run["stdout"].splitlines()
        counted = run["json"]["check_lines"]
        visible = sum(1 for line in lines if line.startswith(("  check:", "  our checks")))
        assert counted >= visible, f"{script}: counts {counted} check lines, prints {visible}"
        if counted > CHECK_SHARE * len(lines):
            over.append(f"{script}: {counted} of {len(lines)} lines are checks")
    assert not over, "\n".join(over)
