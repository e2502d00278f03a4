"""The shipped axioms, verified once per test session (cold, in parallel), for the verifier tests: as a list, and
as a cache file that tests seed their fresh cache directories with (so each test does not re-verify them)."""
from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _verified() -> tuple:
    from taso_tvm.rules.verify.verdict import Cache, load_axioms, verify_axioms
    path = Path(tempfile.mkdtemp(prefix="taso-axioms-")) / "rules.json"
    good, results = verify_axioms(load_axioms(), jobs=2, cache=Cache(path))
    assert all(r.ok for r in results), [(r.rule, r.status) for r in results if not r.ok]
    assert not any(r.cached for r in results)  # verified cold
    return tuple(good), path


def verified_axioms() -> tuple:
    return _verified()[0]


def seed_cache(directory: Path) -> Path:
    """Copy the verified axioms' results into `directory`/rules.json (the rules in it are still verified cold)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(_verified()[1], directory / "rules.json")
    return directory / "rules.json"
