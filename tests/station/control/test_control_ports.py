"""The control loop is handed ports, not its owner: nothing under
``proctor/station/control/`` imports a private name from another module, or
reaches into a private attribute of an object it did not define (the way the
loop once called the runner's ``_stop_arm_now`` and wrote into its private
episode record). Checked by walking each module's syntax tree."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONTROL = ROOT / "proctor" / "station" / "control"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names(tree: ast.Module) -> set[str]:
    """The private names this module defines: its functions and classes, their
    methods and class attributes, and what its methods assign on ``self``; the
    module may touch these on any object of its own classes."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            own.add(node.attr)
    return {n for n in own if _private(n)}


def private_reaches(source: str) -> list[str]:
    """Each private name the source imports from another module, and each
    private attribute it touches on an object other than ``self``/``cls``
    that it did not define itself, as ``line: what``."""
    tree = ast.parse(source)
    own = _own_private_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            parts = (node.module or "").split(".")
            found += [f"{node.lineno}: from {node.module}" for p in parts if _private(p)]
            found += [
                f"{node.lineno}: import {a.name} from {node.module}"
                for a in node.names
                if _private(a.name)
            ]
        elif isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {a.name}"
                for a in node.names
                if any(_private(p) for p in a.name.split("."))
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not mine and node.attr not in own:
                found.append(f"{node.lineno}: .{node.attr}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_the_control_package_reaches_into_nothing_private() -> None:
    modules = sorted(CONTROL.glob("*.py"))
    assert len(modules) > 5, modules  # the package is there, and was walked
    found = {
        m.name: hits for m in modules if (hits := private_reaches(m.read_text(encoding="utf-8")))
    }
    assert found == {}, found


def test_a_planted_reach_into_the_owner_is_found() -> None:
    planted = (
        "from proctor.station.episode_runner import _Active, EpisodeRunner\n"
        "import proctor.station._hidden\n"
        "class Loop:\n"
        "    def __init__(self, runner: EpisodeRunner, act: _Active) -> None:\n"
        "        self.runner, self._act = runner, act\n"
        "    def stop(self) -> None:\n"
        "        self.runner._stop_arm_now()\n"
        "        self.runner._stop_event.set()\n"
        "        self._act.fault = None\n"
    )
    assert private_reaches(planted) == [
        "1: import _Active from proctor.station.episode_runner",
        "2: import proctor.station._hidden",
        "7: ._stop_arm_now",
        "8: ._stop_event",
    ]


def test_a_private_name_the_module_defines_is_its_own() -> None:
    own = (
        "class Pair:\n"
        "    def __init__(self) -> None:\n"
        "        self._n = 0\n"
        "    def same(self, other: 'Pair') -> bool:\n"
        "        return self._n == other._n\n"
        "def _helper(p: Pair) -> int:\n"
        "    return p._n\n"
    )
    assert private_reaches(own) == []
