"""Every window Spark has, in the pure core: which windows a row falls in and is dropped from
(tumbling, sliding with a slide that does or does not divide the duration, a start offset, a
session's one-row session), the window a query's plan declares against a declared one, and a
session window's corrections with their retractions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watermark_ops.core.ledger.rule import LateRule, late_rule
from watermark_ops.core.ledger.sessions import published_sessions, session_corrections
from watermark_ops.core.ledger.windows import WindowMismatch, window_of

MINUTE_US = 60_000_000


def _brute(event_us: int, size: int, slide: int, offset: int) -> list[tuple[int, int]]:
    """Spark's TimeWindowing, written out: every aligned start ``offset + k * slide`` whose window holds the row."""
    found = []
    k = (event_us - size - offset) // slide - 1
    while offset + k * slide <= event_us:
        start = offset + k * slide
        if start <= event_us < start + size:
            found.append((start, start + size))
        k += 1
    return found


@settings(max_examples=300, deadline=None)
@given(event=st.integers(-10**15, 10**15), size_min=st.integers(1, 600), slide_min=st.integers(1, 600),
       offset_min=st.integers(0, 599))
def test_a_rows_windows_are_sparks_for_any_duration_slide_and_offset(event, size_min, slide_min, offset_min):
    offset_min %= slide_min
    rule = LateRule.from_dict(late_rule("window_end", "ts", "0 seconds", window=f"{size_min} minutes",
                                        slide=f"{slide_min} minutes", offset_ms=offset_min * 60_000), "test")
    assert rule.windows_of(event) == _brute(event, size_min * MINUTE_US, slide_min * MINUTE_US, offset_min * MINUTE_US)


def test_a_sliding_row_is_dropped_from_the_windows_that_closed_and_kept_in_the_others():
    rule = LateRule.from_dict(late_rule("window_end", "ts", "30 minutes", window="2 hours", slide="30 minutes"), "t")
    ten_forty = (10 * 60 + 40) * MINUTE_US  # 1970-01-01 10:40 UTC
    watermark_ms = (11 * 60 + 30) * 60_000  # 11:30: windows ending 11:00 and 11:30 have closed
    assert [(s // 60_000, e // 60_000) for s, e in rule.windows_dropped(ten_forty, watermark_ms)] == [
        (9 * 60, 11 * 60), (9 * 60 + 30, 11 * 60 + 30)]
    assert len(rule.windows_of(ten_forty)) == 4
    late, late_by, start, end = rule.late(ten_forty, watermark_ms)
    assert late and (start, end) == (9 * 3_600_000, 11 * 3_600_000) and late_by == 30 * 60_000  # the earliest window
    assert not rule.late(ten_forty, 10 * 3_600_000 + 59 * 60_000)[0]  # every window still open


def test_a_session_row_is_judged_alone_as_its_one_row_session():
    rule = LateRule.from_dict(late_rule("session", "ts", "30 minutes", gap="1 hour"), "t")
    assert rule.to_dict()["gap_ms"] == 3_600_000
    nine_fifteen = (9 * 60 + 15) * MINUTE_US
    assert rule.windows_of(nine_fifteen) == [(nine_fifteen, nine_fifteen + 60 * MINUTE_US)]
    assert rule.late(nine_fifteen, (10 * 60 + 15) * 60_000)[0]  # 09:15 + 1 hour <= 10:15
    assert not rule.late(nine_fifteen, (10 * 60 + 14) * 60_000)[0]
    with pytest.raises(ValueError, match="static gap"):
        late_rule("session", "ts", "0 seconds", gap="CASE WHEN x THEN 1 hour END")


def test_the_window_is_the_plans_and_a_declaration_that_disagrees_names_both():
    sliding = {"windows": [{"kind": "time", "column": "window", "time_column": "ts", "duration_ms": 7_200_000,
                            "slide_ms": 1_800_000, "offset_ms": 600_000}]}
    window = window_of(sliding)
    assert (window.kind, window.duration_ms, window.slide_ms, window.offset_ms, window.source) == (
        "window_end", 7_200_000, 1_800_000, 600_000, "plan")
    assert window_of(sliding, "2 hours") == window
    with pytest.raises(WindowMismatch, match=r"declared window '1 hour'.*window\(2 hours, slide 30 minutes, start "
                                             r"offset 10 minutes\)"):
        window_of(sliding, "1 hour")
    session = {"windows": [{"kind": "session", "column": "session_window", "time_column": "ts", "gap_ms": 3_600_000,
                            "gap": "1 hour"}]}
    assert window_of(session).kind == "session" and window_of(session).gap_ms == 3_600_000
    with pytest.raises(WindowMismatch, match="session_window"):
        window_of(session, "1 hour")
    dynamic = {"windows": [{**session["windows"][0], "gap_ms": None, "gap": "CASE WHEN (k#0 = a) THEN 1 hour END"}]}
    with pytest.raises(WindowMismatch, match="dynamic gap"):
        window_of(dynamic)
    assert window_of({"windows": []}, "1 hour").source == "declared" and window_of(None).kind == "event_time"


H = 3_600_000


def _session(start_h: float, end_h: float, key: str, n: int) -> dict:
    return {"start": int(start_h * H), "end": int(end_h * H), "keys": (key,), "values": {"n": n}}


def _late(at_h: float, key: str, batch: int = 2) -> dict:
    return {"event": {"k": key}, "event_time_ms": int(at_h * H), "batch_id": batch}


def _same(a: dict, b: dict) -> bool:
    return a == b


def test_a_late_row_that_bridges_two_emitted_sessions_retracts_both_and_publishes_one():
    emitted = [_session(8, 9.5, "a", 2), _session(10, 11, "a", 1), _session(8, 9, "b", 1)]
    truth = [_session(8, 11, "a", 4), _session(8, 9, "b", 1)]
    made, problems = session_corrections(truth, emitted, [_late(9.25, "a")], ["k"], "r2", _same)
    assert not problems and len(made) == 1
    correction = made[0]
    assert (correction["window_start_ms"], correction["window_end_ms"], correction["keys"]) == (8 * H, 11 * H, {"k": "a"})
    assert correction["emitted"] is None and correction["corrected"] == {"n": 4} and correction["late_rows"] == 1
    assert [(r["window_start_ms"], r["window_end_ms"], r["values"]) for r in correction["retracts"]] == [
        (8 * H, int(9.5 * H), {"n": 2}), (10 * H, 11 * H, {"n": 1})]
    # a consumer that applies it holds the sessions over every landed row
    assert sorted(map(str, published_sessions(emitted, made, ["k"]))) == sorted(map(str, truth))


def test_a_session_of_late_rows_only_is_new_and_a_later_run_retracts_an_earlier_correction():
    made, _ = session_corrections([_session(1, 2, "a", 1)], [], [_late(1, "a")], ["k"], "r1", _same)
    assert made[0]["retracts"] == [] and made[0]["emitted"] is None
    # the next run's late row extends that corrected session: it retracts the correction, not only the sink's
    published = published_sessions([], made, ["k"])
    later, _ = session_corrections([_session(1, 2.5, "a", 2)], published, [_late(1.5, "a", 4)], ["k"], "r2", _same)
    assert [(r["window_start_ms"], r["window_end_ms"]) for r in later[0]["retracts"]] == [(1 * H, 2 * H)]
    assert published_sessions([], made + later, ["k"]) == [_session(1, 2.5, "a", 2)]


def test_a_session_published_as_it_is_or_cut_short_is_not_corrected():
    same = [_session(8, 9, "a", 2)]
    assert session_corrections(same, same, [_late(8.5, "a")], ["k"], "r", _same) == ([], [])
    cut = session_corrections([_session(8, 9, "a", 2)], [_session(7, 8.5, "a", 1)], [_late(8.5, "a")], ["k"], "r", _same)
    assert cut[0] == [] and "read too little before it" in cut[1][0]
