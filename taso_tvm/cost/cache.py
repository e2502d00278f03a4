"""Persistent kernel-cost cache in SQLite.

One row per (backend, target, device, versions, kernel key): the measured cost in ms, or NULL with a status
for a kernel that failed to build or run. Safe for several processes at once (WAL journal, busy timeout,
INSERT OR REPLACE); a file that is not a readable database is moved aside with a warning and rebuilt.
"""
from __future__ import annotations

import logging
import math
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Optional

log = logging.getLogger(__name__)

SCHEMA = """CREATE TABLE IF NOT EXISTS costs (
    backend TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL, versions TEXT NOT NULL,
    kernel TEXT NOT NULL, label TEXT, cost_ms REAL, status TEXT NOT NULL, detail TEXT, created REAL,
    PRIMARY KEY (backend, target, device, versions, kernel))"""

Scope = tuple  # (backend, target, device, versions)


class CostCache:
    """Kernel costs by scope and kernel key. `path=None` keeps them in memory only."""

    def __init__(self, path: Optional[Path], timeout_s: float = 60.0):
        self.path = Path(path) if path is not None else None
        self.timeout_s = timeout_s
        self._conn: Optional[sqlite3.Connection] = None

    # ------------------------------------------------------------------ connection
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if self.path is None:
            self._conn = self._open(":memory:")
            return self._conn
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = self._open(str(self.path))
        except sqlite3.DatabaseError as e:
            self._move_aside(e)
            self._conn = self._open(str(self.path))
        return self._conn

    def _open(self, where: str) -> sqlite3.Connection:
        conn = sqlite3.connect(where, timeout=self.timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(SCHEMA)
            row = conn.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else 'no answer'}")
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def _move_aside(self, err: Exception) -> None:
        assert self.path is not None
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        log.warning("cost cache %s is unreadable (%s); moved it to %s and starting a new one", self.path,
                    str(err).splitlines()[0], aside.name)
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                p.replace(Path(str(aside) + suffix))

    def _run(self, fn):
        """Run fn(conn); on a corrupt database move the file aside once and retry on a fresh one."""
        try:
            return fn(self._connect())
        except sqlite3.DatabaseError as e:
            corrupt = not isinstance(e, sqlite3.OperationalError) or "malformed" in str(e) \
                or "not a database" in str(e)
            if self.path is None or not corrupt:
                raise
            self.close()
            self._move_aside(e)
            return fn(self._connect())

    # ------------------------------------------------------------------ queries
    def get_many(self, scope: Scope, keys: Iterable[str]) -> dict[str, float]:
        """Cached costs (ms; inf for failed kernels) of the given kernel keys."""
        keys = list(keys)
        if not keys:
            return {}

        def q(conn):
            out = {}
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                rows = conn.execute(
                    f"SELECT kernel, cost_ms FROM costs WHERE backend=? AND target=? AND device=? AND versions=? "
                    f"AND kernel IN ({','.join('?' * len(chunk))})", (*scope, *chunk)).fetchall()
                out.update({k: (math.inf if c is None else float(c)) for k, c in rows})
            return out

        return self._run(q)

    def put_many(self, scope: Scope, rows: Iterable[tuple]) -> None:
        """rows: (kernel key, label, cost_ms, status, detail); a non-finite cost is stored as NULL."""
        now = time.time()
        data = [(*scope, k, label, (c if c is not None and math.isfinite(c) else None), status, detail, now)
                for k, label, c, status, detail in rows]
        if not data:
            return

        def q(conn):
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR REPLACE INTO costs VALUES (?,?,?,?,?,?,?,?,?,?)", data)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        self._run(q)

    def count(self) -> int:
        return int(self._run(lambda c: c.execute("SELECT COUNT(*) FROM costs").fetchone()[0]))

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
