"""Benchmark: the watermark pages at 10,000 batches against 10, and against the audit alone.

Writes the same Spark-4.2-format checkpoints as ``audit_benchmark.py`` (``--batches`` batches with a
progress log, and 10 batches), then times in process, as medians of ``--repeat`` runs after one
warm-up each:

* ``audit``: :func:`watermark_ops.core.audit.run_audit` (read every file + every rule), the floor;
* ``row``: :func:`watermark_ops.core.overview.overview_row` (one overview row: the audit plus the
  stall classification);
* ``page``: :func:`watermark_ops.core.overview.checkpoint_detail` plus
  :func:`watermark_ops.render.html.checkpoint_page` (what one checkpoint page costs the api-server);
* ``json``: the detail as JSON text.

Prints the times, the page's size in bytes (the chart draws the newest 500 batches whatever the
history), and the ratios page / audit and page@N / page@10. A script, not a test.

Usage: ``.venv/bin/python benchmarks/ui_benchmark.py [--batches 10000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_benchmark import PLUGINS, medians_interleaved, write_checkpoint  # noqa: E402

sys.path.insert(0, str(PLUGINS))

from watermark_ops.core.audit import run_audit  # noqa: E402
from watermark_ops.core.overview import checkpoint_detail, overview_row  # noqa: E402
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS  # noqa: E402
from watermark_ops.render.html import checkpoint_page  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="wmo-ui-bench-"))
    try:
        big, small = folder / "big", folder / "small"
        write_checkpoint(big, args.batches)
        write_checkpoint(small, 10)
        sizes = {}

        def page(location: Path) -> None:
            html = checkpoint_page(checkpoint_detail(str(location), DEFAULT_THRESHOLDS), base="/watermark-ops",
                                   json_url="/watermark-ops/api/checkpoints/x")
            sizes[location.name] = len(html.encode())

        times = medians_interleaved(args.repeat, {
            "audit": lambda: run_audit(str(big)),
            "row": lambda: overview_row(str(big), DEFAULT_THRESHOLDS),
            "page": lambda: page(big),
            "json": lambda: json.dumps(checkpoint_detail(str(big), DEFAULT_THRESHOLDS)),
            "page@10": lambda: page(small),
        })
        print(f"{args.batches} batches (medians of {args.repeat}):")
        for name, seconds in times.items():
            print(f"  {name:<8} {seconds:8.3f} s")
        print(f"  page size: {sizes['big']:,} bytes at {args.batches} batches, {sizes['small']:,} at 10")
        print(f"  page / audit: {times['page'] / times['audit']:.2f}x   row / audit: {times['row'] / times['audit']:.2f}x"
              f"   page@{args.batches} / page@10: {times['page'] / times['page@10']:.1f}x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
