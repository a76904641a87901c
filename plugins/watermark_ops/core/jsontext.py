"""JSON text from files this package does not control: never a ``RecursionError``.

``json.loads`` raises ``RecursionError`` (not a ``ValueError``) on deeply nested input such as
``[[[[...]]]]`` 100,000 levels deep. :func:`loads` turns that into the ``json.JSONDecodeError``
every reader already handles, so a hostile or corrupt file is reported as "not JSON", naming the
file, like any other bad line.

Pure core: standard library only.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads"]


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``.

    :raises json.JSONDecodeError: for text that is not JSON, and for JSON nested more deeply than
        the interpreter's recursion limit allows (message ``nested too deeply``).
    """
    try:
        return json.loads(text)
    except RecursionError:
        shown = text if isinstance(text, str) else text.decode("utf-8", errors="replace")
        raise json.JSONDecodeError("nested too deeply to parse", shown[:80], 0) from None
