"""Spark's late rule for ``session_window``, found by experiment and checked against the ledger's rule.

Three availableNow runs of one session-window query (1-hour gap, 30-minute delay threshold). After
run 1 (key ``a`` at 10:00, key ``b`` at 11:00) the watermark is 10:30 and ``a``'s session
``[10:00, 11:00)`` is still in state. Run 2 lands ``a`` at 09:20 and at 09:35: both would merge with
that session, yet Spark drops 09:20 (its own one-row session ends at 10:20 <= 10:30) and keeps 09:35
(10:35 > 10:30), which merges into ``[09:35, 11:00)``. So Spark judges each input row alone, as its
one-row session ``[t, t + gap)`` against the previous batch's watermark, before any merge; the
ledger's :class:`watermark_ops.core.ledger.rule.LateRule` of kind ``session`` says the same.
"""

from __future__ import annotations

import json

from pyspark.sql import functions as F

from watermark_ops.core.ledger.rule import LateRule, late_rule


def test_spark_judges_a_session_rows_own_one_row_session_before_any_merge(spark, tmp_path):
    landing, out, checkpoint = tmp_path / "landing", tmp_path / "out", tmp_path / "ck"
    landing.mkdir()
    progress = []
    for number, rows in enumerate([[("a", "10:00"), ("b", "11:00")], [("a", "09:20"), ("a", "09:35")],
                                   [("b", "15:00")]]):
        (landing / f"{number}.json").write_text("".join(json.dumps({"k": k, "ts": f"2020-01-01 {t}:00"}) + "\n"
                                                        for k, t in rows))
        stream = spark.readStream.schema("k STRING, ts TIMESTAMP").json(str(landing)).withWatermark("ts", "30 minutes")
        query = (stream.groupBy(F.session_window("ts", "1 hour"), "k").agg(F.count(F.lit(1)).alias("n"))
                 .writeStream.format("parquet").outputMode("append").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start(str(out)))
        query.awaitTermination()
        progress += [p for p in query.recentProgress if p["numInputRows"]]
    # run 2's batch dropped one row, with the watermark of 10:30 that run 1 left
    assert [(p["eventTime"].get("watermark"), p["stateOperators"][0]["numRowsDroppedByWatermark"])
            for p in progress] == [("1970-01-01T00:00:00.000Z", 0), ("2020-01-01T10:30:00.000Z", 1),
                                   ("2020-01-01T10:30:00.000Z", 0)]
    written = {(r["k"], r["session_window"]["start"].strftime("%H:%M"), r["session_window"]["end"].strftime("%H:%M"),
                r["n"]) for r in spark.read.parquet(str(out)).collect()}
    assert written == {("a", "09:35", "11:00", 2), ("b", "11:00", "12:00", 1)}  # 09:20 is in no session
    rule = LateRule.from_dict(late_rule("session", "ts", "30 minutes", gap="1 hour"), "test")
    watermark_ms = 1_577_874_600_000  # 2020-01-01T10:30Z
    minute_us = 60_000_000
    at = {t: (1_577_836_800_000 * 1000) + (int(t[:2]) * 60 + int(t[3:])) * minute_us for t in ("09:20", "09:35")}
    assert rule.late(at["09:20"], watermark_ms)[0] and not rule.late(at["09:35"], watermark_ms)[0]
