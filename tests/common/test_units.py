"""common/units.py: the number, time and byte formats every table, claim and page reads, each against
values worked by hand at the edges where a format could go wrong (a tie, a carry into the next unit,
a boundary between units, a value too large or too small for its notation). The pages' JavaScript
copies are held to these same functions by tests/report/."""

from __future__ import annotations

import math

import pytest

from common.units import GB, KB, MB, TB, GiB, KiB, MiB, TiB, fmt_bytes, fmt_ms, fmt_num, fmt_time, ms


def test_the_unit_constants_are_powers_of_ten_and_of_two() -> None:
    assert (KB, MB, GB, TB) == (1_000, 1_000_000, 1_000_000_000, 1_000_000_000_000)
    assert (KiB, MiB, GiB, TiB) == (1024, 1024 * 1024, 1024 ** 3, 1024 ** 4)
    assert 25 * MiB - 25 * MB == 1_214_400     # the notes' '25 MB' default read both ways


@pytest.mark.parametrize("value, shown", [
    (7, "7"), (1234, "1,234"), (-1234567, "-1,234,567"),              # integers: thousands separated
    (1234.0, "1,234"), (999.0, "999"),                                 # a whole float from 1,000 as one
    (10**15, "1.000e+15"), (-(10**16), "-1.000e+16"),                  # never a 300-digit cell
    (3.14159, "3.142"), (0.001234567, "0.001235"),                     # 4 significant digits
    (406.25, "406.2"), (0.125, "0.125"),                               # Python's ties: to even
    (999.95, "1000"), (0.00099, "9.900e-04"), (1.5e6, "1,500,000"),   # a carry; below 1e-3; whole
    (1.25e6 + 0.5, "1.250e+06"),                                       # a fraction from 1e6 on: e
    (0.0, "0"), (-0.0, "-0"), (math.inf, "inf"), (math.nan, "nan"),
    (True, "True"), (None, "None"), ("text", "text"),
])
def test_fmt_num(value: object, shown: str) -> None:
    assert fmt_num(value) == shown


def test_fmt_num_takes_its_digits() -> None:
    assert (fmt_num(3.14159, 2), fmt_num(3.14159, 6), fmt_num(2.5e-5, 2), fmt_num(10**15, 1)) == (
        "3.1", "3.14159", "2.5e-05", "1.0e+15")   # e-notation keeps one decimal however few digits


@pytest.mark.parametrize("seconds, milliseconds", [
    (0.0019499999999999998, 1.95),        # the float noise of 0.00195 taken off
    (0.1 + 0.2, 300.0), (1e-12, 1e-9), (4e-13, 0.0), (-0.0075, -7.5)])
def test_ms_rounds_to_a_billionth_of_a_millisecond(seconds: float, milliseconds: float) -> None:
    assert ms(seconds) == milliseconds


@pytest.mark.parametrize("seconds, shown", [
    (0.0075, "7.50"), (0.000125, "0.12"), (1.0, "1000.00"), (-0.002, "-2.00")])
def test_fmt_ms_is_two_decimals_without_a_unit(seconds: float, shown: str) -> None:
    assert fmt_ms(seconds) == shown


@pytest.mark.parametrize("seconds, shown", [
    (1.0, "1 s"), (1.234, "1.23 s"), (152.0, "152 s"), (1234.5, "1.23e+03 s"),
    (0.999, "999 ms"), (0.00315, "3.15 ms"), (0.001, "1 ms"),
    (0.0009995, "1e+03 µs"),                  # below 1 ms stays in µs, even where it rounds to 1,000
    (1.75e-5, "17.5 µs"), (1e-6, "1 µs"), (0.0, "0 µs"),
    (9.99e-7, "999 ns"), (2.5e-10, "0.25 ns"),
    (-0.0042, "-4.2 ms"), (-2.0, "-2 s")])
def test_fmt_time_picks_the_unit_by_the_magnitude(seconds: float, shown: str) -> None:
    assert fmt_time(seconds) == shown


@pytest.mark.parametrize("nbytes, binary, shown", [
    (0, False, "0 B"), (999, False, "999 B"), (1000, False, "1 KB"), (1536, False, "1.536 KB"),
    (25 * MiB, False, "26.21 MB"), (25 * MB, False, "25 MB"), (406.25e6, False, "406.2 MB"),
    (999_999_999, False, "1000 MB"),          # the unit is chosen before rounding: 999.999999 MB
    (2.6e13, False, "26 TB"), (5e15, False, "5000 TB"),        # TB is the last unit: no PB
    (1023, True, "1023 B"), (1024, True, "1 KiB"), (25 * MiB, True, "25 MiB"),
    (25 * MB, True, "23.84 MiB"), (3 * TiB * 1024, True, "3072 TiB"),
    (-2048, True, "-2 KiB"), (0.5, False, "0.5 B")])
def test_fmt_bytes_in_powers_of_1000_or_of_1024(nbytes: float, binary: bool, shown: str) -> None:
    assert fmt_bytes(nbytes, binary=binary) == shown
