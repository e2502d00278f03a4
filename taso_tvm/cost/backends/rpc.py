"""Sessions on a remote device through a TVM RPC tracker, failing fast with a one-line message."""
from __future__ import annotations

import logging
import socket
import time
from typing import Any

from ..config import parse_rpc
from .tvm_build import failure_reason

log = logging.getLogger(__name__)


class RpcError(RuntimeError):
    """The RPC tracker or server cannot be used; the message is one line."""


def _key_available(summary: dict, key: str) -> bool:
    info = summary.get("queue_info", {}).get(key)
    if info and (info.get("free", 0) or info.get("pending", 0)):
        return True
    return any(str(s.get("key", "")).split(":")[-1] == key for s in summary.get("server_info", []))


def connect(rpc: str, timeout_s: float = 60.0) -> Any:
    """An RPC session for 'HOST:PORT:KEY': `tvm.rpc.connect_tracker(host, port).request(key)`.

    Raises RpcError when the tracker does not answer, or no server with that key registers within timeout_s
    (TVM's own client would retry for a minute, or wait forever for a key no server has).
    """
    from tvm import rpc as tvm_rpc

    host, port, key = parse_rpc(rpc)
    try:
        socket.create_connection((host, port), timeout=min(5.0, timeout_s)).close()
    except OSError as e:
        raise RpcError(f"cannot reach RPC tracker {host}:{port}: {e.strerror or e}") from None
    try:
        tracker = tvm_rpc.connect_tracker(host, port)
    except Exception as e:  # noqa: BLE001
        raise RpcError(f"cannot reach RPC tracker {host}:{port}: {failure_reason(e)}") from None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            summary = tracker.summary()
        except Exception as e:  # noqa: BLE001
            raise RpcError(f"RPC tracker {host}:{port} does not answer: {failure_reason(e)}") from None
        if _key_available(summary, key):
            break
        if time.monotonic() > deadline:
            raise RpcError(f"no RPC server with key '{key}' registered at tracker {host}:{port} "
                           f"within {timeout_s:.0f} s")
        time.sleep(0.5)
    try:
        return tracker.request(key, priority=1, session_timeout=0, max_retry=3)
    except Exception as e:  # noqa: BLE001
        raise RpcError(f"cannot get a session for key '{key}' from RPC tracker {host}:{port}: {failure_reason(e)}") \
            from None
