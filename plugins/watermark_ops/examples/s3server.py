"""A local S3 API for tests, benchmarks and the demo: moto's standalone server, optionally behind a
delaying, counting proxy.

This machine has no object store and Spark here has no S3 connector jars, so object-storage tests
copy real Spark-written checkpoints into ``moto.server`` (``python -m moto.server -H 127.0.0.1 -p
PORT``, a real S3 REST API in one process) and read them back over HTTP with s3fs, exactly as
against AWS. The server is a child process bound to 127.0.0.1, recorded by PID and stopped by it.

:class:`DelayProxy` sits in front of it on another 127.0.0.1 port: it sleeps a fixed time per
request (a region's round trip, e.g. 20 ms) and counts requests by kind (``LIST``, ``GET``,
``HEAD``, ``PUT``, ...), which is how the benchmarks report requests made and a floor measured on
the same server.

Command line (used by ``make s3-up`` / ``make s3-down``)::

    python -m watermark_ops.examples.s3server up     # prints the endpoint; PID in <runtime>/s3/pid
    python -m watermark_ops.examples.s3server down

This module belongs to the examples and tests: the package's generic code never imports it.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["DelayProxy", "S3Server", "aws_connection", "error_xml", "free_port", "start_s3_server", "upload_tree"]

#: moto accepts any credentials; these are the ones botocore's docs use for local servers.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    """A running ``moto.server`` child process.

    :ivar endpoint_url: ``http://127.0.0.1:<port>``.
    :ivar pid: the child's PID (its own process group).
    """

    endpoint_url: str
    pid: int
    process: subprocess.Popen | None = field(default=None, repr=False)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by its PID (SIGTERM to its process group, SIGKILL after ``timeout`` s)."""
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(timeout)

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options reaching this server: ``{"key", "secret", "endpoint_url", ...}``."""
        return {"key": ACCESS_KEY, "secret": SECRET_KEY,
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": REGION}}

    def filesystem(self, **options: Any) -> Any:
        """A new (uncached) s3fs filesystem on this server; ``options`` are added to s3fs's."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **{**self.storage_options(), **options})


def start_s3_server(port: int | None = None, *, log: Path | None = None, timeout: float = 30.0) -> S3Server:
    """Start ``python -m moto.server`` on 127.0.0.1 and wait until it answers.

    :param port: the TCP port; a free one when None.
    :param log: file for the server's output (discarded when None).
    :param timeout: seconds to wait for the server to answer.
    :raises RuntimeError: when the server exits or does not answer within ``timeout``.
    """
    port = port or free_port()
    out = open(log, "ab") if log else subprocess.DEVNULL
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{port}", process.pid, process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto.server exited with {process.returncode} before answering on port {port}")
        try:
            with urllib.request.urlopen(server.endpoint_url + "/moto-api/", timeout=2):
                return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto.server did not answer on {server.endpoint_url} within {timeout:.0f} s")
            time.sleep(0.2)


def _kind(method: str, path: str) -> str:
    """``LIST`` for a bucket-level GET (ListObjects), else the HTTP method."""
    bare, _, query = path.partition("?")
    if method == "GET" and (bare.strip("/").count("/") == 0 or "list-type" in query or "prefix=" in query):
        return "LIST"
    return method


class DelayProxy:
    """A threaded HTTP proxy on 127.0.0.1 that delays each request and counts them by kind.

    :param upstream: the S3 server's endpoint URL.
    :param delay_s: seconds slept before forwarding each request (e.g. 0.02: a region's round trip).
    :ivar endpoint_url: where clients connect.
    :ivar counts: ``Counter`` of request kinds (``LIST``, ``GET``, ``HEAD``, ``PUT``, ...).
    :ivar fail: optional callable ``(method, path) -> None | int | (int, bytes)``: answer instead
        of forwarding, for tests of retries: a status with S3's ``SlowDown`` error (e.g. 503, a
        throttled request), or a status and a body sent as is (e.g. ``(404, error_xml("NoSuchKey"))``
        for an object gone, ``(200, b"v1\n{")`` for a half-written one). ``path`` is the request's
        path with its query (``/bucket/key?...``).
    """

    def __init__(self, upstream: str, delay_s: float = 0.0) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.delay_s = delay_s
        self.counts: collections.Counter[str] = collections.Counter()
        self.fail: Any = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _forward(self) -> None:
                with proxy._lock:
                    proxy.counts[_kind(self.command, self.path)] += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.delay_s:
                    time.sleep(proxy.delay_s)
                answer = proxy.fail(self.command, self.path) if proxy.fail else None
                if answer:
                    status, payload = answer if isinstance(answer, tuple) else (answer, error_xml("SlowDown"))
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # A HEAD answer has no body but the object's length (what clients read as its size).
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length if length is not None else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Zero the request counts."""
        with self._lock:
            self.counts.clear()

    def total(self) -> int:
        """All requests counted since the last :meth:`reset`."""
        return sum(self.counts.values())

    def close(self) -> None:
        """Stop serving (the thread ends)."""
        self._server.shutdown()
        self._server.server_close()

    def storage_options(self) -> dict[str, Any]:
        """s3fs options reaching the server through this proxy."""
        return S3Server(self.endpoint_url, 0).storage_options()


def error_xml(code: str, message: str = "injected by DelayProxy") -> bytes:
    """An S3 error body (``<Error><Code>...``), e.g. ``NoSuchKey``, ``SlowDown``, ``AccessDenied``."""
    return f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()


def aws_connection(endpoint_url: str, **extra: Any) -> str:
    """The JSON form of an Airflow ``aws`` connection to ``endpoint_url`` (for ``AIRFLOW_CONN_<ID>``).

    ``extra`` is added to the connection's extra (e.g. ``config_kwargs``).
    """
    return json.dumps({"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY,
                       "extra": {"endpoint_url": endpoint_url, "region_name": REGION, **extra}})


def upload_tree(fs: Any, local: str | os.PathLike, url: str) -> int:
    """Copy a local folder (e.g. a Spark-written checkpoint, its ``.crc`` files included) to ``url``.

    :param fs: an s3fs filesystem.
    :param url: ``s3://bucket/prefix``; the bucket is created when missing.
    :return: the number of files uploaded.
    """
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    if not fs.exists(bucket):
        fs.call_s3("create_bucket", Bucket=bucket)  # us-east-1: no LocationConstraint (s3fs's mkdir sends one)
    count = 0
    files = {}
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            files[url.rstrip("/") + "/" + path.relative_to(local).as_posix()] = path.read_bytes()
            count += 1
    if files:
        fs.pipe(files)
    fs.invalidate_cache()
    return count


def _state() -> Path:
    home = Path(os.environ.get("WATERMARK_OPS_HOME", ".runtime"))
    return home / "s3"


def main(argv: list[str] | None = None) -> int:
    """``up``: start the server (PID and endpoint recorded under ``<runtime>/s3``); ``down``: stop it."""
    parser = argparse.ArgumentParser(prog="python -m watermark_ops.examples.s3server")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    state = _state()
    state.mkdir(parents=True, exist_ok=True)
    pid_file = state / "pid"
    if args.action == "up":
        if pid_file.exists():
            print(f"already running: PID {pid_file.read_text().strip()} ({(state / 'endpoint').read_text().strip()})")
            return 0
        server = start_s3_server(args.port, log=state / "moto.log")
        pid_file.write_text(str(server.pid))
        (state / "endpoint").write_text(server.endpoint_url)
        print(f"S3 API at {server.endpoint_url} (moto.server, PID {server.pid}); "
              f"AWS_ENDPOINT_URL={server.endpoint_url} AWS_ACCESS_KEY_ID={ACCESS_KEY} "
              f"AWS_SECRET_ACCESS_KEY={SECRET_KEY}")
        return 0
    if not pid_file.exists():
        print("no S3 server recorded")
        return 0
    pid = int(pid_file.read_text())
    S3Server("", pid).stop()
    pid_file.unlink()
    (state / "endpoint").unlink(missing_ok=True)
    print(f"stopped moto.server PID {pid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
