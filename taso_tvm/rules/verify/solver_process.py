"""Z3 queries under a hard deadline, in a separate solver process.

Z3 does not always honour its own timeout while it instantiates quantifiers, so every solver call of the verifier
runs in a child interpreter that is killed at a deadline. The child is a fresh Python (spawned: `sys.executable`,
never a fork of this process with its threads and TVM state) that imports only z3 and answers SMT-LIB2 queries over
a pipe; it is kept for the next query and replaced when it is killed. Queries are plain text, so the child starts in
a fraction of a second.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Optional

_SERVER = r"""
import json, sys
import z3
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    req = json.loads(line)
    try:
        s = z3.Solver()
        for k, v in req.get("params", {}).items():
            s.set(k, v)
        s.set("timeout", int(req["timeout"] * 1000))
        s.from_string(req["smt2"])
        r = s.check()
        ans = [str(r), s.reason_unknown() if r == z3.unknown else ""]
    except Exception as err:  # noqa: BLE001
        ans = ["unknown", "error: %s" % err]
    out.write((json.dumps(ans) + "\n").encode())
    out.flush()
"""

_STATE: dict = {}


def _stop() -> None:
    proc = _STATE.pop("proc", None)
    if proc is not None:
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def _proc() -> subprocess.Popen:
    if _STATE.get("pid") != os.getpid():  # inherited from a parent process: not ours to use
        _STATE.clear()
    proc = _STATE.get("proc")
    if proc is None or proc.poll() is not None:
        _stop()
        proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, close_fds=True)
        _STATE.update(proc=proc, pid=os.getpid())
    return proc


def check_smt2(text: str, timeout: float, params: Optional[dict] = None, deadline: Optional[float] = None) -> tuple:
    """Check an SMT-LIB2 query: (result, reason) with result 'sat', 'unsat' or 'unknown'. The solver gets `timeout`
    seconds; the process is killed after `deadline` seconds (default 2 * timeout + 2). A process that dies or does
    not answer by the deadline is replaced and asked once more (a child can be lost to a signal or a stall that has
    nothing to do with the query); the second answer stands."""
    result, reason = _check_once(text, timeout, params, deadline)
    if result == "unknown" and reason.startswith(("solver did not stop", "the solver process died")):
        result, reason = _check_once(text, timeout, params, deadline)
    return result, reason


def _check_once(text: str, timeout: float, params: Optional[dict], deadline: Optional[float]) -> tuple:
    deadline = 2 * timeout + 2.0 if deadline is None else deadline
    try:
        proc = _proc()
        proc.stdin.write((json.dumps({"smt2": text, "timeout": timeout, "params": params or {}}) + "\n").encode())
        proc.stdin.flush()
    except OSError as err:
        _stop()
        return "unknown", f"the solver process died ({err})"
    end = time.monotonic() + deadline
    buf = b""
    fd = proc.stdout.fileno()
    while True:
        left = end - time.monotonic()
        if left <= 0:
            _stop()
            return "unknown", f"solver did not stop within {deadline:.0f} s"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            _stop()
            return "unknown", "the solver process died"
        buf += chunk
        if buf.endswith(b"\n"):
            try:
                result, reason = json.loads(buf.decode())
            except ValueError:
                _stop()
                return "unknown", "the solver process sent garbage"
            return result, reason
