"""Modules depend one way (faces -> relay_pass -> search -> rules, cost -> graph) and import no cycle: checked
over the package's `import` statements (module-level and inside functions alike)."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "taso_tvm"
FACES = {"taso_tvm.api", "taso_tvm.cli", "taso_tvm.taso", "taso_tvm.tvmc"}  # and every module of these packages
# package -> packages (or modules) it must not import
FORBIDDEN = {
    "taso_tvm.graph": ["taso_tvm.rules", "taso_tvm.cost", "taso_tvm.search", "taso_tvm.relay_pass",
                       "taso_tvm.onnx_io", "taso_tvm.onnx_opt", "taso_tvm.schedule", "taso_tvm.zoo"],
    "taso_tvm.rules": ["taso_tvm.search", "taso_tvm.relay_pass", "taso_tvm.onnx_opt", "taso_tvm.cost"],
    "taso_tvm.cost": ["taso_tvm.search", "taso_tvm.relay_pass", "taso_tvm.onnx_opt", "taso_tvm.rules"],
    "taso_tvm.schedule": ["taso_tvm.search", "taso_tvm.relay_pass", "taso_tvm.onnx_opt", "taso_tvm.rules"],
    "taso_tvm.search": ["taso_tvm.relay_pass", "taso_tvm.onnx_opt", "taso_tvm.rules", "taso_tvm.cost"],  # protocols only
    "taso_tvm.onnx_io": ["taso_tvm.rules", "taso_tvm.cost", "taso_tvm.search", "taso_tvm.relay_pass",
                         "taso_tvm.onnx_opt", "taso_tvm.runtime"],
    "taso_tvm.runtime": ["taso_tvm.rules", "taso_tvm.cost", "taso_tvm.search", "taso_tvm.relay_pass",
                         "taso_tvm.onnx_opt", "taso_tvm.schedule", "taso_tvm.zoo"],
    # inside rules: language -> matching -> verify -> generate, the RuleSet (rules.ruleset) on top
    "taso_tvm.rules.language": ["taso_tvm.rules.matching", "taso_tvm.rules.verify", "taso_tvm.rules.generate",
                                "taso_tvm.rules.ruleset"],
    "taso_tvm.rules.matching": ["taso_tvm.rules.verify", "taso_tvm.rules.generate", "taso_tvm.rules.ruleset"],
    "taso_tvm.rules.verify": ["taso_tvm.rules.generate", "taso_tvm.rules.ruleset"],
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Absolute names of the taso_tvm modules a file imports (`from . import x` counts as importing `pkg.x`)."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("taso_tvm"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                if node.module:
                    base += node.module.split(".")
                name = ".".join(base)
            else:
                name = node.module or ""
            if not name.startswith("taso_tvm"):
                continue
            out.add(name)
            for a in node.names:  # `from .pkg import module`
                if (PKG.parent / (name + "." + a.name).replace(".", "/")).with_suffix(".py").exists() or \
                        (PKG.parent / (name + "." + a.name).replace(".", "/") / "__init__.py").exists():
                    out.add(f"{name}.{a.name}")
    return out


def all_modules() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PKG.rglob("*.py"))}


def is_face(mod: str) -> bool:
    return mod in FACES or any(mod.startswith(f + ".") for f in FACES)


def within(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def test_no_module_imports_upward():
    bad = []
    for mod, imps in all_modules().items():
        for pkg, banned in FORBIDDEN.items():
            if within(mod, pkg):
                bad += [f"{mod} imports {i}" for i in imps for b in banned if within(i, b)]
    assert not bad, "\n".join(bad)


def test_faces_are_imported_by_nothing_inside_the_package():
    bad = [f"{mod} imports {i}" for mod, imps in all_modules().items() if not is_face(mod)
           for i in imps if is_face(i) and mod != "taso_tvm"]
    assert not bad, "\n".join(bad)


def test_no_import_cycles_between_modules():
    """Module-level cycles (a package `__init__` importing its own submodules is not a cycle)."""
    mods = all_modules()
    graph = {m: {i for i in imps if i in mods and i != m and not within(m, i)} for m, imps in mods.items()}
    cycles, state = [], {}

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "\n".join(cycles)
