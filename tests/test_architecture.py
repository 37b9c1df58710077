"""The package's structure, read from the source of every module (every import counts, including those inside
functions and under ``TYPE_CHECKING``):

- no import cycles among kvtiers modules, nor among its packages (each sub-package of ``kvtiers`` one node, each
  top-level module its own) but those :data:`KNOWN_PACKAGE_CYCLES` lists, which may only shrink;
- the catalog (``kvtiers.catalog``: versions, Kubernetes releases, instance types, models, limits, defaults)
  imports only the standard library and itself, so that every side reads it without loading CDK, cdk8s or pydantic
  (and the Makefile runs ``kvtiers/catalog/versions.py`` by path);
- the construct library (``kvtiers.constructs``, ``kvtiers.k8s_charts``) imports nothing from the app
  (``kvtiers.config``, ``kvtiers.stacks``, ``kvtiers.cli``); its facts and defaults come from the catalog;
- the environment config is read only by the config itself (``kvtiers/config/model.py`` maps it to props), the
  stacks (``kvtiers/stacks/wiring/`` builds constructs from them), the CLI and the observability rules, and only the
  model and the wiring build the construct side's value objects
  (its frozen dataclasses) from outside the construct side; no ``from_environment`` remains;
- every third-party module kvtiers and app.py import is a declared dependency of the package; the library's side
  (the construct library, the top-level modules, what they import outside ``TYPE_CHECKING`` with the packages
  whose ``__init__`` that runs, and the example apps) imports only [project].dependencies, and each of its modules
  imports with the extras' modules (pydantic, cdk_nag, the tool's) made unimportable: a library user installs
  none of the extras.
- no function of the construct library is longer than :data:`MAX_FUNCTION_LINES` (a longer constructor is split
  into named builder steps).

Each rule is also run against a small fake package to show it can fail.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.synth import ROOT

LIBRARY = ("constructs", "k8s_charts")
APP = ("config", "stacks", "cli")
CONFIG_READERS = ("config", "stacks", "cli", "observability")
WIRING = ("stacks.wiring", "config.model")
"""Where the app maps its file onto construct props: the model (props) and the wiring (constructs)."""
CATALOG = "catalog"
"""Facts and defaults every side reads: the standard library only (see the module docstring)."""
KNOWN_PACKAGE_CYCLES: list[list[str]] = []
"""Package import cycles not removed yet: ``test_no_import_cycles_among_packages`` fails on any other, and on one of
these once it is gone (remove it here then), so the list only shrinks."""
GLOBAL_ONLY = ("warn_redundant_casts", "warn_unused_configs")
MAX_FUNCTION_LINES = 150
"""From a function's ``def`` line to its last line (``end_lineno - lineno``), in the construct library."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    """``x.y`` for ``import x.y``, ``module.name`` for ``from module import name`` (name may itself be a module)."""
    line: int


def modules(root: Path, package: str) -> dict[str, Module]:
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, ast.parse(path.read_text(), filename=str(path)))
    return found


def _is_package(module: Module) -> bool:
    return module.path.name == "__init__.py"


def _from_base(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from ... import`` (relative ones resolved against the importing module)."""
    if not node.level:
        return node.module or ""
    parts = module.name.split(".")
    anchor = parts[: len(parts) - node.level + (1 if _is_package(module) else 0)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def imports_of(module: Module) -> Iterator[Import]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module.name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            for alias in node.names:
                yield Import(module.name, f"{base}.{alias.name}", node.lineno)


def resolve(target: str, known: dict[str, Module]) -> str | None:
    """The known module an import names: itself, or the module that defines the imported name."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def all_imports(root: Path, package: str) -> tuple[dict[str, Module], list[Import]]:
    known = modules(root, package)
    return known, [imp for module in known.values() for imp in imports_of(module)]


def import_cycles(root: Path, package: str) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    known, found = all_imports(root, package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for imp in found:
        target = resolve(imp.target, known)
        if target is not None:
            graph[imp.importer].add(target)
    return strongly_connected(graph)


def package_node(module: str) -> str:
    """A module's node in the package graph: its sub-package of the top package, or itself for a top-level module
    (``kvtiers.stacks.wiring.platform`` -> ``kvtiers.stacks``, ``kvtiers.placement`` -> itself)."""
    return ".".join(module.split(".")[:2])


def package_imports(root: Path, package: str) -> dict[tuple[str, str], list[str]]:
    """Each pair of package nodes one imports the other, with the imports that make it (``path:line imports x``)."""
    known, found = all_imports(root, package)
    edges: dict[tuple[str, str], list[str]] = {}
    for imp in found:
        target = resolve(imp.target, known)
        if target is None or package_node(imp.importer) == package_node(target):
            continue
        where = f"{known[imp.importer].path.relative_to(root)}:{imp.line} imports {imp.target}"
        edges.setdefault((package_node(imp.importer), package_node(target)), []).append(where)
    return edges


def package_cycles(root: Path, package: str) -> list[list[str]]:
    """Strongly connected components of more than one package node."""
    graph: dict[str, set[str]] = {}
    for importer, target in package_imports(root, package):
        graph.setdefault(importer, set()).add(target)
        graph.setdefault(target, set())
    return strongly_connected(graph)


def package_cycle_imports(root: Path, package: str, cycle: list[str]) -> list[str]:
    """The imports between the nodes of one package cycle."""
    edges = package_imports(root, package)
    return sorted(where for (a, b), found in edges.items() if a in cycle and b in cycle for where in found)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node (or a node with an edge to itself), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def _inside(name: str, package: str, subpackages: tuple[str, ...]) -> bool:
    return any(name == f"{package}.{sub}" or name.startswith(f"{package}.{sub}.") for sub in subpackages)


def catalog_imports_beyond_the_standard_library(root: Path, package: str) -> list[str]:
    _, found = all_imports(root, package)
    return sorted(
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in found
        if _inside(imp.importer, package, (CATALOG,))
        and not _inside(imp.target, package, (CATALOG,))
        and imp.target.partition(".")[0] not in {*sys.stdlib_module_names, "__future__"}
    )


def library_imports_of_the_app(root: Path, package: str) -> list[str]:
    _, found = all_imports(root, package)
    return sorted(
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in found
        if _inside(imp.importer, package, LIBRARY) and _inside(imp.target, package, APP)
    )


def config_readers(root: Path, package: str) -> list[str]:
    _, found = all_imports(root, package)
    return sorted(
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in found
        if _inside(imp.target, package, ("config",))
        and not _inside(imp.importer, package, CONFIG_READERS)
        and not _inside(imp.importer, package, LIBRARY)  # reported by library_imports_of_the_app
    )


def _qualified_calls(module: Module) -> Iterator[tuple[str, int]]:
    """What each call through an imported name calls, fully qualified (``alias.Name(...)`` included)."""
    aliases = _aliases(module)
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        parts = []
        func = node.func
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        if isinstance(func, ast.Name) and func.id in aliases:
            yield ".".join([aliases[func.id], *reversed(parts)]), node.lineno


def _aliases(module: Module) -> dict[str, str]:
    """Local name -> the module or object it is bound to, for every import in the module."""
    names = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def _value_type(qualified: str, package: str) -> bool:
    """A class defined on the construct side that is a dataclass (a props or value object)."""
    module_name, _, attribute = qualified.rpartition(".")
    if not _inside(module_name, package, LIBRARY):
        return False
    try:
        obj = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        return False
    return isinstance(obj, type) and dataclasses.is_dataclass(obj) and _inside(obj.__module__, package, LIBRARY)


def value_objects_built_outside_the_wiring(root: Path, package: str, extra: tuple[Path, ...] = ()) -> list[str]:
    known = modules(root, package)
    found = []
    for module in [*known.values(), *(Module(p.stem, p, ast.parse(p.read_text())) for p in extra)]:
        if not _inside(module.name, package, (*LIBRARY, *WIRING)):
            for qualified, line in _qualified_calls(module):
                if _value_type(qualified, package):
                    found.append(f"{module.path.relative_to(root)}:{line} builds {qualified}")
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "from_environment":
                found.append(f"{module.path.relative_to(root)}:{node.lineno} defines from_environment")
    return sorted(found)


def long_functions(root: Path, package: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """The construct library's functions (methods and nested functions included) longer than ``limit`` lines."""
    found = []

    def visit(node: ast.AST, module: Module, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, module, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (child.end_lineno or child.lineno) - child.lineno
                if length > limit:
                    found.append(f"{module.name}:{child.lineno} {prefix}{child.name} is {length} lines")
                visit(child, module, f"{prefix}{child.name}.")
            else:
                visit(child, module, prefix)

    for name, module in modules(root, package).items():
        if _inside(name, package, LIBRARY):
            visit(module.tree, module, "")
    return sorted(found)


ENGINE_SIDE = {
    "kvtiers.k8s_charts.kvtiers_l2_guard",
    "kvtiers.k8s_charts.kvtiers_engine_drain",
    "kvtiers.k8s_charts.kvtiers_api_auth",
}
"""Modules shipped into the engine image (a ConfigMap on its PYTHONPATH), which import the image's packages."""
ENGINE_PACKAGES = {"lmcache", "prometheus_client", "torch", "vllm", "zmq", "fastapi"}
ROUTER_SIDE = {
    "kvtiers.k8s_charts.kvtiers_kvaware_fallback",
    "kvtiers.k8s_charts.kvtiers_api_auth",
    "kvtiers.k8s_charts.kvtiers_router_auth",
}
"""Modules shipped into the router image (a ConfigMap on its PYTHONPATH), which import the router's own code."""
ROUTER_PACKAGES = {"vllm_router", "fastapi", "transformers", "kvtiers_api_auth"}


def top_level_imports(tree: ast.Module) -> set[str]:
    tops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            tops.add("." if node.level else node.module.partition(".")[0])
    return tops


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports_of(module: Module) -> Iterator[Import]:
    """The imports that run (at import or in a function): those under ``if TYPE_CHECKING:`` never do."""
    stack: list[ast.AST] = [module.tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (Import(module.name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            yield from (Import(module.name, f"{base}.{alias.name}", node.lineno) for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))


def library_side(known: dict[str, Module], package: str) -> set[str]:
    """The construct library (``LIBRARY``), every top-level module, and every module they import at run time (with
    its parent packages, whose ``__init__`` runs first): what a library user's import of kvtiers may load."""
    todo = [
        name
        for name, module in known.items()
        if _inside(name, package, LIBRARY) or (name.count(".") == 1 and not _is_package(module))
    ]
    side: set[str] = set()
    while todo:
        name = todo.pop()
        if name in side:
            continue
        side.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:end]) for end in range(1, len(parts)))
        for imp in runtime_imports_of(known[name]):
            target = resolve(imp.target, known)
            if target is not None:
                todo.append(target)
    return side


def imports_outside_their_dependencies(
    root: Path,
    package: str,
    *,
    library: set[str],
    extras: set[str],
    library_files: tuple[Path, ...] = (),
    app_files: tuple[Path, ...] = (),
) -> list[str]:
    """Each third-party import that no allowed distribution provides: on the library's side (and in
    ``library_files``) only ``library``; elsewhere (and in ``app_files``) ``library`` and ``extras``."""
    known = modules(root, package)
    on_library_side = library_side(known, package)
    distributions = importlib.metadata.packages_distributions()
    sources = [
        *(
            (name, m.tree, name in on_library_side)
            for name, m in known.items()
            if name not in ENGINE_SIDE | ROUTER_SIDE
        ),
        *((str(p.relative_to(root)), ast.parse(p.read_text()), True) for p in library_files),
        *((str(p.relative_to(root)), ast.parse(p.read_text()), False) for p in app_files),
    ]
    missing = set()
    for where, tree, library_only in sources:
        allowed = library if library_only else library | extras
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [alias.name.partition(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.partition(".")[0]]
            else:
                continue
            for top in tops:
                if top == package or top in sys.stdlib_module_names:
                    continue
                providers = {canonicalize_name(d) for d in distributions.get(top, [])}
                if not providers & allowed:
                    side = "library" if library_only else "app"
                    found = ", ".join(sorted(providers)) or "no installed distribution"
                    missing.add(f"{where} ({side}) imports {top} (from {found})")
    return sorted(missing)


def declared_distributions() -> tuple[set[str], set[str]]:
    """[project].dependencies, and the distributions the extras add (a self-reference such as ``kvtiers[app]``
    adds nothing of its own)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = canonicalize_name(project["name"])
    library = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    extras = {
        canonicalize_name(Requirement(r).name) for extra in project["optional-dependencies"].values() for r in extra
    }
    return library, extras - {name}


IMPORT_WITHOUT = """
import importlib, json, sys
root, blocked, names = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sys.path.insert(0, root)
for name in blocked:
    sys.modules[name] = None  # import fails as if the distribution were not installed
failures = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as error:
        failures[name] = f"{type(error).__name__}: {error}"
print(json.dumps(failures))
"""


def import_failures_without(root: Path, names: list[str], blocked: list[str]) -> dict[str, str]:
    """Each of ``names`` that fails to import, in a fresh interpreter (``root`` first on its path) where the modules
    ``blocked`` cannot be imported (the ``None`` entry in ``sys.modules`` that makes an import raise
    ``ModuleNotFoundError``)."""
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT, str(root), json.dumps(blocked), json.dumps(names)],
        cwd=root,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    failures: dict[str, str] = json.loads(run.stdout.splitlines()[-1])
    return failures


def extras_only_modules(library: set[str], extras: set[str]) -> list[str]:
    """The top-level modules that only the extras' distributions provide (pydantic, cdk_nag, typer...)."""
    provided = importlib.metadata.packages_distributions()
    return sorted(
        top
        for top, distributions in provided.items()
        if {canonicalize_name(d) for d in distributions} & extras
        and not {canonicalize_name(d) for d in distributions} & library
        and not top.startswith("_")
    )


# --------------------------------------------------------------------------------------------------- kvtiers


def test_image_side_modules_import_only_the_standard_library_and_their_images_packages():
    """They run alone in the engine or router image: an import of kvtiers or of a package the image lacks fails at
    start."""
    known = modules(ROOT, "kvtiers")
    for side, packages in ((ENGINE_SIDE, ENGINE_PACKAGES), (ROUTER_SIDE, ROUTER_PACKAGES)):
        for name in side:
            imported = top_level_imports(known[name].tree)
            assert imported - set(sys.stdlib_module_names) - {"__future__"} <= packages, name


def test_no_import_cycles():
    cycles = import_cycles(ROOT, "kvtiers")
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycles_among_packages():
    """Each sub-package of kvtiers (and each top-level module) one node: a package that imports another which
    imports it back cannot be understood, tested or moved alone."""
    cycles = package_cycles(ROOT, "kvtiers")
    described = "\n".join(
        " <-> ".join(cycle) + "".join(f"\n    {where}" for where in package_cycle_imports(ROOT, "kvtiers", cycle))
        for cycle in cycles
    )
    assert cycles == KNOWN_PACKAGE_CYCLES, f"package import cycles (known: {KNOWN_PACKAGE_CYCLES}):\n{described}"


def test_the_catalog_imports_only_the_standard_library():
    found = catalog_imports_beyond_the_standard_library(ROOT, "kvtiers")
    assert not found, "\n".join(found)


def test_the_construct_library_imports_nothing_from_the_app():
    found = library_imports_of_the_app(ROOT, "kvtiers")
    assert not found, "\n".join(found)


def test_only_the_stacks_cli_and_observability_read_the_environment_config():
    found = config_readers(ROOT, "kvtiers")
    assert not found, "\n".join(found)


def test_only_the_wiring_builds_construct_props():
    found = value_objects_built_outside_the_wiring(ROOT, "kvtiers", extra=(ROOT / "app.py",))
    assert not found, "\n".join(found)


def test_every_third_party_import_is_a_declared_dependency():
    """The library's side imports only [project].dependencies; the app, the CLI and app.py the extras too."""
    library, extras = declared_distributions()
    found = imports_outside_their_dependencies(
        ROOT,
        "kvtiers",
        library=library,
        extras=extras,
        library_files=tuple(sorted((ROOT / "examples").glob("*/*.py"))),
        app_files=(ROOT / "app.py",),
    )
    assert not found, "imported but not a dependency of its side in pyproject.toml:\n" + "\n".join(found)


def test_the_library_side_imports_without_the_extras():
    """Every module a library user's import may load imports with pydantic, cdk-nag and the tool's packages absent
    (tests/test_package_reuse.py also synthesizes the examples in a venv that never had them)."""
    library, extras = declared_distributions()
    blocked = extras_only_modules(library, extras)
    assert {"pydantic", "cdk_nag", "typer", "cfnlint"} <= set(blocked), blocked
    names = sorted(library_side(modules(ROOT, "kvtiers"), "kvtiers") - ENGINE_SIDE - ROUTER_SIDE)
    assert len(names) > 50, names
    failures = import_failures_without(ROOT, names, blocked)
    assert not failures, "\n".join(f"{name}: {error}" for name, error in failures.items())


def test_the_library_side_is_the_construct_library_and_what_it_imports():
    side = library_side(modules(ROOT, "kvtiers"), "kvtiers")
    assert {"kvtiers", "kvtiers.placement", "kvtiers.constructs.serving", "kvtiers.catalog.versions"} <= side
    # kvtiers.config's package imports its pydantic modules under TYPE_CHECKING only.
    assert not side & {"kvtiers.config.schema", "kvtiers.config.loader", "kvtiers.stacks", "kvtiers.cli"}


def test_no_library_function_is_longer_than_the_limit():
    """A constructor that long is split into named builder steps (volumes from the mounts, containers, pod spec,
    Service...), each read and changed alone."""
    found = long_functions(ROOT, "kvtiers")
    assert not found, f"longer than {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def strict_flags(mypy_help: str) -> dict[str, bool]:
    """The config keys and values of the flags ``mypy --help`` says ``--strict`` turns on."""
    text = mypy_help.split("Strict mode; enables the following flags:", 1)[1]
    listed = text.split("\n  --", 1)[0]
    joined = "".join(line.strip() + ("" if line.strip().endswith("-") else " ") for line in listed.splitlines())
    strict = {}
    for flag in joined.split(","):
        name = flag.strip().removeprefix("--")
        strict[name.removeprefix("no-").replace("-", "_")] = not name.startswith("no-")
    return strict


def test_the_library_and_the_config_get_every_flag_of_mypy_strict():
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = strict_flags(subprocess.check_output([sys.executable, "-m", "mypy", "--help"], text=True, timeout=60))
    assert len(strict) >= 12 and strict["implicit_reexport"] is False, strict
    (override,) = [o for o in mypy["overrides"] if "kvtiers.config.*" in o["module"]]
    assert sorted(override["module"]) == [
        "kvtiers.catalog.*",
        "kvtiers.config.*",
        "kvtiers.constructs.*",
        "kvtiers.k8s_charts.*",
    ]
    # Global-only options are set once for every module.
    per_module = {key: value for key, value in strict.items() if key not in GLOBAL_ONLY}
    assert {key: value for key, value in override.items() if key != "module"} == per_module
    assert all(mypy[key] is strict[key] for key in GLOBAL_ONLY if key in strict)


# --------------------------------------------------------------------------------------------------- the checks fail


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    package = "fakekv"
    packages = [
        package,
        *(f"{package}/{p}" for p in ("catalog", "config", "constructs", "cli", "stacks", "stacks/wiring")),
    ]
    _write(tmp_path, {f"{p}/__init__.py": "" for p in [*packages, f"{package}/observability"]})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, package
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[name]


def test_a_cycle_through_a_function_level_and_a_type_checking_import_is_found(fake):
    root, package = fake
    _write(
        root,
        {
            f"{package}/config/a.py": "def f():\n    from fakekv.config import b\n",
            f"{package}/config/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
            f"{package}/config/c.py": "from fakekv.config.a import f\n",
        },
    )
    assert import_cycles(root, package) == [["fakekv.config.a", "fakekv.config.b"]]


def test_a_package_cycle_is_found_where_no_module_cycle_is(fake):
    root, package = fake
    _write(
        root,
        {
            f"{package}/config/schema.py": "from fakekv.constructs.chart import Chart\n",
            f"{package}/config/defaults.py": "IMAGE = 'a:1'\n",
            f"{package}/constructs/chart.py": "class Chart: ...\n",
            f"{package}/constructs/images.py": "def image():\n    from ..config import defaults\n",
            f"{package}/helpers.py": "from fakekv.stacks import app\n",
            f"{package}/stacks/app.py": "APP = 'a'\n",
            f"{package}/stacks/other.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fakekv import helpers\n"
            ),
            f"{package}/catalog/versions.py": "IMAGE = 'a:1'\n",
            f"{package}/cli/plan.py": "from fakekv.catalog.versions import IMAGE\nfrom fakekv.config import schema\n",
        },
    )
    assert import_cycles(root, package) == []
    assert package_cycles(root, package) == [
        ["fakekv.config", "fakekv.constructs"],
        ["fakekv.helpers", "fakekv.stacks"],
    ]
    assert package_cycle_imports(root, package, ["fakekv.config", "fakekv.constructs"]) == [
        "fakekv/config/schema.py:1 imports fakekv.constructs.chart.Chart",
        "fakekv/constructs/images.py:2 imports fakekv.config.defaults",
    ]


def test_a_catalog_import_beyond_the_standard_library_is_found(fake):
    root, package = fake
    _write(
        root,
        {
            f"{package}/catalog/versions.py": "from __future__ import annotations\nimport json\nfrom . import models\n",
            f"{package}/catalog/models.py": "import yaml\nfrom fakekv.config import schema\n",
            f"{package}/config/schema.py": "class Environment: ...\n",
        },
    )
    assert catalog_imports_beyond_the_standard_library(root, package) == [
        "fakekv.catalog.models:1 imports yaml",
        "fakekv.catalog.models:2 imports fakekv.config.schema",
    ]


def test_a_library_import_of_the_config_is_found_even_under_type_checking(fake):
    root, package = fake
    _write(
        root,
        {
            f"{package}/config/schema.py": "class Environment: ...\n",
            f"{package}/constructs/chart.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..config.schema import Environment\n"
            ),
            f"{package}/constructs/ok.py": "from fakekv.constructs import chart\n",
            f"{package}/catalog/versions.py": "IMAGE = 'a:1'\n",
            f"{package}/constructs/images.py": "from ..catalog.versions import IMAGE\n",
            f"{package}/config/defaults.py": "IMAGE = 'a:1'\n",
            f"{package}/constructs/defaults.py": "from fakekv.config.defaults import IMAGE\n",
        },
    )
    assert library_imports_of_the_app(root, package) == [
        "fakekv.constructs.chart:3 imports fakekv.config.schema.Environment",
        "fakekv.constructs.defaults:1 imports fakekv.config.defaults.IMAGE",
    ]


def test_a_config_reader_outside_the_allowed_packages_is_found(fake):
    root, package = fake
    _write(
        root,
        {
            f"{package}/config/schema.py": "class Environment: ...\n",
            f"{package}/helpers.py": "import fakekv.config.schema\n",
            f"{package}/cli/plan.py": "from fakekv.config.schema import Environment\n",
        },
    )
    assert config_readers(root, package) == ["fakekv.helpers:1 imports fakekv.config.schema"]


def test_props_built_outside_the_wiring_and_from_environment_are_found(fake):
    root, package = fake
    props = (
        "from dataclasses import dataclass\n\n"
        "@dataclass(frozen=True, kw_only=True)\nclass ChartProps:\n    name: str\n\n"
        "class Chart:\n    def __init__(self, *, name: str) -> None: ...\n"
    )
    _write(
        root,
        {
            f"{package}/constructs/chart.py": props,
            f"{package}/constructs/other.py": "class OtherProps:\n    @classmethod\n    def from_environment(cls): ...\n",
            f"{package}/stacks/wiring/__init__.py": "from fakekv.constructs.chart import ChartProps\nChartProps(name='a')\n",
            f"{package}/stacks/stack.py": "from fakekv.constructs.chart import Chart\nChart(name='a')\n",
            f"{package}/cli/verify.py": "from fakekv.constructs import chart as c\nc.ChartProps(name='a')\n",
            f"{package}/observability/rules.py": (
                "class Rules:\n    @classmethod\n    def from_environment(cls, env): ...\n"
            ),
        },
    )
    assert value_objects_built_outside_the_wiring(root, package) == [
        "fakekv/cli/verify.py:2 builds fakekv.constructs.chart.ChartProps",
        "fakekv/constructs/other.py:3 defines from_environment",
        "fakekv/observability/rules.py:3 defines from_environment",
    ]


def test_an_undeclared_third_party_import_is_found(fake):
    root, package = fake
    _write(root, {f"{package}/stacks/nag.py": "import json\nimport yaml\nfrom fakekv import config\n"})
    assert imports_outside_their_dependencies(root, package, library={"pyyaml"}, extras=set()) == []
    assert imports_outside_their_dependencies(root, package, library=set(), extras={"pyyaml"}) == []
    assert imports_outside_their_dependencies(root, package, library=set(), extras=set()) == [
        "fakekv.stacks.nag (app) imports yaml (from pyyaml)"
    ]


def test_an_extra_imported_on_the_library_side_is_found(fake):
    """Directly, through a top-level module or a package's ``__init__`` it imports at run time (even inside a
    function), and in an example; a ``TYPE_CHECKING`` import of an app module does not bring it to the library."""
    root, package = fake
    _write(
        root,
        {
            f"{package}/constructs/chart.py": "from fakekv import helpers\n",
            f"{package}/helpers.py": "def f():\n    import fakekv.cli.tool\n",
            f"{package}/cli/__init__.py": "import pydantic\n",
            f"{package}/cli/tool.py": "",
            f"{package}/constructs/typed.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fakekv.stacks import nag\n"
            ),
            f"{package}/stacks/nag.py": "import pydantic\nimport yaml\n",
            "examples/team/app.py": "import pydantic\nimport yaml\n",
        },
    )
    assert library_side(modules(root, package), package) == {
        "fakekv",
        "fakekv.constructs",
        "fakekv.constructs.chart",
        "fakekv.constructs.typed",
        "fakekv.helpers",
        "fakekv.cli",
        "fakekv.cli.tool",
    }
    found = imports_outside_their_dependencies(
        root, package, library={"pyyaml"}, extras={"pydantic"}, library_files=(root / "examples/team/app.py",)
    )
    assert found == [
        "examples/team/app.py (library) imports pydantic (from pydantic)",
        "fakekv.cli (library) imports pydantic (from pydantic)",
    ]
    # At import time only the package that imports pydantic fails (helpers imports it in a function).
    names = sorted(library_side(modules(root, package), package))
    assert import_failures_without(root, names, ["pydantic"]) == {
        name: "ModuleNotFoundError: import of pydantic halted; None in sys.modules"
        for name in ("fakekv.cli", "fakekv.cli.tool")
    }
    assert import_failures_without(root, names, []) == {}


def _function(name: str, lines: int) -> str:
    """``def name():`` whose last line is ``lines`` lines below it."""
    return f"def {name}():\n" + "    x = 1\n" * lines


def _indented(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.splitlines())


def test_a_long_library_function_is_found(fake):
    root, package = fake
    limit = MAX_FUNCTION_LINES
    _write(
        root,
        {
            f"{package}/constructs/ok.py": _function("at_the_limit", limit),
            f"{package}/k8s_charts/chart.py": "import os\n\nclass Chart:\n"
            + _indented(_function("__init__", limit + 1)),
            f"{package}/constructs/nested.py": "def outer():\n" + _indented(_function("inner", limit + 1)),
            f"{package}/cli/plan.py": _function("outside_the_library", limit + 1),
        },
    )
    assert long_functions(root, package) == [
        f"fakekv.constructs.nested:1 outer is {limit + 2} lines",
        f"fakekv.constructs.nested:2 outer.inner is {limit + 1} lines",
        f"fakekv.k8s_charts.chart:4 Chart.__init__ is {limit + 1} lines",
    ]
