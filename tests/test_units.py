"""Strict unit parsing: what each quantity on the command line may look like."""

import pytest

from ecosim.units import UnitError, format_quantity, parse_quantity

GOOD = [
    ("3.3TB/s", "bandwidth", 3.3e12),
    ("4.8 TB/s", "bandwidth", 4.8e12),
    ("900GB/s", "bandwidth", 900e9),
    ("64GiB/s", "bandwidth", 64 * 2**30),
    ("800Gb/s", "bandwidth", 100e9),
    ("141GB", "bytes", 141e9),
    ("44MB", "bytes", 44e6),
    ("1.5KiB", "bytes", 1536.0),
    ("25us", "time", 25e-6),
    ("1.5ms", "time", 1.5e-3),
    ("2s", "time", 2.0),
    ("989TFLOP/s", "flops", 989e12),
    ("2.25PFLOP/s", "flops", 2.25e15),
    ("1e3GB/s", "bandwidth", 1e12),
]

BAD = [
    ("3.3", "bandwidth", "not a quantity with a unit"),
    ("3.3TB", "bandwidth", "wrong dimension"),
    ("3.3TB/s", "bytes", "wrong dimension"),
    ("-1TB/s", "bandwidth", "positive"),
    ("0GB/s", "bandwidth", "positive"),
    ("3.3 TiB/sec", "bandwidth", "unknown unit"),
    ("fast", "bandwidth", "not a quantity"),
    ("", "bytes", "not a quantity"),
    ("3.3XB/s", "bandwidth", "unknown unit"),
    ("1e400TB/s", "bandwidth", "finite"),
    ("5 parsecs", "time", "unknown unit"),
]


@pytest.mark.parametrize("text,dim,value", GOOD)
def test_good_quantities_parse_to_si(text, dim, value):
    assert parse_quantity(text, dim) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text,dim,why", BAD)
def test_bad_quantities_are_one_line_errors(text, dim, why):
    with pytest.raises(UnitError) as e:
        parse_quantity(text, dim)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_zero_allowed_only_where_it_makes_sense():
    assert parse_quantity("0us", "time", allow_zero=True) == 0.0


def test_format_round_trips_the_order_of_magnitude():
    assert format_quantity(3.3e12, "bandwidth") == "3.3 TB/s"
    assert format_quantity(25e-6, "time") == "25 us"
