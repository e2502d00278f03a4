"""Every tutorial runs as written (those needing PyTorch, TensorFlow or TVM's RPC extras skip without them)."""
import importlib.util
import pathlib
import runpy

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("*.py"))
NEEDS = {"03_pytorch": ["torch", "onnxscript"], "04_keras": ["tensorflow", "tf2onnx"],
         "07_rpc_cost": ["tornado", "cloudpickle", "psutil"]}
SLOW = {"07_rpc_cost"}  # starts an RPC tracker and server, each importing TVM


def _param(path: pathlib.Path):
    marks = [pytest.mark.slow] if path.stem in SLOW else []
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in TUTORIALS])
def test_tutorial_runs(path, monkeypatch, tmp_path):
    missing = [m for m in NEEDS.get(path.stem, []) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{path.stem} needs {', '.join(missing)} (pip install {' '.join(missing)})")
    monkeypatch.setenv("TASO_TVM_CONFIG", "")  # restored (unset) after the test, whatever a tutorial sets
    monkeypatch.chdir(tmp_path)  # whatever a tutorial writes stays out of the repository
    runpy.run_path(str(path), run_name="__main__")


def test_tutorials_are_numbered_as_the_readme_lists_them():
    assert [p.stem[:2] for p in TUTORIALS] == [f"{i:02d}" for i in range(1, len(TUTORIALS) + 1)]
