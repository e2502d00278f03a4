"""Persistent kernel-cost cache in SQLite.

One row per (backend, target, device, versions, kernel key): the measured cost in ms, or NULL with a status
for a kernel that failed to build or run. Safe for several processes at once (WAL journal, busy timeout,
INSERT OR REPLACE). The cache touches only what is its own: a damaged SQLite file at its path is moved aside
with a warning and rebuilt; a directory, a path below a regular file, a file that is not SQLite, or another
application's SQLite database is an error naming the path (`CostCacheError`), and nothing is moved or written.
"""
from __future__ import annotations

import logging
import math
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Optional

try:  # the package's error family; this module also loads on its own (spawned test writers), without it
    from ..errors import CostError as _Base
except ImportError:
    _Base = RuntimeError  # type: ignore[misc,assignment]

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
APPLICATION_ID = 0x7461736F  # "taso": marks a database this project made
CORRUPT_WORDS = ("not a database", "malformed", "integrity check failed", "disk image", "file is encrypted")


class CostCacheError(_Base):
    """The cost cache path is not ours to use (a directory, a non-database file, another app's database) or
    cannot be created; one line naming the path."""


def check_cache_path(path: Optional[Path]) -> None:
    """Raise CostCacheError unless `path` can be this project's cost cache: a missing file in a folder that exists
    or can be made, an empty file, or an SQLite database (ours, or damaged and so moved aside when opened)."""
    if path is None:
        return
    path = Path(path)
    for anc in list(reversed(path.parents)):
        if anc.exists() and not anc.is_dir():
            raise CostCacheError(f"cost cache '{path}' cannot be made: '{anc}' is a file, not a folder")
    if path.is_dir():
        raise CostCacheError(f"cost cache '{path}' is a directory: set the cache to a file path, e.g. "
                             f"'{path / 'costs.sqlite'}'")
    if path.exists():
        if not path.is_file():
            raise CostCacheError(f"cost cache '{path}' is not a regular file")
        try:
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise CostCacheError(f"cannot read cost cache '{path}': {e.strerror}") from None
        if head and head != SQLITE_MAGIC:
            raise CostCacheError(f"cost cache '{path}' is not a cost cache (not an SQLite database); it was left "
                                 f"as it is: remove it or set another cache path")

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
        check_cache_path(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CostCacheError(f"cannot create the cost cache folder '{self.path.parent}': {e.strerror}") from None
        try:
            self._conn = self._open(str(self.path))
        except sqlite3.DatabaseError as e:
            if not _corrupt(e):
                raise CostCacheError(f"cannot open cost cache '{self.path}': {str(e).splitlines()[0]}") from None
            self._move_aside(e)
            self._conn = self._open(str(self.path))
        return self._conn

    def _open(self, where: str) -> sqlite3.Connection:
        conn = sqlite3.connect(where, timeout=self.timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            if (tables and "costs" not in tables) or app not in (0, APPLICATION_ID):
                raise CostCacheError(f"cost cache '{where}' is another application's SQLite database (tables: "
                                     f"{', '.join(sorted(tables)) or 'none'}); it was left as it is: set another "
                                     f"cache path")
            if app == 0:
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(SCHEMA)
            row = conn.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else 'no answer'}")
        except (sqlite3.DatabaseError, CostCacheError):
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
            if self.path is None or not _corrupt(e):
                raise
            self.close()
            self._move_aside(e)
            return fn(self._connect())

    # ------------------------------------------------------------------ queries
    def get_many(self, scope: Scope, keys: Iterable[str]) -> dict[str, float]:
        """Cached costs (ms; inf for failed kernels) of the given kernel keys."""
        return {k: (math.inf if c is None else float(c)) for k, c in self._select(scope, keys, "cost_ms")}

    def get_details(self, scope: Scope, keys: Iterable[str]) -> dict[str, str]:
        """The detail text stored with each of the given keys (for rows whose detail is the datum, e.g. a learned
        grouping)."""
        return {k: d for k, d in self._select(scope, keys, "detail") if d is not None}

    def _select(self, scope: Scope, keys: Iterable[str], column: str) -> list[tuple]:
        """(kernel key, `column`) of the stored rows among `keys` in `scope`, queried in chunks of 500 keys."""
        keys = list(keys)
        if not keys:
            return []

        def q(conn):
            rows = []
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                rows += conn.execute(
                    f"SELECT kernel, {column} FROM costs WHERE backend=? AND target=? AND device=? AND versions=? "
                    f"AND kernel IN ({','.join('?' * len(chunk))})", (*scope, *chunk)).fetchall()
            return rows

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


def _corrupt(err: Exception) -> bool:
    """Whether an SQLite error says the database file is damaged (not busy, locked or unwritable)."""
    text = str(err).lower()
    return any(w in text for w in CORRUPT_WORDS)
