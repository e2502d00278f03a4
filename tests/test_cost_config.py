"""Cost settings: YAML loading, precedence, and one-line errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from taso_tvm.cost import CostConfigError, load_cost_config, parse_target
from taso_tvm.cost.config import CACHE_ENV

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_cache_env(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)


def test_defaults():
    cfg = load_cost_config()
    assert cfg.backend == "auto" and cfg.target_kind == "llvm" and cfg.repeat >= 3
    assert str(cfg.cache_path).endswith(".cache/taso_tvm/costs.sqlite")


@pytest.mark.parametrize("name,kind", [("cpu.yaml", "llvm"), ("cuda.yaml", "cuda")])
def test_shipped_configs_load(name, kind):
    cfg = load_cost_config(ROOT / "configs" / name)
    assert cfg.target_kind == kind
    assert cfg.peaks()["peak_gflops"] > 0 and cfg.peaks()["peak_gbps"] > 0


def test_precedence_file_env_overrides(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("cost:\n  backend: ort\n  threads: 3\n  cache: /tmp/from-file.sqlite\n"
                 "  roofline:\n    llvm: {peak_gflops: 7}\nsearch:\n  alpha: 1.05\n")
    cfg = load_cost_config(f)
    assert (cfg.backend, cfg.threads, cfg.cache) == ("ort", 3, "/tmp/from-file.sqlite")
    assert cfg.peaks()["peak_gflops"] == 7 and cfg.peaks()["peak_gbps"] > 0  # unset peaks keep their defaults
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env.sqlite"))
    assert load_cost_config(f).cache == str(tmp_path / "env.sqlite")
    cfg = load_cost_config(f, backend="analytic", cache=str(tmp_path / "kw.sqlite"), threads=None)
    assert (cfg.backend, cfg.cache, cfg.threads) == ("analytic", str(tmp_path / "kw.sqlite"), 3)


def test_flat_file_without_cost_section(tmp_path):
    f = tmp_path / "flat.yaml"
    f.write_text("backend: analytic\ntarget: cuda\n")
    cfg = load_cost_config(f)
    assert cfg.backend == "analytic" and cfg.target_kind == "cuda"


def test_targets():
    assert parse_target("llvm") == {"kind": "llvm"}
    assert parse_target('{"kind": "cuda", "arch": "sm_90"}') == {"kind": "cuda", "arch": "sm_90"}
    assert load_cost_config(target={"kind": "llvm", "mcpu": "znver3"}).target_dict["mcpu"] == "znver3"


@pytest.mark.parametrize("kw,msg", [
    (dict(backend="foo"), "unknown backend 'foo': use auto, tvm, ort or analytic"),
    (dict(target="foo"), "unknown target 'foo': use llvm, cuda or a JSON target dict"),
    (dict(target='{"kind": "rocm"}'), "unknown target kind 'rocm'"),
    (dict(target="{not json"), "target is not valid JSON"),
    (dict(rpc="localhost:abc"), "rpc must be HOST:PORT:KEY"),
    (dict(repeat=0), "'repeat' must be an integer >= 1"),
    (dict(colour="blue"), "unknown cost setting 'colour'"),
])
def test_bad_settings_give_one_line_errors(kw, msg):
    with pytest.raises(CostConfigError) as e:
        load_cost_config(**kw)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_unreadable_config(tmp_path):
    with pytest.raises(CostConfigError, match=r"cannot read cost config .*missing.yaml"):
        load_cost_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cost: [unclosed\n")
    with pytest.raises(CostConfigError, match="cannot read cost config"):
        load_cost_config(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(CostConfigError, match="expected a mapping"):
        load_cost_config(lst)
    typo = tmp_path / "typo.yaml"
    typo.write_text("cost:\n  backnd: tvm\n")
    with pytest.raises(CostConfigError, match=r"unknown cost setting 'backnd' in .*typo.yaml"):
        load_cost_config(typo)


def test_a_backend_flag_keeps_the_settings_files_other_cost_settings(tmp_path):
    """`--config c.yaml --cost-backend tvm`: the flag picks the backend, the file's cache and target still hold."""
    from taso_tvm.cost.config import CostConfig
    from taso_tvm.relay_pass.settings import resolve_settings
    from taso_tvm.relay_pass import resolve_cost

    cfg = tmp_path / "c.yaml"
    cfg.write_text("search: {budget: 3}\ncost:\n  cache: ''\n  build_jobs: 1\n")
    s = resolve_settings(str(cfg), cost="tvm")
    assert isinstance(s["cost"], CostConfig) and s["budget"] == 3
    assert (s["cost"].backend, s["cost"].cache, s["cost"].build_jobs) == ("tvm", "", 1)
    model, owned = resolve_cost(s["cost"], None, "onnx")
    try:
        assert owned and model.config.backend == "tvm" and model.config.cache_path is None
    finally:
        model.close()
    assert resolve_settings(str(cfg))["cost"] == str(cfg)  # no flag: the file, as before
    assert resolve_settings(None, cost="analytic")["cost"] == "analytic"
