"""The import rules of docs/architecture.md, checked by walking every module's imports."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "inferd"

# part -> modules it must never import (prefix match)
FORBIDDEN = {
    "compat": ["inferd."],
    "composition": ["inferd.cli", "inferd.rayserve"],
    "rayserve": ["inferd.cli"],
    "corpus": ["inferd."],
    "drain": ["inferd."],
    # a verb is data and functions over the engine's answers: no front end, no web framework
    "verbs": [
        "inferd.server",
        "inferd.grpc_v2",
        "inferd.cli",
        "inferd.composition",
        "fastapi",
        "starlette",
        "grpc",
    ],
    "config": [
        "inferd.repository",
        "inferd.runtime",
        "inferd.batching",
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "onnxruntime",
        "fastapi",
        "starlette",
    ],
    "repository": [
        "inferd.runtime",
        "inferd.batching",
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "onnxruntime",
        "fastapi",
        "starlette",
    ],
    "runtime": [
        "inferd.batching",
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "fastapi",
        "starlette",
    ],
    "batching": [
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "inferd.config",
        "inferd.runtime.onnx_session",
        "inferd.runtime.pool",
        "onnxruntime",
        "fastapi",
        "starlette",
        "uvicorn",
    ],
    "engine": ["inferd.server", "inferd.cli", "fastapi", "starlette", "uvicorn"],
    "front": [
        "inferd.server",
        "inferd.grpc_v2",
        "inferd.cli",
        "onnxruntime",
        "fastapi",
        "starlette",
        "uvicorn",
        "grpc",
    ],
    "server": ["onnxruntime", "inferd.runtime.onnx_session", "inferd.cli", "inferd.grpc_v2"],
    "grpc_v2": [
        "onnxruntime",
        "inferd.runtime.onnx_session",
        "inferd.cli",
        "inferd.server",
        "fastapi",
        "uvicorn",
    ],
    "observability": [
        "inferd.engine",
        "inferd.server",
        "inferd.batching",
        "inferd.runtime",
        "inferd.cli",
    ],
    "errors": ["inferd.", "fastapi", "starlette", "onnxruntime"],
    "clients": ["inferd.", "fastapi", "starlette", "onnxruntime", "grpc"],
    "jobs": [
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "inferd.batching",
        "onnxruntime",
        "fastapi",
        "starlette",
        "uvicorn",
    ],
    "tasks": [
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "inferd.runtime.onnx_session",
        "onnxruntime",
        "fastapi",
        "starlette",
        "uvicorn",
    ],
    "tools": ["inferd.server", "inferd.engine", "fastapi", "starlette", "uvicorn"],
    "prep": [
        "inferd.server",
        "inferd.engine",
        "inferd.batching",
        "inferd.tools",
        "inferd.cli",
        "inferd.grpc_v2",
        "inferd.rayserve",
        "fastapi",
        "starlette",
        "uvicorn",
    ],
    "bench": [
        "inferd.server",
        "inferd.engine",
        "inferd.batching",
        "inferd.runtime",
        "inferd.generation",
        "onnxruntime",
        "fastapi",
        "starlette",
        "uvicorn",
    ],
    "generation": [
        "inferd.engine",
        "inferd.server",
        "inferd.cli",
        "inferd.runtime.onnx_session",
        "inferd.runtime.pool",
        "onnxruntime",
        "fastapi",
        "starlette",
        "uvicorn",
    ],
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def part_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


MODULES = sorted(PACKAGE.rglob("*.py"))


def _within(module: str, rule: str) -> bool:
    """Whether `module` is `rule` or inside it (`inferd.clients` is not inside `inferd.cli`;
    a rule ending in a dot, `inferd.`, is a prefix)."""
    prefix = rule if rule.endswith(".") else rule + "."
    return module == rule.rstrip(".") or module.startswith(prefix)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_the_import_rules(path: Path) -> None:
    rules = FORBIDDEN.get(part_of(path), [])
    bad = sorted(i for i in imports_of(path) for r in rules if _within(i, r))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


def test_only_the_session_module_imports_onnxruntime() -> None:
    """Serving reaches ONNX Runtime through one module; the offline preparation tools (`prep`)
    use its optimizer and quantizer directly and are the one exception."""
    users = {
        str(p.relative_to(PACKAGE))
        for p in MODULES
        if any(i == "onnxruntime" or i.startswith("onnxruntime.") for i in imports_of(p))
        and part_of(p) != "prep"
    }
    assert users == {"runtime/onnx_session.py"}


PRIVATE_APIS = ("uvicorn.protocols", "ray.serve._private", "ray.serve.multiplex", "grpc._")
"""Other projects' modules that are not their public API: only inferd.compat imports them
(grpcio-tools' generated stubs, which check the grpcio version themselves, aside)."""


def test_only_compat_touches_other_projects_private_apis() -> None:
    users = {
        str(p.relative_to(PACKAGE)): sorted(
            i
            for i in imports_of(p)
            if any(_within(i, rule) or i.startswith(rule) for rule in PRIVATE_APIS)
        )
        for p in MODULES
        if part_of(p) != "compat" and not p.name.endswith("_pb2_grpc.py")
    }
    assert {path: found for path, found in users.items() if found} == {}


def test_serving_never_imports_the_preparation_tools() -> None:
    users = {
        str(p.relative_to(PACKAGE))
        for p in MODULES
        if part_of(p) not in ("prep", "cli", "tools")
        and any(i.startswith("inferd.prep") for i in imports_of(p))
    }
    assert not users


def test_the_server_reaches_the_engine_through_its_package_only() -> None:
    """Routes, middleware and the gRPC service use what `inferd.engine` exports, never its
    modules' internals."""
    bad = {
        str(p.relative_to(PACKAGE)): sorted(
            i for i in imports_of(p) if i.startswith("inferd.engine.")
        )
        for p in MODULES
        if part_of(p) in ("front", "server", "grpc_v2")
    }
    assert not {k: v for k, v in bad.items() if v}


def test_the_two_front_ends_never_import_each_other() -> None:
    """HTTP (`server`) and gRPC (`grpc_v2`) share what they share through `front`; the
    composition root (`cli`) runs them side by side. Imports inside functions count too."""
    crossing = {
        str(p.relative_to(PACKAGE)): sorted(
            i for i in imports_of(p) if i.startswith(f"inferd.{other}")
        )
        for p in MODULES
        for part, other in (("server", "grpc_v2"), ("grpc_v2", "server"))
        if part_of(p) == part
    }
    assert not {k: v for k, v in crossing.items() if v}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycles_between_modules() -> None:
    """Imports form no cycle, those inside functions included (a lazy import keeps an optional
    extra or a slow path off the start, never a circle: shared parts go in a module of their
    own)."""
    names = {module_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in names else node.module)
        graph[name] = {d for d in deps if d in names and d != name}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


def test_no_two_modules_share_a_name() -> None:
    """A module's name says what it holds wherever it is imported (`text.py` four times said
    nothing); packages' `__init__.py` aside."""
    names = Counter(p.name for p in MODULES if p.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []


def test_every_module_has_a_docstring() -> None:
    missing = [
        str(p.relative_to(PACKAGE))
        for p in MODULES
        if ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert not missing, missing


def test_the_cli_starts_without_the_optional_extras() -> None:
    """`inferd serve` on the core install: building the parser imports no extra's package."""
    import subprocess
    import sys

    extras = ["httpx", "rich", "matplotlib", "torch", "transformers", "onnx", "locust"]
    code = (
        "import sys; from inferd.cli.main import build_parser; build_parser(); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {extras!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


MODULE_LINES = 350
CLASS_LINES = 300


def test_modules_and_classes_stay_small() -> None:
    """One concept a module: no module over 350 lines, no class over 300 (generated protobuf
    modules aside). A part that grows past it is taken out by concept, not cut in halves."""
    big: list[str] = []
    for path in MODULES:
        if "_pb2" in path.name:
            continue
        source = path.read_text()
        name = str(path.relative_to(PACKAGE))
        if source.count("\n") > MODULE_LINES:
            big.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > CLASS_LINES:
                    big.append(f"{name}:{node.name}: {lines} lines")
    assert not big, big
