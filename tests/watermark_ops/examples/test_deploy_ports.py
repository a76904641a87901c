"""The deployment's ports: outside the kernel's ephemeral range, and a taken one refused up front.

A port inside Linux's ephemeral range (``net.ipv4.ip_local_port_range``) can be taken at any moment
by an outgoing connection or a port-0 server of another process: PostgreSQL at 55432 once failed to
start in CI that way (the other test worker's servers). ``deploy.up()`` checks every port before it
starts anything and names the taken ones.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def _ephemeral_range() -> tuple[int, int]:
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if ranges.exists():
        low, high = ranges.read_text().split()
        return int(low), int(high)
    return 32768, 60999  # Linux's default


def test_every_port_is_below_the_ephemeral_range():
    from watermark_ops.examples.deploy import PORTS

    low, high = _ephemeral_range()
    inside = {name: port for name, port in PORTS.items() if low <= port <= high}
    assert inside == {}, f"ports in the ephemeral range {low}-{high}: {inside}"


def test_a_taken_port_is_named_and_nothing_is_started(tmp_path, monkeypatch):
    from watermark_ops.examples import deploy

    monkeypatch.setenv("WATERMARK_OPS_HOME", str(tmp_path))
    with socket.socket() as holder:
        holder.bind((deploy.HOST, 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setitem(deploy.PORTS, "postgres", port)
        with pytest.raises(deploy.DeployError, match=f"ports in use on 127.0.0.1: postgres {port}"):
            deploy.up()
    assert deploy.running() == {} and not (tmp_path / "deploy" / "pids").exists()
