"""No module imports a private name (`_x`) of another top-level package of taso_tvm (taso_tvm.cli and
taso_tvm.relay_pass are two; imports inside one package are its own business), nor a private name of a third-party
library (onnx's `_get_all_tensors` was one: its public API or our own walk instead)."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "taso_tvm"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top(mod: str) -> str:
    """The top-level package a module belongs to: taso_tvm.cli.compile -> taso_tvm.cli, taso_tvm.api -> itself."""
    return ".".join(mod.split(".")[:2])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports() -> list[str]:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        mod = _module(path)
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + (node.module.split(".") if node.module else []))
                else:
                    source = node.module or ""
                for a in node.names:
                    target = f"{source}.{a.name}"
                    if _private(a.name) or any(_private(p) for p in source.split(".")[1:]):
                        if not source.startswith("taso_tvm"):
                            bad.append(f"{mod}: from {source} import {a.name} (a third-party private name)")
                        elif _top(target) != _top(mod) and _top(source) != _top(mod):
                            bad.append(f"{mod}: from {source} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if any(_private(p) for p in parts[1:]) and a.name.startswith("taso_tvm") \
                            and _top(a.name) != _top(mod):
                        bad.append(f"{mod}: import {a.name}")
    return bad


def test_no_private_name_imported_across_packages():
    bad = private_imports()
    assert not bad, "\n".join(bad)


def test_the_walk_sees_a_private_import(tmp_path):
    """The checker itself: a cross-package private import in a module is reported."""
    global PKG
    pkg = tmp_path / "taso_tvm"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "a" / "__init__.py").write_text("from ..b.x import _hidden\nfrom .y import _own\n")
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "x.py").write_text("_hidden = 1\n")
    saved, PKG = PKG, pkg
    try:
        assert private_imports() == ["taso_tvm.a: from taso_tvm.b.x import _hidden"]
    finally:
        PKG = saved
