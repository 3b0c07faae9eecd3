"""Every self-check and every observed or self-compared row has a mutation that makes it fail
(tests/mutation.py says how they are written; each test_mutations_*.py applies its own)."""

from __future__ import annotations

from mutation import all_mutations, check_sites, checked_rows, module_of_test


def test_every_self_check_has_a_mutation() -> None:
    by_script: dict[str, list[str]] = {}
    for m in all_mutations():
        by_script.setdefault(m.script, []).extend(m.sites)
    bare = [f"{script}: {site}" for script, site in check_sites()
            if not any(phrase in site for phrase in by_script.get(script, []))]
    assert not bare, "self-checks no mutation makes fail:\n" + "\n".join(bare)


def test_every_observed_or_self_compared_row_has_a_mutation() -> None:
    flipped = {row for m in all_mutations() for row in m.rows}
    bare = [row for row in checked_rows() if row not in flipped]
    assert not bare, f"{len(bare)} rows no mutation flips: {', '.join(bare)}"


def test_a_mutation_names_what_it_breaks_and_how_it_is_applied() -> None:
    seen = set()
    for m in all_mutations():
        assert m.name and m.script and (m.sites or m.rows), m
        assert bool(m.sites) == bool(m.fails) or m.covered_by, f"{m.name}: a failing check names its line"
        assert not (m.sites and m.rows and not m.covered_by), f"{m.name}: a failed run writes no --json"
        assert (m.test_id, m.script) not in seen, f"two mutations named {m.name!r}"
        seen.add((m.test_id, m.script))
        if m.covered_by:
            module, function = m.covered_by.split("::")
            assert hasattr(module_of_test(module), function), m.covered_by
        else:
            assert m.patch, m.name
