"""A real Airflow api-server and a headless Debian Chromium: the watermark pages as a user sees them.

Used by the end-to-end browser test (``tests/watermark_ops/airflow/test_ui_browser.py``) and by
``make screenshot`` (the README's picture of the ``make run`` checkpoint).

* :func:`api_server` starts ``airflow api-server`` on 127.0.0.1 in its own process group, waits
  for its health endpoint, and stops that group by its PID afterwards (SIGTERM, then SIGKILL).
* :func:`chromium` launches Debian's ``/usr/bin/chromium`` through Playwright (``executable_path``:
  no browser is downloaded) with ``--no-sandbox --disable-gpu --disable-background-networking``
  (this machine's network is closed: without the last flag Chromium keeps trying Google's hosts).
* :func:`login` signs in through SimpleAuthManager's own login form, as a person does; the UI
  then holds the ``_token`` cookie that the plugin's routes check.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "api_server", "auth_environment", "chromium", "free_port", "login"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def auth_environment(folder: Path, user: str = "admin", password: str = "admin") -> dict[str, str]:
    """SimpleAuthManager with one admin user and its password file in ``folder``, and a JWT secret
    (the api-server signs the UI's token with it)."""
    folder.mkdir(parents=True, exist_ok=True)
    passwords = folder / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({user: password}))
    secret = folder / "jwt_secret"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(48))
    return {
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": secret.read_text(),
    }


@contextmanager
def api_server(env: dict[str, str], log_file: Path, port: int | None = None,
               timeout_s: float = 120.0, airflow: str | None = None) -> Iterator[str]:
    """Run ``airflow api-server`` on 127.0.0.1 for the ``with`` block.

    :param env: the whole environment of the server (its metadata DB, plugins folder, auth).
    :param log_file: where its output goes.
    :param port: default a free port.
    :param airflow: the ``airflow`` command (default this Python's, beside it: another virtual
        environment's, e.g. one with the wheel installed, runs that installation's server).
    :return: (yields) the base URL, ``http://127.0.0.1:<port>``.
    :raises RuntimeError: when the server exits or is not healthy within ``timeout_s``, with the
        end of its log.
    """
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    airflow = airflow or str(Path(sys.executable).parent / "airflow")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        process = subprocess.Popen([airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)], env=env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"airflow api-server exited with {process.returncode}:\n{_tail(log_file)}")
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"airflow api-server not healthy after {timeout_s} s:\n{_tail(log_file)}")
            time.sleep(0.5)
        yield base
    finally:
        _stop_group(process)


def _stop_group(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (its PID is the group id), SIGKILL what is left after
    ``grace_s``, and reap the server."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        process.wait()


def _tail(log_file: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Debian Chromium driven by Playwright (``playwright.sync_api.Browser``), with a
    new, empty profile (Playwright's own temporary one: nothing of an earlier run leaks in).

    :raises FileNotFoundError: when ``/usr/bin/chromium`` is missing (``apt-get install chromium``;
        ``make venv`` installs it).
    """
    if not os.access(CHROMIUM, os.X_OK):
        raise FileNotFoundError(f"{CHROMIUM} is missing: install Debian's package (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def login(page, base: str, user: str = "admin", password: str = "admin") -> None:
    """Sign in through SimpleAuthManager's login form and wait for the UI's token cookie.

    :param page: a ``playwright.sync_api.Page``.
    :raises TimeoutError: when no ``_token`` cookie arrives within 30 s (wrong password, say).
    """
    page.goto(f"{base}/auth/login/?next={base}/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    deadline = time.monotonic() + 30
    while not any(c["name"] == "_token" for c in page.context.cookies()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no _token cookie after signing in as {user} at {base}")
        page.wait_for_timeout(200)
