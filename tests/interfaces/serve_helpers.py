"""Run ``recalld serve`` (or any server) on a loopback port from a test."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_until_serving(process: subprocess.Popen[str], port: int, seconds: float = 60.0) -> None:
    """Return once the server on 127.0.0.1:``port`` answers ``/healthz``; fail the test if
    its process exits first or it takes longer than ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("recalld serve did not answer")
