"""The floor plan holds: every module of srt/ and lang/ imports, no module imports one of a higher
layer, and the import graph has no cycle (lazy imports inside functions count; imports under
`if TYPE_CHECKING:` do not, since they never run)."""

from __future__ import annotations

import ast
import importlib
import pathlib
from typing import Dict, List, Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Bottom to top. A module belongs to the layer of its longest matching prefix; it may import its
# own layer and those below.
LAYERS: List[List[str]] = [
    ["srt.utils", "srt.weight_sync"],  # generic helpers that know none of our types
    ["srt.core", "srt.server_args", "srt.configs"],  # plain data: requests, messages, configs
    [
        "srt.distributed",
        "srt.mem_cache",
        "srt.sampling",
        "srt.constrained",
        "srt.metrics",
        "srt.parsers",
    ],
    ["srt.layers"],
    ["srt.models"],
    ["srt.model_loader"],
    ["srt.model_executor"],
    ["srt.speculative"],
    ["srt.managers.scheduler"],
    ["srt.managers.tokenizer", "srt.managers.detokenizer", "srt.managers.data_parallel"],
    ["srt.entrypoints"],
    ["lang"],
]


def _modules() -> Dict[str, pathlib.Path]:
    out = {}
    for base in ("srt", "lang"):
        for path in sorted((ROOT / base).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _layer(module: str) -> int:
    best, depth = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    return best


def _runtime_imports(path: pathlib.Path, known: Set[str]) -> Set[str]:
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.startswith("sglang.") and n[len("sglang.") :] in known:
                found.add(n[len("sglang.") :])
    return found


def _graph() -> Dict[str, Set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _runtime_imports(p, known) - {m} for m, p in mods.items()}


def test_every_module_has_a_layer():
    # Bare package markers (srt/__init__.py, srt/managers/__init__.py) import nothing: no layer needed.
    graph = _graph()
    assert [m for m in _modules() if _layer(m) < 0 and graph[m]] == []


def test_no_upward_import():
    bad = [
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, targets in _graph().items()
        for t in sorted(targets)
        if _layer(t) > _layer(m)
    ]
    assert bad == []


def test_no_import_cycle():
    graph = _graph()
    state: Dict[str, int] = {}
    cycles: List[List[str]] = []

    def visit(m: str, path: List[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(path[path.index(t) :] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


@pytest.mark.parametrize("module", sorted(m for m in _modules() if not m.endswith("__main__")))
def test_module_imports(module):
    importlib.import_module(f"sglang.{module}")
