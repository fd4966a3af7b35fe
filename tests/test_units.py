"""Strict unit parsing: what each quantity on the command line may look like."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    assert parse_quantity(text, dim) == value  # exact: the float nearest the typed value, as the literal is


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


def test_parsing_is_exact_where_a_float_product_is_not():
    assert 30 * 1e-6 != 30e-6  # the old parse: 2.9999999999999997e-05
    assert parse_quantity("30us", "time") == 30e-6 and parse_quantity("25us", "time") == 25e-6
    assert parse_quantity("0.3ns", "time") == 0.3e-9 and parse_quantity("7Gb/s", "bandwidth") == 7e9 / 8


# A decimal prefix or time unit is a power of ten: Python's float() of the same number written with
# that exponent is the correctly rounded value, an independent oracle for the parse.
POWER_OF_TEN = {"ns": ("time", -9), "us": ("time", -6), "ms": ("time", -3), "s": ("time", 0), "kB": ("bytes", 3),
                "MB": ("bytes", 6), "GB/s": ("bandwidth", 9), "TB/s": ("bandwidth", 12), "TFLOP/s": ("flops", 12),
                "PFLOP/s": ("flops", 15)}


@given(whole=st.integers(0, 10**6), frac=st.text("0123456789", max_size=6), exp=st.integers(-8, 8),
       unit=st.sampled_from(sorted(POWER_OF_TEN)))
def test_a_typed_quantity_is_the_float_nearest_its_decimal_value(whole, frac, exp, unit):
    number = f"{whole}.{frac}e{exp}" if frac else f"{whole}e{exp}"
    dim, power = POWER_OF_TEN[unit]
    want = float(f"{whole}.{frac or 0}e{exp + power}")
    if want == 0:
        assert parse_quantity(f"{number}{unit}", dim, allow_zero=True) == 0.0
    else:
        assert parse_quantity(f"{number}{unit}", dim) == want
        assert parse_quantity(f"{number} {unit}", dim) == want


@given(n=st.integers(1, 10**9), prefix=st.sampled_from([("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)]))
def test_binary_prefixes_are_exact_powers_of_two(n, prefix):
    assert parse_quantity(f"{n}{prefix[0]}B", "bytes") == float(n * 2 ** prefix[1])
