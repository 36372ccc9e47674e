"""The architecture stays as designed: every module under src/berth is on docs/architecture.md's map
(and nothing else is), no module uses another's private names or is over 700 lines, and every backend
maps client errors through its one table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src"


def _modules() -> set[str]:
    return {p.relative_to(SRC).as_posix() for p in (SRC / "berth").rglob("*.py")}


def _mapped() -> set[str]:
    text = DOC.read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(berth/[^`]+\.py)` \|", section, flags=re.M))


def test_every_module_is_on_the_map() -> None:
    missing = sorted(_modules() - _mapped())
    assert not missing, f"add these modules to docs/architecture.md's module map, one line each: {missing}"


def test_the_map_names_no_module_that_does_not_exist() -> None:
    stale = sorted(_mapped() - _modules())
    assert not stale, f"docs/architecture.md's module map names modules that are gone: {stale}"


MAX_MODULE_LINES = 700
"""Issue 33: no room so big that it mixes concerns; a module that outgrows this is split into a package."""


def test_no_module_is_over_700_lines() -> None:
    sizes = {name: len((SRC / name).read_text().splitlines()) for name in _modules()}
    big = {name: n for name, n in sorted(sizes.items()) if n > MAX_MODULE_LINES}
    assert not big, f"split these modules (at most {MAX_MODULE_LINES} lines each): {big}"
    assert max(sizes.values()) > MAX_MODULE_LINES // 2, sizes  # the sizes were read (a real tree, not an empty one)


# --- layer order and import cycles, true by test ---------------------------------------------
#
# Every import of one berth module by another is read from the source (no import): at module level,
# inside functions (a lazy import is still a dependency), and under `if TYPE_CHECKING:`, which
# counts: a type a module names is a dependency that a reader, an IDE and mypy follow, and a cycle
# through it is still a circle in the design (`_store` <-> `_witness` is half TYPE_CHECKING). An
# import names the most specific berth module it reaches (`from berth.backends import memory` is
# berth.backends.memory; `from berth.backends import Backend` is berth.backends).

# Upward imports still being taken apart, each (importer, imported) with who removes it and why it
# is there. This list may only shrink: the test also fails when an entry no longer happens.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

# Import cycles still being taken apart, each as the set of modules that import each other, with why.
# This list may only shrink: the test also fails when an entry is no longer a cycle.
CYCLES_ALLOWED: dict[frozenset[str], str] = {}


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """The ids of every node under an `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in {
            getattr(node.test, "id", None),
            getattr(node.test, "attr", None),
        }:
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def _imports(src: Path) -> dict[str, list[tuple[str, int, bool]]]:
    """{module: [(berth module it imports, line, under TYPE_CHECKING), ...]} for every module under `src`/berth."""
    paths = {_dotted(p, src): p for p in sorted((src / "berth").rglob("*.py"))}

    def reached(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, list[tuple[str, int, bool]]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text())
        typing_only = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: list[tuple[str, int, bool]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` packages up
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            else:
                continue
            for target in targets:
                module = reached(target) if target.split(".")[0] == "berth" else None
                if module is not None and module != name:
                    found.append((module, node.lineno, id(node) in typing_only))
        graph[name] = found
    return graph


def _layers(doc: str) -> list[tuple[str, list[str]]]:
    """The layer table of docs/architecture.md: [(layer, [its module paths or package folders]), ...], lowest first."""
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+\. [^|]+?) \| ([^|]+) \|", section, flags=re.M)
    return [(layer, re.findall(r"`(berth/[^`]*)`", modules)) for layer, modules in rows]


def _layer_of(module: str, layers: list[tuple[str, list[str]]]) -> list[int]:
    """The indexes of every layer whose entries hold `module` (a path, berth/x.py)."""
    return [
        index
        for index, (_, entries) in enumerate(layers)
        if any(module == e or (e.endswith("/") and module.startswith(e)) for e in entries)
    ]


def _path_of(dotted: str, src: Path) -> str:
    package = src / Path(*dotted.split(".")) / "__init__.py"
    return package.relative_to(src).as_posix() if package.exists() else dotted.replace(".", "/") + ".py"


def _upward_imports(src: Path, layers: list[tuple[str, list[str]]]) -> dict[tuple[str, str], list[str]]:
    """Every import of a higher layer than the importer's own: {(importer, imported): [what, where], ...}."""
    found: dict[tuple[str, str], list[str]] = {}
    for name, imports in _imports(src).items():
        where = _path_of(name, src)
        mine = _layer_of(where, layers)
        for target, line, typing_only in imports:
            theirs = _layer_of(_path_of(target, src), layers)
            if len(mine) == 1 and len(theirs) == 1 and theirs[0] > mine[0]:
                how = " (under TYPE_CHECKING)" if typing_only else ""
                found.setdefault((name, target), []).append(
                    f"{where}:{line}: {name} (layer {layers[mine[0]][0]}) imports {target} "
                    f"(layer {layers[theirs[0]][0]}){how}"
                )
    return found


def _cycles(graph: dict[str, set[str]]) -> dict[frozenset[str], str]:
    """Every import cycle: {the modules that import each other: one cycle through them spelled out}
    (Tarjan's strongly connected components, then a shortest way back to the first module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    cycles: dict[frozenset[str], str] = {}
    for component in components:
        members = set(component)
        start = min(members)
        if len(members) == 1 and start not in graph.get(start, ()):
            continue
        # breadth first from `start`, within the component, back to `start`
        paths: dict[str, list[str]] = {start: [start]}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    cycles[frozenset(members)] = " -> ".join([*paths[node], start])
                    queue = []
                    break
                if nxt in members and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    queue.append(nxt)
    return cycles


def _module_graph(src: Path) -> dict[str, set[str]]:
    return {name: {target for target, _, _ in imports} for name, imports in _imports(src).items()}


def test_every_module_is_on_exactly_one_layer() -> None:
    layers = _layers(DOC.read_text())
    assert len(layers) > 10, "docs/architecture.md's layer table could not be read"
    wrong = {module: [layers[i][0] for i in _layer_of(module, layers)] for module in sorted(_modules())}
    wrong = {module: on for module, on in wrong.items() if len(on) != 1}
    assert not wrong, f"put each module on exactly one layer of docs/architecture.md's layer table: {wrong}"


def test_no_module_imports_a_higher_layer() -> None:
    found = _upward_imports(SRC, _layers(DOC.read_text()))
    new = [line for pair, lines in sorted(found.items()) if pair not in UPWARD_ALLOWED for line in lines]
    assert not new, (
        "a module imports a higher layer than its own (docs/architecture.md, Layers): move the module, or what "
        "it needs, to the right layer:\n  " + "\n  ".join(new)
    )
    gone = sorted(set(UPWARD_ALLOWED) - set(found))
    assert not gone, f"these allowed upward imports no longer happen: remove them from UPWARD_ALLOWED: {gone}"


def test_no_import_cycle() -> None:
    cycles = _cycles(_module_graph(SRC))
    new = [cycle for members, cycle in sorted(cycles.items(), key=lambda c: c[1]) if members not in CYCLES_ALLOWED]
    assert not new, "import cycles in berth (take one edge out):\n  " + "\n  ".join(new)
    gone = [sorted(members) for members in CYCLES_ALLOWED if members not in cycles]
    assert not gone, f"these allowed cycles are gone (or changed): remove them from CYCLES_ALLOWED: {gone}"


_LAYERED = {
    "berth/__init__.py": "from berth import _low\n",
    "berth/_low.py": "import os\n\ndef later():\n    from berth._high import thing\n",  # line 4: up, lazily
    "berth/_mid.py": (
        "from typing import TYPE_CHECKING\n"
        "from berth._low import later\n"
        "if TYPE_CHECKING:\n"
        "    from berth._high import Thing\n"  # line 4: up, for types only
    ),
    "berth/_high.py": "from berth._mid import later\nfrom berth.pkg import sub\nthing = 1\n",
    "berth/pkg/__init__.py": "from . import sub\n",  # relative
    "berth/pkg/sub.py": "import berth.pkg\n",  # the package's own cycle
}
_LAYER_DOC = """## Layers

| layer | modules | what |
| --- | --- | --- |
| 1. low | `berth/_low.py` | - |
| 2. mid | `berth/_mid.py` `berth/pkg/` | - |
| 3. high | `berth/_high.py` `berth/__init__.py` | - |

## Next
"""


def test_the_layer_and_cycle_checks_find_a_planted_upward_import_and_cycle(tmp_path: Path) -> None:
    for name, text in _LAYERED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    layers = _layers(_LAYER_DOC)
    assert [layer for layer, _ in layers] == ["1. low", "2. mid", "3. high"]
    assert _layer_of("berth/pkg/sub.py", layers) == [1]
    assert _upward_imports(tmp_path, layers) == {
        ("berth._low", "berth._high"): [
            "berth/_low.py:4: berth._low (layer 1. low) imports berth._high (layer 3. high)"
        ],
        ("berth._mid", "berth._high"): [
            "berth/_mid.py:4: berth._mid (layer 2. mid) imports berth._high (layer 3. high) (under TYPE_CHECKING)"
        ],
    }
    assert _cycles(_module_graph(tmp_path)) == {
        frozenset({"berth._high", "berth._low", "berth._mid"}): "berth._high -> berth._mid -> berth._high",
        frozenset({"berth.pkg", "berth.pkg.sub"}): "berth.pkg -> berth.pkg.sub -> berth.pkg",
    }
    # the planted edges out, no cycle is left
    (tmp_path / "berth/_high.py").write_text("thing = 1\n")
    (tmp_path / "berth/pkg/sub.py").write_text("")
    assert _cycles(_module_graph(tmp_path)) == {}


# --- no private cross-module calls ----------------------------------------------------------
#
# Every module under src/berth is private (`_store.py`) and says what it offers the others in its
# public (non-underscore) names; an underscore name is that module's own. These checks read the
# source (no import) and fail on a module that uses another berth module's underscore name:
#
#   A. `from berth.x import _name` (a submodule, `from berth._cli import _app`, is a module, not a name);
#   B. `obj._name` where obj is another berth module (`_store._warn_plaintext`), or what one of its
#      names was imported as (`AsyncStore._over`), or a value known to be another module's class: an
#      attribute the class assigns from one (`self._core = QuestionStore(...)`, `self._core: Store`),
#      a parameter annotated with one, a local made by one;
#   C. `obj._name` where `_name` is defined nowhere in this module but in another berth module
#      (whatever `obj` is: the seam used without a declaration in sight);
#   D. a plan step (`berth._plan.call(role, "_name", ...)`): a plan runs against another module's
#      objects (the async twins), so the method it names is a declared one.
#
# Underscore names of the standard library and of other packages (`namedtuple._replace`,
# `sys._getframe`) are not berth's and are not checked here.


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _names_in(node: ast.AST | None) -> set[str]:
    """The plain names an annotation or a call's callee mentions (`Store | None` -> {"Store"})."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _defined(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, attributes it assigns, module and class variables."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


class _Module:
    def __init__(self, dotted: str, path: Path, tree: ast.Module, modules: set[str]):
        self.dotted, self.path, self.tree = dotted, path, tree
        self.foreign: dict[str, str] = {}  # local name -> "berth.x" (a module) or "berth.x:Name" (a name of it)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "berth":
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    target = sub if sub in modules else f"{node.module}:{alias.name}"
                    if node.module != dotted:
                        self.foreign[alias.asname or alias.name] = target
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "berth" and alias.name != dotted:
                        self.foreign[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "berth"

    def foreign_class(self, names: set[str]) -> str | None:
        """The other module's name among `names` (an annotation's, a callee's), if any."""
        for name in sorted(names):
            target = self.foreign.get(name, "")
            if ":" in target:
                return target
        return None


def _class_attrs(module: _Module, cls: ast.ClassDef) -> dict[str, str]:
    """The attributes of `cls` known to hold another module's class: {"_core": "berth._store:Store"}."""
    attrs: dict[str, str] = {}
    for node in ast.walk(cls):
        target: ast.expr
        if isinstance(node, ast.AnnAssign):
            target, names = node.target, _names_in(node.annotation)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
            target, names = node.targets[0], _names_in(node.value.func)
        else:
            continue
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            name = target.attr
        elif isinstance(target, ast.Name) and node in cls.body:
            name = target.id
        else:
            continue
        owner = module.foreign_class(names)
        if owner is not None:
            attrs[name] = owner
    return attrs


def _function_locals(module: _Module, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """The parameters and locals of `fn` known to hold another module's class."""
    held: dict[str, str] = {}
    args = fn.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            owner = module.foreign_class(_names_in(arg.annotation))
            if owner is not None:
                held[arg.arg] = owner
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            owner = module.foreign_class(_names_in(node.value.func))
            for target in node.targets:
                if owner is not None and isinstance(target, ast.Name):
                    held[target.id] = owner
    return held


def _private_crossings(src: Path) -> list[str]:
    """Every use, in a module under `src`/berth, of another berth module's underscore name (rules A-D)."""
    paths = sorted((src / "berth").rglob("*.py"))
    modules = {_dotted(p, src) for p in paths}
    parsed = {_dotted(p, src): _Module(_dotted(p, src), p, ast.parse(p.read_text()), modules) for p in paths}
    defined = {name: _defined(m.tree) for name, m in parsed.items()}
    found: list[tuple[str, int, str]] = []
    for name, module in parsed.items():
        others = set().union(*(d for n, d in defined.items() if n != name))
        where = module.path.relative_to(src).as_posix()

        def report(node: ast.AST, what: str) -> None:
            found.append((where, getattr(node, "lineno", 0), what))  # noqa: B023

        # A: private names imported from another berth module.
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "berth":
                for alias in node.names:
                    if _is_private(alias.name) and f"{node.module}.{alias.name}" not in modules:
                        report(node, f"from {node.module} import {alias.name}")

        # B and C: `obj._name` on another module's object, or a name only another module defines.
        # Functions and methods first, so what a class or a function knows of a value names its owner;
        # the module's whole tree last, for rule C alone.
        scopes: list[tuple[ast.AST, dict[str, str], dict[str, str]]] = []
        for cls in [n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)]:
            attrs = _class_attrs(module, cls)
            for fn in ast.walk(cls):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    scopes.append((fn, attrs, _function_locals(module, fn)))
        for fn in module.tree.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scopes.append((fn, {}, _function_locals(module, fn)))
        scopes.append((module.tree, {}, {}))
        seen: set[tuple[int, int, str]] = set()
        for scope, attrs, held in scopes:
            for node in ast.walk(scope):
                if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                    continue
                spot = (node.lineno, node.col_offset, node.attr)
                value = node.value
                owner: str | None = None
                if isinstance(value, ast.Name) and value.id not in ("self", "cls"):
                    owner = held.get(value.id) or module.foreign.get(value.id)
                    if owner is not None and ":" not in owner and f"{owner}.{node.attr}" in modules:
                        owner = None  # a submodule of a package: a module, not a private name
                elif (
                    isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id in ("self", "cls")
                ):
                    owner = attrs.get(value.attr)
                if owner is None and node.attr not in defined[name] and node.attr in others:
                    owner = "another berth module"
                if owner is not None and spot not in seen:
                    seen.add(spot)
                    report(node, f"{ast.unparse(node)} (a private name of {owner})")

        # D: plan steps that name a private method.
        if "call" in module.foreign and module.foreign["call"] == "berth._plan:call" or name == "berth._plan":
            for node in ast.walk(module.tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "call"
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)
                    and _is_private(node.args[1].value)
                ):
                    report(node, f"plan step {ast.unparse(node)[:60]} names a private method")
    return [f"{where}:{line}: {what}" for where, line, what in sorted(found)]


def test_no_module_uses_another_modules_private_names() -> None:
    crossings = _private_crossings(SRC)
    assert not crossings, (
        "a berth module uses another's underscore name: declare what it needs as a public name of that module "
        "(in its __all__, or a method without the underscore) instead:\n  " + "\n  ".join(crossings)
    )


def _declared(tree: ast.Module) -> set[str] | None:
    """A module's `__all__`, or None when it has none."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def _undeclared_imports(src: Path) -> list[str]:
    """Every name a module under `src`/berth imports from another berth module that is not in that module's
    `__all__` (E): what a module offers the others is declared there, as httpx's modules do."""
    paths = sorted((src / "berth").rglob("*.py"))
    modules = {_dotted(p, src): ast.parse(p.read_text()) for p in paths}
    found = []
    for path in paths:
        name = _dotted(path, src)
        for node in ast.walk(modules[name]):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in modules or node.module == name:
                continue
            declared = _declared(modules[node.module])
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules or _is_private(alias.name):
                    continue  # a submodule; or a private name, which rule A reports
                if declared is None or alias.name not in declared:
                    where = path.relative_to(src).as_posix()
                    found.append(f"{where}:{node.lineno}: {alias.name} is not in {node.module}.__all__")
    return found


def test_what_a_module_takes_from_another_is_in_its_all() -> None:
    undeclared = _undeclared_imports(SRC)
    assert not undeclared, "add these names to their module's __all__ (its declared face):\n  " + "\n  ".join(
        undeclared
    )


_FAKE = {
    "berth/__init__.py": "",
    "berth/_plan.py": "def call(role, method, *args):\n    return role, method, args\n",
    "berth/_own.py": (
        "import collections\n"
        "__all__ = ['Own', 'public']\n"
        "class Own:\n"
        "    def _hidden(self): ...\n"
        "    def _secret(self): ...\n"
        "    def shown(self): return self._hidden()\n"
        "def public(): ...\n"
        "def _helper(): ...\n"
    ),
    "berth/pkg/__init__.py": "",
    "berth/pkg/_sub.py": "",
    "berth/user.py": (
        "import berth._own as own_module\n"
        "from berth import pkg\n"
        "from berth._own import Own, _helper\n"  # A
        "from berth._own import Own as Again, public\n"
        "from berth._plan import call as step\n"  # E: not in berth._plan.__all__ (it has none)
        "from berth._plan import call\n"
        "from berth.pkg import _sub\n"  # a submodule: allowed
        "class Mine:\n"
        "    held: Own\n"
        "    def __init__(self):\n"
        "        self._core = Own()\n"
        "        self._mine = 1\n"
        "    def f(self, other: Own | None, pair):\n"
        "        local = Own()\n"
        "        self._core._hidden()\n"  # B: an attribute assigned from the class
        "        self.held._hidden()\n"  # B: a class-level annotation
        "        other._hidden()\n"  # B: a parameter's annotation
        "        local._hidden()\n"  # B: a local made by the class
        "        Own._hidden(local)\n"  # B: the imported name itself
        "        own_module._helper()\n"  # B: another module, as a module
        "        pkg._sub\n"  # a submodule: allowed
        "        pair._secret()\n"  # C: defined only in another module
        "        pair._replace(x=1)\n"  # namedtuple's: allowed
        "        self._mine\n"  # its own: allowed
        "        yield call('store', '_hidden')\n"  # D
        "        yield call('store', 'shown')\n"  # allowed
    ),
}


def test_the_private_name_check_finds_each_kind_of_crossing(tmp_path: Path) -> None:
    for name, text in _FAKE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = _private_crossings(tmp_path)
    lines = sorted({int(f.split(":")[1]) for f in found})
    assert all(f.startswith("berth/user.py:") for f in found), found
    # Line numbers of berth/user.py, one for each crossing marked above and none for the allowed uses.
    assert lines == [3, 15, 16, 17, 18, 19, 20, 22, 25], found
    assert _undeclared_imports(tmp_path) == [
        "berth/user.py:5: call is not in berth._plan.__all__",
        "berth/user.py:6: call is not in berth._plan.__all__",
    ]


# --- one error-mapping shape for every backend (issue 14.3) ------------------------------------

BACKENDS = SRC / "berth" / "backends"


def _berth_error_names(tree: ast.Module) -> set[str]:
    """The names a module imports from berth._errors (the berth error classes it can make)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "berth._errors":
            names |= {alias.asname or alias.name for alias in node.names if alias.name[0].isupper()}
    return names


def _called_name(node: ast.AST | None) -> str | None:
    return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None


def _ad_hoc_mappers(path: Path, where: str) -> list[str]:
    """Where a backend module maps a client error by hand instead of through its `ErrorMap`."""
    tree = ast.parse(path.read_text())
    errors = _berth_error_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        # `raise BackendError(...) from exc`: a caught exception turned into a berth error by hand
        # (`from None`, an error that hides a bad input's details, is not a mapping).
        if isinstance(node, ast.Raise) and _called_name(node.exc) in errors:
            if node.cause is not None and not (isinstance(node.cause, ast.Constant) and node.cause.value is None):
                found.append((node.lineno, f"{where}:{node.lineno}: raise {_called_name(node.exc)}(...) from ..."))
        # `return BackendError(...)` in a helper: an error made for a caller to raise (`_oserror`, ...)
        if isinstance(node, ast.Return) and _called_name(node.value) in errors:
            found.append((node.lineno, f"{where}:{node.lineno}: return {_called_name(node.value)}(...)"))
        # the table applied another way than `except _ERRORS.catches` / `raise _ERRORS.error(...)`
        # (a `with _ERRORS.mapped(...)` form was dropped: 0.5-1.8 us of CPU a call, the `except` none)
        if isinstance(node, ast.Attribute) and _table_attr(node) not in (None, "error", "catches"):
            found.append((node.lineno, f"{where}:{node.lineno}: {node.attr} (only `except` + `error`)"))
    return [text for _, text in sorted(found)]


_TABLES = ("_ERRORS", "ERRORS")  # a one-module backend's own table; a package's, shared by its modules


def _declares_its_table(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] in ([n] for n in _TABLES):
            return _called_name(node.value) == "ErrorMap"
    return False


def _table_attr(node: ast.AST) -> str | None:
    """`error` of `_ERRORS.error`: the attribute of a backend's table that `node` reads, if it is one."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in _TABLES:
        return node.attr
    return None


def _uses_its_table(tree: ast.Module) -> bool:
    return any(_table_attr(node) in ("error", "catches") for node in ast.walk(tree))


def _backend_units(backends: Path) -> list[tuple[str, list[Path]]]:
    """Each backend as the modules it is made of: a module, or a package (`redis/`) and all of its modules."""
    units = [(path.name, [path]) for path in sorted(backends.glob("*.py"))]
    for package in sorted(p for p in backends.iterdir() if (p / "__init__.py").is_file()):
        units.append((package.name + "/", sorted(package.rglob("*.py"))))
    return units


def _table_problems(backends: Path) -> list[str]:
    problems = []
    for label, paths in _backend_units(backends):
        if label in ("_errmap.py", "__init__.py"):
            continue  # the table itself; the base class and registry, whose errors are an import's, not a client's
        trees = []
        for path in paths:
            problems += _ad_hoc_mappers(path, path.relative_to(backends).as_posix())
            trees.append(ast.parse(path.read_text()))
        catches = any(isinstance(node, ast.ExceptHandler) for tree in trees for node in ast.walk(tree))
        if label.startswith("_") or not catches:
            continue  # private helpers, and a backend with no client to fail (memory://)
        if not any(_declares_its_table(tree) for tree in trees):
            problems.append(f"{label}: declares no `_ERRORS = ErrorMap(...)` table at module level")
        elif not any(_uses_its_table(tree) for tree in trees):
            problems.append(f"{label}: declares `_ERRORS` but never maps through it")
    return problems


def test_every_backend_maps_client_errors_through_its_one_table() -> None:
    """One shape (berth/backends/_errmap.py): a table per backend module, applied one way,
    `except _ERRORS.catches` then `raise _ERRORS.error(...)`; no hand-made mapper beside it."""
    problems = _table_problems(BACKENDS)
    assert not problems, "map client errors through the module's `_ERRORS` table:\n" + "\n".join(problems)


def test_the_table_check_finds_a_hand_made_mapper(tmp_path: Path) -> None:
    """The check above can fail: a backend with its own mapper, and one without a table, are both found."""
    (tmp_path / "good.py").write_text(
        "from berth._errors import BackendError\nfrom berth.backends._errmap import ErrorMap, Row\n"
        "_ERRORS = ErrorMap('good', [Row(OSError)])\n"
        "def get(name):\n    try:\n        return open(name)\n"
        "    except _ERRORS.catches as exc:\n        raise _ERRORS.error(exc, 'get', name) from exc\n"
    )
    assert _table_problems(tmp_path) == []
    (tmp_path / "adhoc.py").write_text(
        "from berth._errors import BackendError as Failed\n"
        "def _failed(exc, name):\n    return Failed(f'could not read {name!r}: {exc}')\n"
        "def get(name):\n    try:\n        return open(name)\n"
        "    except OSError as exc:\n        raise Failed(f'{name}: {exc}') from exc\n"
    )
    assert _table_problems(tmp_path) == [
        "adhoc.py:3: return Failed(...)",
        "adhoc.py:8: raise Failed(...) from ...",
        "adhoc.py: declares no `_ERRORS = ErrorMap(...)` table at module level",
    ]
    # a package backend: one table for all of its modules, a hand-made mapper in any of them found
    (tmp_path / "adhoc.py").unlink()
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_wire.py").write_text(
        "from berth.backends._errmap import ErrorMap, Row\nERRORS = ErrorMap('pkg', [Row(OSError)])\n"
    )
    (package / "_sync.py").write_text(
        "from berth._errors import BackendError\nfrom berth.backends.pkg._wire import ERRORS\n"
        "def get(name):\n    try:\n        return open(name)\n"
        "    except ERRORS.catches as exc:\n        raise ERRORS.error(exc, 'get', name) from exc\n"
    )
    assert _table_problems(tmp_path) == []
    (package / "_async.py").write_text(
        "from berth._errors import BackendError\n"
        "async def get(name):\n    try:\n        return open(name)\n"
        "    except OSError as exc:\n        raise BackendError(str(exc)) from exc\n"
    )
    assert _table_problems(tmp_path) == ["pkg/_async.py:6: raise BackendError(...) from ..."]
    (package / "_async.py").write_text(
        "from berth.backends.pkg._wire import ERRORS\n"
        "async def get(name):\n    with ERRORS.mapped('get', name):\n        return open(name)\n"
    )
    assert _table_problems(tmp_path) == ["pkg/_async.py:3: mapped (only `except` + `error`)"]
