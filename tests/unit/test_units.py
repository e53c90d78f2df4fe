import pytest

from testbed.core.errors import InputError, UnitError
from testbed.core.units import (
    format_duration,
    format_rate,
    format_size,
    parse_duration,
    parse_percent,
    parse_rate,
    parse_size,
)


@pytest.mark.parametrize(("text", "bps"), [
    ("10Mbit", 10_000_000), ("384kbit", 384_000), ("1Gbit", 10**9), ("0.2Mbit", 200_000),
    ("500bit", 500), ("20mbit", 20_000_000), ("1.5Gbit", 1_500_000_000),
])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["4Mbps", "10", "fast", "", "10 Mbit/s", "-1Mbit", "1e999Mbit"])
def test_parse_rate_rejects(text):
    with pytest.raises(UnitError) as exc:
        parse_rate(text)
    assert "is not a rate" in str(exc.value)


def test_mbps_hint_names_tc_semantics():
    with pytest.raises(UnitError, match="megabytes"):
        parse_rate("4Mbps")


def test_unit_error_is_input_error():
    assert issubclass(UnitError, InputError)
    with pytest.raises(InputError):
        parse_rate(10)


@pytest.mark.parametrize(("text", "sec"), [
    ("25us", 25e-6), ("10ms", 0.01), ("1.5s", 1.5), ("2min", 120.0), ("1h", 3600.0),
    ("0s", 0.0), ("25µs", 25e-6), ("500ns", 5e-7),
])
def test_parse_duration(text, sec):
    assert parse_duration(text) == pytest.approx(sec)


@pytest.mark.parametrize("text", ["10", "10sec", "ms", "1.2.3s", None, True])
def test_parse_duration_rejects(text):
    with pytest.raises(UnitError):
        parse_duration(text)


@pytest.mark.parametrize(("text", "n"), [
    ("64KiB", 65536), ("20MB", 20_000_000), ("200KB", 200_000), ("1500B", 1500),
    ("1GiB", 2**30), ("10MiB", 10 * 2**20), ("1GB", 10**9),
])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["64k", "20", "1 gigabyte", "MB"])
def test_parse_size_rejects(text):
    with pytest.raises(UnitError, match="is not a size"):
        parse_size(text)


def test_parse_percent():
    assert parse_percent("0.5%") == 0.5
    assert parse_percent("10%") == 10.0
    for bad in ("10", "0.1", "150%", "x%"):
        with pytest.raises(UnitError):
            parse_percent(bad)


def test_formatters_round_trip():
    for bps in (10_000_000, 384_000, 10**9, 200_000, 1234):
        assert parse_rate(format_rate(bps)) == bps
    for sec in (0.0, 25e-6, 0.01, 1.5):
        assert parse_duration(format_duration(sec)) == pytest.approx(sec)
    for n in (1500, 200_000, 20_000_000):
        assert parse_size(format_size(n)) == n


@pytest.mark.parametrize(("parse", "text"), [
    (parse_rate, "1e300Tbit"), (parse_rate, "2Tbit"), (parse_duration, "1e300h"),
    (parse_duration, "1e306h"), (parse_duration, "20000min"), (parse_size, "1e300TiB"),
    (parse_size, "2TiB"),
])
def test_huge_values_are_refused_not_inf(parse, text):
    with pytest.raises(UnitError, match="too large"):
        parse(text)


def test_upper_bounds_themselves_are_accepted():
    assert parse_rate("1Tbit") == 10**12
    assert parse_duration("168h") == 7 * 86400
    assert parse_size("1TiB") == 2**40
