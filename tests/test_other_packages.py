"""Toward other packages, public APIs only: no module under src/berth reads or writes another package's
underscore attribute but those listed below, each capped in pyproject and watched by a test that fails
on the package's next release (issue 33)."""

from __future__ import annotations

import ast
import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PYPROJECT = ROOT / "pyproject.toml"

# (module, underscore attribute) pairs that reach into another package, each with why it is allowed.
# May only shrink: the test fails on a pair that no longer occurs.
ALLOWED: dict[tuple[str, str], str] = {
    # CPython's documented frame accessor, the cheap way to name the caller in a message.
    ("berth/_errors.py", "_getframe"): "sys._getframe (stdlib)",
    # pydantic-ai has no public reader of an agent's instructions, which the config digest must cover
    # (a run parked under other instructions is never resumed). Capped below the next release in
    # pyproject's pydantic-ai extra; test_pydantic_ai_private_reads_still_hold fails on that release.
    ("berth/pydantic_ai.py", "_instructions"): "Agent._instructions (pydantic-ai, capped)",
    # The lean Redis pool subclasses redis.asyncio's pool and keeps its two connection lists: redis is
    # capped <9 in pyproject, and tests/backends/test_redis_pool.py fails naming the field when redis-py
    # moves them.
    ("berth/backends/redis/_pool.py", "_available_connections"): "redis.asyncio.ConnectionPool (lean pool)",
    ("berth/backends/redis/_pool.py", "_in_use_connections"): "redis.asyncio.ConnectionPool (lean pool)",
}

# Underscore names that are another package's public API by convention: namedtuple's methods
# (`_replace`, `_asdict`, `_fields`, `_make` are documented, underscored only to avoid field names).
PUBLIC_BY_CONVENTION = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign_bases(cls: ast.ClassDef, foreign: set[str]) -> bool:
    """Whether `cls` subclasses a class of another package (a base whose root name is imported from one)."""
    for base in cls.bases:
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in foreign:
            return True
    return False


def _own_attributes(tree: ast.Module, foreign: set[str]) -> tuple[set[str], dict[int, set[str]]]:
    """The attribute names a module's own classes define (their bodies, `__slots__`, and what their methods
    assign to `self`/`cls`), and, for a class over another package's class, only what it declares or its
    `__init__` assigns (the rest of `self._x` there is the base's): ({names}, {id(class): {names}})."""
    own: set[str] = set()
    narrow: dict[int, set[str]] = {}
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        declared: set[str] = set()
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                declared.add(stmt.name)
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name):
                    declared.add(target.id)
                    if target.id == "__slots__" and isinstance(stmt, ast.Assign):
                        declared |= {
                            c.value
                            for c in ast.walk(stmt.value)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)
                        }
        assigned: set[str] = set()
        in_init: set[str] = set()
        for fn in [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in ("self", "cls")
                ):
                    assigned.add(node.attr)
                    if fn.name == "__init__":
                        in_init.add(node.attr)
        if _foreign_bases(cls, foreign):
            narrow[id(cls)] = declared | in_init
            own |= declared | in_init
        else:
            own |= declared | assigned
    return own, narrow


def _imported_from_elsewhere(tree: ast.Module) -> set[str]:
    """Local names bound to another package (not berth): `import redis`, `from x import Y`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "berth":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] != "berth":
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _reached(node: ast.AST) -> tuple[str, ast.expr] | None:
    """The underscore attribute `node` reads or writes, and of what: `obj._name`, `getattr(obj, "_name")`."""
    if isinstance(node, ast.Attribute) and _is_private(node.attr):
        return node.attr, node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and _is_private(node.args[1].value)
    ):
        return node.args[1].value, node.args[0]
    return None


def _scan(node: ast.AST, inside: set[str] | None, narrow: dict[int, set[str]], berths: set[str]) -> list[ast.AST]:
    """The nodes under `node` that reach into another package; `inside`: what the enclosing class over
    another package's class declares (None in a berth class, whose `self._x` is its own)."""
    if isinstance(node, ast.ClassDef):
        inside = narrow.get(id(node))
    found: list[ast.AST] = []
    reached = _reached(node)
    if reached is not None and reached[0] not in PUBLIC_BY_CONVENTION:
        name, receiver = reached
        mine = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
        if (mine and inside is not None and name not in inside) or (not mine and name not in berths):
            found.append(node)
    for child in ast.iter_child_nodes(node):
        found += _scan(child, inside, narrow, berths)
    return found


def _foreign_privates(src: Path) -> dict[tuple[str, str], list[str]]:
    """Every read or write, in a module under `src`/berth, of an underscore attribute that is not berth's:
    `obj._name`, or `getattr`/`setattr`/`hasattr`/`delattr(obj, "_name")`, where no berth class defines
    `_name` (another berth module's names are test_architecture.py's business), and `self._name` in a class
    over another package's class where this class does not declare `_name`.
    {(module, name): ["module:line: text", ...]}."""
    trees = {p.relative_to(src).as_posix(): ast.parse(p.read_text()) for p in sorted((src / "berth").rglob("*.py"))}
    owned = {where: _own_attributes(tree, _imported_from_elsewhere(tree)) for where, tree in trees.items()}
    berths = set().union(*(own for own, _ in owned.values()))
    found: dict[tuple[str, str], list[str]] = {}
    for where, tree in trees.items():
        for node in _scan(tree, None, owned[where][1], berths):
            reached = _reached(node)
            assert reached is not None
            line = getattr(node, "lineno", 0)
            found.setdefault((where, reached[0]), []).append(f"{where}:{line}: {ast.unparse(node)[:100]}")
    return found


def test_no_module_reaches_into_another_packages_underscore_attributes() -> None:
    found = _foreign_privates(SRC)
    new = [line for pair, lines in sorted(found.items()) if pair not in ALLOWED for line in lines]
    assert not new, (
        "a berth module reads or writes another package's underscore attribute: use its public API, or where "
        "there is none, cap the package's version in pyproject, test the cap, and add the pair to ALLOWED "
        "with why:\n  " + "\n  ".join(new)
    )
    gone = sorted(set(ALLOWED) - set(found))
    assert not gone, f"no longer used: remove these from ALLOWED (the list only shrinks): {gone}"


_PLANTED = {
    "berth/__init__.py": "",
    "berth/_mine.py": (
        "import collections\n"
        "import sys\n"
        "from redis.asyncio import ConnectionPool\n"
        "class Mine:\n"
        "    __slots__ = ('_slot',)\n"
        "    def __init__(self, agent, parts):\n"
        "        self._own = 1\n"
        "        self._slot = agent._instructions\n"  # 8: another package's attribute
        "        parts._replace(x=1)\n"  # namedtuple's: allowed
        "        getattr(agent, '_tools', None)\n"  # 10: by name
        "        sys._getframe(1)\n"  # 11
        "        other = Mine(agent, parts)\n"
        "        other._own\n"  # another of this module's objects: allowed
        "class Pool(ConnectionPool):\n"
        "    def __init__(self):\n"
        "        self._waiters = []\n"
        "    def take(self):\n"
        "        self._waiters.pop()\n"  # its own: allowed
        "        self._available_connections = []\n"  # 19: the base's
    ),
}


def test_the_check_finds_a_planted_reach_into_another_package(tmp_path: Path) -> None:
    for name, text in _PLANTED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = _foreign_privates(tmp_path)
    assert {pair: [line.split(": ")[0] for line in lines] for pair, lines in found.items()} == {
        ("berth/_mine.py", "_instructions"): ["berth/_mine.py:8"],
        ("berth/_mine.py", "_tools"): ["berth/_mine.py:10"],
        ("berth/_mine.py", "_getframe"): ["berth/_mine.py:11"],
        ("berth/_mine.py", "_available_connections"): ["berth/_mine.py:19"],
    }


# --- the caps: where no public API exists, the next release fails here, saying what to check ---------------


def _cap(extra: str, distribution: str) -> Version:
    """The upper bound pyproject's `extra` puts on `distribution` (`<X`)."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    for spec in extras[extra]:
        requirement = Requirement(spec)
        if requirement.name == distribution:
            caps = [Version(s.version) for s in requirement.specifier if s.operator == "<"]
            assert caps, f"pyproject's {extra} extra must cap {distribution} (`<next release`): {spec}"
            return caps[0]
    raise AssertionError(f"pyproject's {extra} extra does not name {distribution}")


def _within(distribution: str, extra: str, what_to_check: str) -> None:
    installed = Version(importlib.metadata.version(distribution))
    cap = _cap(extra, distribution)
    assert installed < cap, (
        f"{distribution} {installed} is at or past berth's cap (<{cap}, pyproject's {extra} extra). {what_to_check} "
        f"Then raise the cap in pyproject."
    )


def test_pydantic_ai_private_reads_still_hold() -> None:
    """berth.pydantic_ai digests an agent's instructions from `Agent._instructions` (no public reader)."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    import berth.pydantic_ai as bpa

    _within(
        "pydantic-ai-slim",
        "pydantic-ai",
        "berth.pydantic_ai reads Agent._instructions for the config digest: check the new release still keeps "
        "the agent's instructions there (a list of items with `.instruction`: the text, or the function), or "
        "offers a public reader to use instead.",
    )

    def dynamic() -> str:
        return "it is Tuesday"

    agent = Agent(TestModel(), instructions=["You run ops.", dynamic])
    items = agent._instructions
    assert [getattr(i, "instruction", i) for i in items] == ["You run ops.", dynamic], (
        "pydantic-ai's Agent._instructions changed shape: berth.pydantic_ai's config digest would miss instructions"
    )
    other = Agent(TestModel(), instructions=["You run payroll.", dynamic])
    assert bpa.config_digest(agent) != bpa.config_digest(other), "the digest no longer covers the instructions"


def test_openai_agents_serialized_layout_still_holds() -> None:
    """berth.openai_agents applies an edited call to the serialized RunState (the SDK has no public call to
    change a pending call's arguments) only for the schema versions whose layout it knows."""
    pytest.importorskip("agents")
    from agents import run_state

    import berth.openai_agents as boa

    _within(
        "openai-agents",
        "openai-agents",
        "berth.openai_agents edits a pending call's arguments in RunState.to_json()'s layout "
        "(berth.openai_agents._edit: the call's `arguments` wherever its call_id appears, and "
        "context.tool_invocations): check the new schema keeps that layout, or offers a public call, and add "
        "its $schemaVersion to EDITABLE_SCHEMAS.",
    )
    assert run_state.CURRENT_SCHEMA_VERSION in boa.EDITABLE_SCHEMAS, (
        f"the Agents SDK writes RunState schema {run_state.CURRENT_SCHEMA_VERSION}, which berth.openai_agents does "
        "not know how to edit: an edit answer would be rejected. Check _edit against the new layout."
    )
