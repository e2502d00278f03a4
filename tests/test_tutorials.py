"""Every tutorial runs as written."""
import pathlib
import runpy

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("*.py"))


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(path, monkeypatch):
    monkeypatch.setenv("TASO_TVM_CONFIG", "")  # restored (unset) after the test, whatever a tutorial sets
    runpy.run_path(str(path), run_name="__main__")
