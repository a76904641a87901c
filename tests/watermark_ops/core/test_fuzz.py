"""Fuzzed checkpoints: mutated copies of a real Spark-written checkpoint never crash the core.

Each example copies the checkpoint that five real restarts wrote (``checkpoint_fixtures.restart_history``,
with its progress log and the landing folder its file source read; the copy's source log is
pointed at the copied landing folder), applies one to three mutations to the offset and commit
logs, ``metadata``, the file source's log (``sources/``), the landed files or the progress log
(truncate, flip bytes, drop / duplicate / reorder lines, change headers, non-UTF-8, huge and
negative numbers, floats and strings where numbers belong, deeply nested JSON, noise files, a
directory or a symlink named like a batch id, a symlink loop, a missing or directory
``metadata``), then runs the reader, the audit (with a state file), the status, the stall
classification, the lateness report (with the landing folder), the late-row ledger, ``watermark-ops
late`` and every rendering. Allowed outcomes: a result (problems in it name their file), or the
documented refusals (``StallInputError`` for a checkpoint that cannot be classified,
``LatenessError`` for a landing folder whose events it cannot recognise, exit status 2 of
``late``). Nothing under the checkpoint or the landing folder may change, and memory stays
bounded: the Python heap's peak while one example runs (``tracemalloc``) stays under
:data:`MEMORY_BOUND` (a stray 23-digit batch file once made the hole check try to allocate 24 GB;
a huge ``logOffset`` once made the ledger build a set of that many log offsets).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops import render
from watermark_ops.terminal import cli
from watermark_ops.core.audit import run_audit
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.lateness import LatenessError, lateness_report
from watermark_ops.core.ledger import late_ledger
from watermark_ops.core.memory import StateFileMemory
from watermark_ops.core.stall import StallInputError, evaluate
from watermark_ops.core.status import CheckpointStatus

pytestmark = pytest.mark.timeout(900)

EXAMPLES = 120
NUMBERS = [b"-99999999999999", b"1e400", b'"5000"', b"null", b"1.5", str(2**70).encode(), b"[]", b"{}", b"true",
           str(10**18).encode(), b"9223372036854775807"]
HEADERS = [b"v0", b"v99", b"vx", b"", b"v-1", b"v" + b"9" * 30, b"V1", b"v1 "]
DEEP = b"[" * 100_000 + b"]" * 100_000
MEMORY_BOUND = 64 * 2**20  # bytes of Python heap per example; the pristine checkpoint is a few kB


@pytest.fixture(scope="module")
def pristine(spark):
    """A read-only copy of the real checkpoint, its progress log and its landing folder; the
    original landing folder's location (what the copy's source log names) is in ``origin``."""
    history = cf.restart_history(spark)
    folder = Path(tempfile.mkdtemp(prefix="fuzz-pristine-"))
    shutil.copytree(history.checkpoint, folder / "cp", symlinks=True)
    shutil.copy(str(history.checkpoint) + ".progress.jsonl", folder / "cp.progress.jsonl")
    shutil.copytree(history.dirs.landing, folder / "landing")
    (folder / "origin").write_text(str(history.dirs.landing))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _copy(pristine: Path, work: Path) -> None:
    """The pristine checkpoint, progress log and landing folder under ``work``, the source log
    pointing at ``work/landing`` (the same checkpoint moved with its landing folder)."""
    shutil.copytree(pristine / "cp", work / "cp", symlinks=True)
    shutil.copy(pristine / "cp.progress.jsonl", work / "cp.progress.jsonl")
    shutil.copytree(pristine / "landing", work / "landing")
    before, after = f"file://{(pristine / 'origin').read_text()}".encode(), f"file://{work / 'landing'}".encode()
    for path in (work / "cp" / "sources").rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            path.write_bytes(path.read_bytes().replace(before, after))


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _hashes(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):  # no symlink is followed: loops are fine
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                out[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[str(path)] = "dir"
    return out


def _mutate(root: Path, kind: str, pick: int, value: int) -> None:
    files = [p for p in _files(root) if p.parent.name in ("offsets", "commits") or p.name == "metadata"
             or (p.parent.parent.name == "sources" and not p.name.startswith("."))]
    files += [p for p in _files(root.parent / "landing") if not p.name.startswith(".")] if value % 3 == 0 else []
    target = files[pick % len(files)] if files else root / "metadata"
    data = target.read_bytes() if target.is_file() else b""
    log = root / ("offsets" if value % 2 else "commits")
    if kind == "truncate":
        data = data[: value % (len(data) + 1)]
    elif kind == "flip" and data:
        i = value % len(data)
        data = data[:i] + bytes([(data[i] + 1 + value % 255) % 256]) + data[i + 1:]
    elif kind in ("drop_line", "duplicate_line", "reorder_lines"):
        lines = data.split(b"\n")
        i = value % len(lines)
        if kind == "drop_line":
            del lines[i]
        elif kind == "duplicate_line":
            lines.insert(i, lines[i])
        else:
            lines = lines[i:] + lines[:i]
        data = b"\n".join(lines)
    elif kind == "header":
        data = HEADERS[value % len(HEADERS)] + data[data.find(b"\n"):] if b"\n" in data else HEADERS[value % len(HEADERS)]
    elif kind == "not_utf8":
        data = b"\xff\xfe" + data
    elif kind == "number":
        for field in (b'"logOffset":', b'"batchWatermarkMs":', b'"nextBatchWatermarkMs":', b'"batchTimestampMs":',
                      b'"batchId":', b'"timestamp":', b'"dep_time": '):
            if field in data:
                start = data.index(field) + len(field)
                end = start
                while end < len(data) and data[end:end + 1] not in (b",", b"}"):
                    end += 1
                data = data[:start] + NUMBERS[value % len(NUMBERS)] + data[end:]
                break
    elif kind == "deep":
        data = data.split(b"\n")[0] + b"\n" + DEEP
    elif kind == "noise":
        (log / f".{value}.crc").parent.mkdir(exist_ok=True)
        (log / f".{value}.crc").write_bytes(b"\x00crc")
        (log / f"{value}.tmp").write_bytes(b"v1\n{}")
        return
    elif kind == "directory_batch":
        (log / str(value % 12)).mkdir(parents=True, exist_ok=True) if not (log / str(value % 12)).exists() else None
        (log / str(10**22 + value)).mkdir(parents=True, exist_ok=True)
        return
    elif kind == "symlink_batch":
        name = log / str(20 + value % 5)
        if not name.exists() and not name.is_symlink():
            name.symlink_to(name)  # a symlink loop named like a batch id
        other = log / str(30 + value % 5)
        if not other.exists() and not other.is_symlink():
            other.symlink_to("/etc")  # a directory outside, named like a batch id
        return
    elif kind in ("metadata_missing", "metadata_directory"):
        metadata = root / "metadata"
        if metadata.is_dir() and not metadata.is_symlink():
            shutil.rmtree(metadata)
        else:
            metadata.unlink(missing_ok=True)
        if kind == "metadata_directory":
            metadata.mkdir()
        return
    elif kind == "progress_fields":  # odd values where the ledger reads the rule, version and conf
        progress = root.parent / "cp.progress.jsonl"
        lines = progress.read_bytes().split(b"\n")
        i = pick % len(lines)
        odd = [b'"spark_version": "x.y"', b'"spark_version": 3', b'"requested_conf": []',
               b'"requested_conf": {"spark.sql.streaming.statefulOperator.allowMultiple": "maybe"}',
               b'"requested_conf": {"spark.sql.streaming.statefulOperator.allowMultiple": "false"}',
               b'"late_rule": {"kind": "window_end", "event_time": "dep_time", "window_ms": 0}',
               b'"late_rule": {"kind": "event_time", "event_time": ["nope"]}', b'"batch_id": 99999999999999999999']
        if lines[i].startswith(b"{"):
            lines[i] = b"{" + odd[value % len(odd)] + b", " + lines[i][1:]
        progress.write_bytes(b"\n".join(lines))
        return
    elif kind == "progress_log":
        progress = root.parent / "cp.progress.jsonl"
        progress.write_bytes(progress.read_bytes()[: value % 4000] + DEEP[: value % 3] + b"\n{cut\n")
        return
    if target.is_file():
        target.write_bytes(data)


MUTATION = st.tuples(
    st.sampled_from(["truncate", "flip", "drop_line", "duplicate_line", "reorder_lines", "header", "not_utf8",
                     "number", "deep", "noise", "directory_batch", "symlink_batch", "metadata_missing",
                     "metadata_directory", "progress_log", "progress_fields"]),
    st.integers(0, 10_000), st.integers(0, 10_000),
)


def _exercise(root: Path, state: Path) -> list:
    """Every entry point of the core on ``root`` (its landing folder beside it), with the checks
    on what they return; returns what :func:`_render` draws (outside the memory measurement:
    rich's layout is the costly part, and it only draws these results)."""
    location = str(root)
    checkpoint = read_checkpoint(location)
    for problem in checkpoint.problems:
        assert problem.file.startswith(location), problem  # every error names its file
    report = run_audit(location, StateFileMemory(state))
    report.to_json()
    status = CheckpointStatus.of(checkpoint)
    try:
        classification = evaluate(location)
    except StallInputError as refused:
        assert location in str(refused)
        classification = None
    render.status_document(status, classification)
    try:
        lateness = lateness_report(location, [str(root.parent / "landing")])
        lateness.to_dict()
    except LatenessError as refused:
        assert str(root.parent / "landing") in str(refused)
        lateness = None
    ledger = late_ledger(location)
    for problem in ledger.problems:
        assert problem.file, problem  # every problem names its file
    ledger.to_dict(rows=True)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(["late", location, "--json"])
    only_unrecorded = (ledger.found and not ledger.not_replayable and any(b.replayed for b in ledger.batches)
                       and all(p.kind == "no_late_rule" for p in ledger.problems))
    assert code == (0 if ledger.complete or only_unrecorded else 2), (code, err.getvalue()[:500])
    assert code == 0 or err.getvalue()  # a refusal says why
    return [report, status, classification, lateness, ledger]


def _render(report, status, classification, lateness, ledger) -> None:
    """Every rendering of those results."""
    render.audit_report_text(report, limit=0)
    console = render.text_console()
    render.print_status(status, console)
    if classification is not None:
        render.print_classification(classification, console)
    if lateness is not None:
        render.print_lateness_report(lateness, console)
    render.print_late_ledger(ledger, console)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_mutated_real_checkpoints_never_crash_and_are_never_changed(pristine, mutations):
    work = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        _copy(pristine, work)
        for kind, pick, value in mutations:
            _mutate(work / "cp", kind, pick, value)
        before = {**_hashes(work / "cp"), **_hashes(work / "landing")}
        tracemalloc.start()
        try:
            results = _exercise(work / "cp", work / "state" / "audit.json")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < MEMORY_BOUND, f"{peak / 2**20:.0f} MiB for {mutations}"
        _render(*results)
        assert {**_hashes(work / "cp"), **_hashes(work / "landing")} == before  # reported, never fixed or deleted
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_copied_checkpoint_replays_completely_before_any_mutation(pristine, tmp_path):
    _copy(pristine, tmp_path)
    ledger = late_ledger(str(tmp_path / "cp"))
    assert ledger.complete and ledger.totals()["rows_read"] > 0
    assert all(f.startswith(f"file://{tmp_path / 'landing'}") for b in ledger.batches for f in b.files)


def test_a_50_mb_line_is_reported_not_loaded_forever(pristine, tmp_path):
    shutil.copytree(pristine / "cp", tmp_path / "cp", symlinks=True)
    offsets = sorted((tmp_path / "cp" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    offsets[-1].write_bytes(b"v1\n" + b"x" * 50_000_000)
    tracemalloc.start()
    try:
        report = run_audit(str(tmp_path / "cp"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 50_000_000  # the file once or twice in memory, no more
    (finding,) = [f for f in report.findings if f.rule == "unreadable"]
    assert finding.file == str(offsets[-1]) and "[not_json]" in finding.message
    assert len(finding.message) < 500  # the line is quoted, not copied
