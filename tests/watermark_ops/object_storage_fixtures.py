"""Real Spark-written checkpoints on the S3 API (the session's moto server): helpers for the
object-storage tests of the core, the tail and the CLI.

Spark here cannot write to ``s3a://`` (no connector jars), so a checkpoint written by a local run
(``checkpoint_fixtures.restart_history``: five real restarts of ``flight_windows``) is copied into
a bucket as Spark on S3 would have left it:

* the files S3A writes: ``metadata``, ``offsets/N``, ``commits/N``, ``sources/0/K``, ``state/...``
  (no ``.N.crc``: those are the local filesystem's checksum files);
* the file source's log names the landed files by their URI: a query reading ``s3a://b/landing``
  records ``s3a://b/landing/<file>``; the local run recorded ``file:///.../landing/<file>``, so
  the copy's ``sources/0`` entries name the same files under the bucket's ``landing/`` (the
  landed files are uploaded there, byte for byte);
* the progress log ``<checkpoint>.progress.jsonl`` beside the checkpoint, as the driver writes it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from watermark_ops.examples.s3server import DelayProxy


def new_bucket(fs: Any) -> str:
    """A fresh bucket (valid S3 name) on the server; returns its name."""
    name = f"wo-{uuid.uuid4().hex[:12]}"
    fs.call_s3("create_bucket", Bucket=name)
    fs.invalidate_cache()
    return name


def s3_files(checkpoint: Path, url: str, landing: Path | None = None,
             landing_url: str | None = None) -> dict[str, bytes]:
    """``{s3 url: bytes}`` of a local checkpoint as S3A would hold it (see the module docstring),
    with the progress log beside it; ``landing`` → ``landing_url`` rewrites the file source log's
    URIs (``file://<landing>/x`` → ``s3a://<landing_url>/x``) and adds the landed files."""
    files: dict[str, bytes] = {}
    for path in sorted(checkpoint.rglob("*")):
        if not path.is_file() or path.name.endswith(".crc"):
            continue
        relative = path.relative_to(checkpoint).as_posix()
        data = path.read_bytes()
        if landing is not None and relative.startswith("sources/"):
            data = data.replace(f"file://{landing}/".encode(), f"s3a://{landing_url.removeprefix('s3://')}/".encode())
        files[f"{url}/{relative}"] = data
    log = Path(f"{checkpoint}.progress.jsonl")
    if log.exists():
        files[f"{url}.progress.jsonl"] = log.read_bytes()
    if landing is not None:
        for path in sorted(landing.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                files[f"{landing_url}/{path.name}"] = path.read_bytes()
    return files


def upload(fs: Any, files: dict[str, bytes]) -> None:
    """Write the objects (one PUT each) and forget cached listings."""
    fs.pipe(files)
    fs.invalidate_cache()


def uploaded_checkpoint(fs: Any, checkpoint: Path) -> str:
    """A local checkpoint (with its progress log) uploaded to ``s3://<new bucket>/cp``; returns that URL."""
    url = f"s3://{new_bucket(fs)}/cp"
    upload(fs, s3_files(checkpoint, url))
    return url


def offsets_ids(checkpoint: Path) -> list[int]:
    """The batch ids of ``offsets/`` of a local checkpoint, ascending."""
    return sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())


def counting(server) -> DelayProxy:
    """A :class:`DelayProxy` (no delay) in front of the server: counts requests by kind."""
    return DelayProxy(server.endpoint_url, 0.0)


def proxied_filesystem(proxy: DelayProxy, **options: Any) -> Any:
    """A new s3fs filesystem reaching the server through ``proxy``."""
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **{**proxy.storage_options(), **options})


def key_path(url: str) -> str:
    """``s3://bucket/key`` → ``/bucket/key``, the path a request for it carries."""
    return "/" + url.removeprefix("s3://")


def json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode()
