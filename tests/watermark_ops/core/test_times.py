"""Times at the edges: ISO-8601 text, instants and durations (pendulum)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
import pytest

from watermark_ops.core.times import duration, duration_text, duration_words, instant_ms, iso_utc


def test_durations_at_the_edges():
    assert duration("PT6H") == timedelta(hours=6)
    assert duration("P1DT2H") == timedelta(days=1, hours=2)
    assert duration("90") == duration(90) == timedelta(seconds=90)
    assert duration("none") is None and duration(None) is None
    converted = duration(pendulum.duration(hours=2))
    assert type(converted) is timedelta and converted == timedelta(hours=2)
    with pytest.raises(ValueError, match="max_lag.*ISO-8601 duration"):
        duration("six hours", "max_lag")
    with pytest.raises(ValueError, match="must not be negative"):
        duration(-1)


def test_instants():
    assert instant_ms("2013-01-02T00:00:00Z") == 1357084800000
    assert instant_ms(pendulum.datetime(2013, 1, 1, 19, tz="America/New_York")) == 1357084800000
    assert instant_ms(1357084800000) == 1357084800000
    with pytest.raises(ValueError, match="naive"):
        from datetime import datetime

        instant_ms(datetime(2013, 1, 2))
    with pytest.raises(ValueError, match="ISO-8601"):
        instant_ms("yesterday")


def test_iso_utc_keeps_milliseconds_only_when_there_are_some():
    assert iso_utc(None) is None
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(1357047180000) == "2013-01-01T13:33:00Z"
    assert iso_utc(1357047180042) == "2013-01-01T13:33:00.042Z"


def test_iso_utc_renders_any_integer_and_says_when_it_is_out_of_range():
    assert iso_utc(-1) == "1969-12-31T23:59:59.999Z"
    assert iso_utc(-62_135_596_800_000) == "0001-01-01T00:00:00Z"
    assert iso_utc(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"
    for value in (-99_999_999_999_999, 253_402_300_800_000, 2**70, -(2**70)):
        assert iso_utc(value) == f"out of range ({value} ms)"


def test_duration_words():
    assert duration_words(None) == "unknown"
    assert duration_words(250) == "250 ms"
    assert duration_words(-3000) == "-3 s"
    assert duration_words(2 * 3_600_000 + 5 * 60_000) == "2 h 5 min"
    assert duration_words(2**70) == f"{2**70} ms (out of range)"
    assert duration_words(-(10**17)) == f"{-(10**17)} ms (out of range)"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (5 * 3_600_000 + 32 * 60_000 + 1, "5 h 32 min"),  # was "5 hours 32 minutes 1 milliseconds"
        # A lag from an unset watermark: was "724 weeks 3 days 17 hours 41 minutes 40 seconds".
        (((724 * 7 + 3) * 24 + 17) * 3_600_000 + 41 * 60_000 + 40_000, "13.9 years"),
        (45_000, "45 s"),
        (250, "250 ms"),
        (0, "0 s"),
        (65_000, "1 min 5 s"),
        (3_600_000, "1 h"),  # a zero second unit is left out
        (90_061_001, "1 d 1 h"),
        (364 * 86_400_000, "364 d"),
        (400 * 86_400_000, "1.1 years"),
        (-1500, "-1 s 500 ms"),
    ],
)
def test_duration_text_two_most_significant_units(ms, text):
    assert duration_text(ms) == text


def test_duration_text_signed():
    assert duration_text(6_840_000, signed=True) == "+1 h 54 min"
    assert duration_text(-5000, signed=True) == "-5 s"
    assert duration_text(0, signed=True) == "0"
