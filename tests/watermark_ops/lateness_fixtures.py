"""Files for the lateness tests: a progress log beside a checkpoint and a landing folder of events."""

from __future__ import annotations

import json

HOUR = 3_600_000


def progress_record(run_id, batch_id, input_rows, dropped, ts, tag=None, executed=True):
    """One progress-log record (the fields the lateness accounting reads); ``ts`` in epoch ms UTC."""
    return {"query_id": "q", "run_id": run_id, "run_tag": tag, "batch_id": batch_id, "input_rows": input_rows,
            "rows_dropped_by_watermark": dropped, "timestamp_ms": ts, "executed": executed}


def write_jsonl(path, rows):
    """Write rows (dicts as JSON, strings as they are) one per line, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


