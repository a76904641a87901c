"""The terminal face of the state reader and the restart preflight: ``watermark-ops state`` and
``watermark-ops preflight`` (registered by :mod:`watermark_ops.terminal.cli`, which also adds
``--conn-id``/``--storage-options`` and resolves them into ``args.where``)::

    watermark-ops state CHECKPOINT [--json] [--min-batches-to-retain N] [--growing-batches N]
                        [--max-chain N] [--max-versions-over-retain N] [--files-only]
    watermark-ops preflight CHECKPOINT [--conf KEY=VALUE ...] [--spark-version X] [--json]

``state`` reads the checkpoint's state (:func:`watermark_ops.core.state.reader.read_state`) and
prints one row per stateful operator (provider, partitions and stores, whether a watermark bounds
it, rows per newest batches, the chain a restart replays, the newest snapshot, versions kept, bytes
on disk), then the state findings (:func:`watermark_ops.core.state.rules.state_findings`).
``--json`` prints :func:`watermark_ops.render.state.state_document`. Rows come from the progress
log beside the checkpoint when the recorder wrote one, else from the files (``--files-only``
ignores the log). Exit 0 without a finding, 1 with a warning, 2 when a state file cannot be read.

``preflight`` answers whether the next start of the checkpoint will work
(:func:`watermark_ops.core.state.preflight.preflight`): ``go``, ``warn`` or ``no_go``, each finding
with the file that proves it and a recipe. ``--conf`` gives the confs the next run sets (repeat),
``--spark-version`` the Spark it runs (default: not checked). Exit 0 go, 1 warn, 2 no-go; a bad
``--conf`` exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["SUBCOMMANDS", "parse_conf"]


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{k: v}``. :raises ValueError: for an item without ``=`` or an empty key."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected KEY=VALUE, e.g. spark.sql.shuffle.partitions=4")
        out[key.strip()] = value.strip()
    return out


def _state_arguments(parser: argparse.ArgumentParser) -> None:
    from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS as D

    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL (s3://, gs://, ...)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--min-batches-to-retain", type=int, default=100, metavar="N",
                        help="the query's spark.sql.streaming.minBatchesToRetain (default 100, Spark's)")
    parser.add_argument("--growing-batches", default=None, metavar="N",
                        help=f"state_growing over this many batches (default {D.growing_batches}; 'none' disables)")
    parser.add_argument("--max-chain", default=None, metavar="N",
                        help="state_never_compacted above this many files to replay (default auto: the checkpoint's "
                             "minDeltasForSnapshot, 10 unless frozen, plus 5; 'none' disables)")
    parser.add_argument("--max-versions-over-retain", default=None, metavar="N",
                        help=f"state_files_accumulating above minBatchesToRetain + N versions "
                             f"(default {D.max_versions_over_retain})")
    parser.add_argument("--files-only", action="store_true",
                        help="count rows from the state files even when a progress log exists")


def _state(args: argparse.Namespace) -> int:
    from watermark_ops import render
    from watermark_ops.render import state as render_state
    from watermark_ops.core.state.reader import read_state
    from watermark_ops.core.state.rules import state_findings
    from watermark_ops.core.thresholds import StateThresholds

    try:
        overrides = {name: getattr(args, name) for name in ("growing_batches", "max_chain", "max_versions_over_retain")
                     if getattr(args, name) is not None}
        thresholds = StateThresholds(**overrides)
    except ValueError as exc:
        print(f"watermark-ops state: {exc}", file=sys.stderr)
        return 2
    state = read_state(args.checkpoint, min_batches_to_retain=args.min_batches_to_retain,
                       progress_records=() if args.files_only else None, **args.where)
    findings = state_findings(state, thresholds)
    if args.json:
        print(json.dumps(render_state.state_document(state, findings), indent=2))
    else:
        render_state.print_state(state, findings, render.terminal_console())
    severities = {f.severity for f in findings}
    return 2 if "error" in severities else 1 if "warning" in severities else 0


def _preflight_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL (s3://, gs://, ...)")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE",
                        help="a conf the next run sets (repeat), e.g. spark.sql.shuffle.partitions=4")
    parser.add_argument("--spark-version", metavar="X", help="the Spark release the next run uses, e.g. 4.2.0")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _preflight(args: argparse.Namespace) -> int:
    from watermark_ops import render
    from watermark_ops.render import state as render_state
    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.progress import progress_log_path, read_progress_log
    from watermark_ops.core.state.preflight import preflight
    from watermark_ops.core.state.reader import read_state

    try:
        conf = parse_conf(args.conf)
    except ValueError as exc:
        print(f"watermark-ops preflight: {exc}", file=sys.stderr)
        return 2
    checkpoint = read_checkpoint(args.checkpoint, **args.where)
    try:
        records = read_progress_log(progress_log_path(checkpoint.location), **args.where).records
    except OSError:
        records = []
    state = read_state(args.checkpoint, checkpoint=checkpoint, progress_records=records, **args.where)
    report = preflight(checkpoint, state, conf, args.spark_version, records)
    if args.json:
        print(json.dumps(render_state.preflight_document(report), indent=2))
    else:
        render_state.print_preflight(report, render.terminal_console())
    return report.exit_code


#: ``(name, help, add_arguments, run)`` of each subcommand, for :func:`watermark_ops.terminal.cli.build_parser`.
SUBCOMMANDS = [
    ("state", "the state of each stateful operator: rows per batch, watermark bound, the chain a restart replays",
     _state_arguments, _state),
    ("preflight", "will the next restart of this checkpoint work? go, warn or no-go, with the file and the recipe",
     _preflight_arguments, _preflight),
]
