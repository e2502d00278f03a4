"""The generator's checkpoint: the finished enumeration units of a run, so that an interrupted run resumes.

The file is data and can name no code: JSON lines of plain values. The first line is a header (format and the
settings' digest); each further line is one finished unit, `{"unit": [family, index], "records": [...]}`, a tab and
the sha256 of that JSON (16 hex digits), appended as the unit finishes. Records are converted to and from plain JSON values explicitly (`encode_records`,
`decode_records`): a GNode, DimSum, ShapeForm or bytes value is a one-key object naming its kind, checked when read.
Reading stops at the first line that is cut off or does not decode (an interruption while writing): that unit and any
after it are redone. A file in another format (an older pickle checkpoint, a stranger's file) is never parsed as
anything but JSON: it is set aside with a warning and the run starts afresh.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from ...safe_read import UnsafeFileError, check_regular_file
from .enumerate import Record
from .graphs import DimSum, GNode, ShapeForm

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "taso-tvm-generate-checkpoint-1"
LINE_SUM_HEX = 16  # hex digits of each line's sha256


class CheckpointDataError(ValueError):
    """A checkpoint line that does not decode to records (a damaged or foreign file); internal to reading."""


# ------------------------------------------------------------------------------------------ values <-> JSON
def _enc(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, DimSum):
        return {"DimSum": [_enc(x) for x in v]}
    if isinstance(v, ShapeForm):
        return {"ShapeForm": v.form}
    if isinstance(v, GNode):
        return {"GNode": [v.op, _enc(v.attrs), _enc(v.args)]}
    if isinstance(v, tuple):
        return [_enc(x) for x in v]
    raise TypeError(f"a generator record holds a {type(v).__name__}, which a checkpoint cannot keep")


def _want(cond: bool, what: str) -> None:
    if not cond:
        raise CheckpointDataError(what)


def _dec(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    _want(isinstance(v, dict) and len(v) == 1, "a value that is not a plain value")
    (kind, body), = v.items()
    if kind == "bytes":
        _want(isinstance(body, str), "bytes that are not hex text")
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise CheckpointDataError("bytes that are not hex text") from None
    if kind == "DimSum":
        parts = _dec(body)
        _want(isinstance(parts, tuple) and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                               and isinstance(p[1], int) for p in parts), "a bad DimSum")
        return DimSum(parts)
    if kind == "ShapeForm":
        _want(isinstance(body, str), "a bad ShapeForm")
        return ShapeForm(body)
    if kind == "GNode":
        _want(isinstance(body, list) and len(body) == 3 and isinstance(body[0], str), "a bad GNode")
        attrs, args = _dec(body[1]), _dec(body[2])
        _want(isinstance(attrs, tuple) and isinstance(args, tuple), "a bad GNode")
        return GNode(body[0], attrs, args)
    raise CheckpointDataError(f"a value of unknown kind {kind!r}")


def encode_records(records: list) -> list:
    """Records as plain JSON values."""
    return [[_enc(r.nodes), _enc(r.outputs), _enc(r.fps), _enc(r.inputs)] for r in records]


def decode_records(data: Any) -> list:
    """Records from `encode_records`'s values; CheckpointDataError if they are not such values."""
    _want(isinstance(data, list), "records that are not a list")
    out = []
    for item in data:
        _want(isinstance(item, list) and len(item) == 4, "a record that is not four values")
        nodes, outputs, fps, inputs = (_dec(x) for x in item)
        _want(all(isinstance(x, tuple) for x in (nodes, outputs, fps, inputs)), "a record with a bad field")
        _want(all(isinstance(n, GNode) for n in nodes) and all(isinstance(f, bytes) for f in fps),
              "a record with bad nodes or fingerprints")
        out.append(Record(nodes, outputs, fps, inputs))
    return out


def _sum(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:LINE_SUM_HEX]


def unit_line(unit: tuple, records: list) -> str:
    """One finished unit as the checkpoint's line: its JSON, a tab and the JSON's checksum (so that a damaged line
    is redone, not read as other graphs), and a newline."""
    body = json.dumps({"unit": list(unit), "records": encode_records(records)}, separators=(",", ":"),
                      allow_nan=False)
    return f"{body}\t{_sum(body)}\n"


def parse_unit_line(line: str) -> tuple:
    """(unit, records) of a line from `unit_line`; CheckpointDataError if it is not one."""
    body, _tab, check = line.rstrip("\n").rpartition("\t")
    _want(bool(body) and check == _sum(body), "a line whose checksum does not match")
    try:
        d = json.loads(body)
    except (ValueError, RecursionError):
        raise CheckpointDataError("a line that is not JSON") from None
    _want(isinstance(d, dict) and set(d) == {"unit", "records"}, "a line that is not a unit")
    u = d["unit"]
    _want(isinstance(u, list) and len(u) == 2 and isinstance(u[0], str) and type(u[1]) is int, "a bad unit id")
    return (u[0], u[1]), decode_records(d["records"])


# ------------------------------------------------------------------------------------------ the file
class Checkpoint:
    """The finished enumeration units of one run's settings (`digest`), appended to `path` as they finish (no file
    when `path` is None)."""

    def __init__(self, path: Optional[Path], digest: str):
        self.path, self.digest = (Path(path) if path is not None else None), digest
        self.file = None
        self.resumed = 0

    def _header(self) -> str:
        return json.dumps({"format": CHECKPOINT_FORMAT, "settings": self.digest}) + "\n"

    def _read(self) -> tuple:
        """(units read, byte offset after the last good line); (.., 0) when the file is not ours to resume."""
        out: list = []
        with open(self.path, "rb") as f:
            head = f.readline()
            try:
                h = json.loads(head.decode("utf-8")) if head.endswith(b"\n") else None
            except (ValueError, RecursionError):
                h = None
            if not isinstance(h, dict) or h.get("format") != CHECKPOINT_FORMAT:
                log.warning("checkpoint %s is not a checkpoint of this version (an older or foreign file); it is "
                            "ignored and generation starts afresh", self.path)
                return [], 0
            if h.get("settings") != self.digest:
                log.warning("checkpoint %s is for other settings; starting afresh", self.path)
                return [], 0
            good = f.tell()
            for line in f:
                try:
                    _want(line.endswith(b"\n"), "a line cut off")
                    out.append(parse_unit_line(line.decode("utf-8")))
                except (CheckpointDataError, UnicodeDecodeError) as err:  # cut off while written: redo from here
                    log.warning("checkpoint %s: the unit after %d is incomplete or damaged (%s); redoing it",
                                self.path, len(out), err)
                    break
                good = f.tell()
        return out, good

    def load(self) -> list:
        """[(unit, records)] of every complete unit in the file (none if it is missing, in another format or for
        other settings); afterwards the file is open for appending. A checkpoint path that is not a regular file
        is an UnsafeFileError."""
        if self.path is None:
            return []
        out, good = [], 0
        if os.path.lexists(self.path):
            check_regular_file(self.path, "checkpoint")
            try:
                out, good = self._read()
            except OSError as err:
                log.warning("cannot read checkpoint %s (%s); starting afresh", self.path, err.strerror or err)
                out, good = [], 0
        if good:
            log.info("resuming from %s: %d unit(s) done", self.path, len(out))
            self.file = open(self.path, "r+b")
            self.file.truncate(good)
            self.file.seek(good)
        else:
            out = []
            self.file = open(self.path, "wb")
            self.file.write(self._header().encode())
            self.file.flush()
        return out

    def append(self, line: str) -> None:
        """Add one finished unit (its `unit_line`)."""
        if self.file is not None:
            self.file.write(line.encode())
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                os.fsync(self.file.fileno())
            self.file.close()
            self.file = None

    def remove(self) -> None:
        self.close()
        if self.path is not None and self.path.exists():
            self.path.unlink()

