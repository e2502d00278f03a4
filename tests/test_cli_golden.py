"""The summaries `taso-tvm compile` and `run` print are the ones they printed before the library took over their
work (issue #30): the same lines, labels and words, times, numbers, verdicts and the target's CPU masked. The
golden files in data/golden_cli were captured from the commands before the change, on TASO's seed graph."""
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from taso_tvm import zoo
from taso_tvm.cli import main

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_cli"
VERDICT = r"\((faster|slower|not different)\)"
DECISIONS = [r"original: the optimized module is not faster \(.*\)", r"the optimized module$"]


def mask(text: str) -> list[str]:
    """The summary's lines with what varies from run to run or machine to machine masked."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = re.sub(r'\{"kind".*?\}(?=;)', "TARGET", line)
        line = re.sub(VERDICT, "(VERDICT)", line)
        if line.startswith("written "):
            for d in DECISIONS:
                line = re.sub(d, "DECISION", line)
        line = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", line)
        out.append(line)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden")
    model = zoo.get_model("seed_example")
    onnx.save(model, str(d / "seed.onnx"))
    np.savez(d / "in.npz", **zoo.random_inputs(model))
    (d / "cfg.yaml").write_text("search:\n  budget: 20\n  time_limit: 30\ncost:\n  backend: analytic\n")
    return d


def _out(capsys, argv: list, out_path: str = "") -> list[str]:
    capsys.readouterr()
    assert main(argv) == 0
    text = capsys.readouterr().out
    return mask(text.replace(f"written to {out_path}", "written to OUT") if out_path else text)


@pytest.mark.parametrize("name, extra", [("compile", ["--time-cap", "1"]),
                                         ("compile_no_time_check", ["--no-time-check", "--threads", "2"]),
                                         ("compile_no_optimize", ["--no-optimize"])])
def test_compile_prints_the_summary_it_printed(files, capsys, name, extra):
    so = str(files / f"{name}.so")
    argv = ["compile", str(files / "seed.onnx"), "--target", "llvm", "-o", so]
    if name != "compile_no_optimize":
        argv += ["--config", str(files / "cfg.yaml")]
    assert _out(capsys, argv + extra, so) == mask((GOLDEN / f"{name}.txt").read_text())


def test_run_prints_the_summary_it_printed(files, capsys):
    so = str(files / "run.so")
    assert main(["compile", str(files / "seed.onnx"), "--target", "llvm", "-o", so, "--no-optimize"]) == 0
    got = _out(capsys, ["run", so, "--inputs", str(files / "in.npz"), "--outputs", str(files / "o.npz"),
                        "--print-time", "--repeat", "2"])
    assert got == mask((GOLDEN / "run.txt").read_text())
    assert _out(capsys, ["run", so]) == mask((GOLDEN / "run_random.txt").read_text())
    assert np.load(files / "o.npz").files == ["output"]  # written by name
