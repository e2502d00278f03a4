"""Put a package back together from the parts package.py --parts wrote (each small enough for one upload).

    python3 PARTS/part00/assemble.py --out PACKAGE      # with every PARTS/partNN folder present

Reads part00/parts.json, joins each file from its chunks in order, checks its sha256, and writes PACKAGE whole
or not at all. Needs only Python.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

PARTS_FORMAT = "taso-tvm-cuda-parts/1"


def main(argv=None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description="Join the parts of a package into one folder.")
    ap.add_argument("--out", required=True, help="package folder to write (must not exist)")
    ap.add_argument("--parts", default=str(here.parent), help="folder holding part00, part01, ...")
    args = ap.parse_args(argv)
    parts, out = Path(args.parts), Path(args.out)
    try:
        index = json.loads((parts / "part00" / "parts.json").read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {parts / 'part00' / 'parts.json'}: {e}", file=sys.stderr)
        return 2
    if index.get("format") != PARTS_FORMAT:
        print(f"error: {parts / 'part00' / 'parts.json'} is not a parts index ({PARTS_FORMAT})", file=sys.stderr)
        return 2
    missing = sorted({c[0] for f in index["files"] for c in f["chunks"] if not (parts / c[0]).is_dir()})
    if missing:
        print(f"error: parts missing under {parts}: {', '.join(missing)}", file=sys.stderr)
        return 2
    if out.exists():
        print(f"error: '{out}' exists: name a new folder", file=sys.stderr)
        return 2
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for f in index["files"]:
            dest = tmp / f["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            h = hashlib.sha256()
            with open(dest, "wb") as w:
                for part, rel in f["chunks"]:
                    with open(parts / part / rel, "rb") as r:
                        for block in iter(lambda: r.read(1 << 20), b""):
                            h.update(block)
                            w.write(block)
            if h.hexdigest() != f["sha256"]:
                raise ValueError(f"{f['path']} does not match its sha256 after joining (a part is damaged)")
            dest.chmod(f.get("mode", 0o644))
    except (OSError, ValueError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"error: {e}", file=sys.stderr)
        return 2
    tmp.rename(out)
    print(f"assembled {len(index['files'])} files from {index['parts']} parts into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
