"""Guarantees that are structural, not conventional (docs/style.md): which module
may import what, checked by walking every module's imports."""

from __future__ import annotations

import ast
import fnmatch
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the project is one package; everything below walks it
PACKAGE = "proctor"

# libraries that talk to hardware (or simulate it behind a hardware protocol)
HARDWARE_LIBS = {
    "franky",
    "franky_sim",
    "pymodbus",
    "pyrealsense2",
    "cv2",
    "hid",
    "serial",
    "mujoco",
}


@dataclass(frozen=True)
class Import:
    module: str  # dotted path of the importing file, e.g. "proctor.station.drivers.arm.franky"
    path: Path
    target: str  # the imported module, e.g. "franky" or "proctor.core.db.models"
    line: int


def _module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(root: Path, dotted: str) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _from_targets(root: Path, module: str, names: list[str]) -> list[str]:
    """``from module import a, b``: the submodule ``module.a`` where ``a`` is
    one (``from proctor.station import drivers`` imports ``proctor.station.drivers``,
    not just ``proctor.station``), else ``module`` itself."""
    subs = [f"{module}.{n}" for n in names if n != "*" and _is_module(root, f"{module}.{n}")]
    return subs if len(subs) == len(names) else [*subs, module]


def imports_under(root: Path, tops: tuple[str, ...]) -> Iterator[Import]:
    """Every import statement in the packages ``tops`` under ``root`` — at
    module level or inside a function, a class or ``if TYPE_CHECKING:``, since
    ``ast.walk`` visits every node: an import deferred into a function is
    still a dependency."""
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            module = _module_name(root, path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        yield Import(module, path, alias.name, node.lineno)
                elif isinstance(node, ast.ImportFrom):
                    if node.level == 0:
                        base = node.module or ""
                    else:
                        parts = module.split(".")
                        # a package's __init__ is its own base; a module's base is its package
                        if path.name != "__init__.py":
                            parts = parts[:-1]
                        parts = parts[: len(parts) - (node.level - 1)]
                        base = ".".join([*parts, *([node.module] if node.module else [])])
                    for target in _from_targets(root, base, [a.name for a in node.names]):
                        yield Import(module, path, target, node.lineno)


ALL_IMPORTS = list(imports_under(ROOT, (PACKAGE, "tests", "benchmarks")))


def _root(target: str) -> str:
    return target.split(".")[0]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(pred) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        f"{imp.path.relative_to(ROOT)}:{imp.line} imports {imp.target}"
        for imp in ALL_IMPORTS
        if pred(imp)
    ]


def test_the_walk_sees_the_code() -> None:
    modules = {imp.module for imp in ALL_IMPORTS}
    assert "proctor.cli" in modules and "proctor.core.db.models.base" in modules


def test_hardware_libraries_only_inside_driver_modules() -> None:
    """Only proctor/station/drivers/ touches hardware libraries (tests may run their
    protocol peers), so everything else imports on a laptop."""
    bad = _violations(
        lambda imp: (
            _root(imp.target) in HARDWARE_LIBS
            and not _within(imp.module, "proctor.station.drivers")
            and not _within(imp.module, "tests")
        )
    )
    assert bad == []


def test_web_never_imports_station_drivers_or_sim() -> None:
    """The web app talks to a station over its local API, never in-process."""
    bad = _violations(
        lambda imp: (
            _within(imp.module, "proctor.web")
            and (
                _within(imp.target, "proctor.station.drivers")
                or _within(imp.target, "proctor.station.sim")
            )
        )
    )
    assert bad == []


# the thin layer that reads the store, and the entry points; everything else
# in proctor/analysis/ is pure arrays-in, dataclasses-out
ANALYSIS_IMPURE = {
    "proctor.analysis.store",
    "proctor.analysis.cli",
    "proctor.analysis.plots",
    "proctor.analysis.interchange",
    # other benchmarks' releases read from disk, and their `proctor import` commands
    "proctor.analysis.importers",
    "proctor.analysis.importers.phail",
    "proctor.analysis.importers.cli",
}
ANALYSIS_ALLOWED_THIRD_PARTY = {"numpy", "scipy"}


def test_analysis_core_is_pure() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}

    def impure(imp: Import) -> bool:
        if not _within(imp.module, "proctor.analysis") or imp.module in ANALYSIS_IMPURE:
            return False
        if _within(imp.target, "proctor.analysis"):
            return False
        return _root(imp.target) not in stdlib | ANALYSIS_ALLOWED_THIRD_PARTY

    assert _violations(impure) == []


def test_matplotlib_only_in_plots() -> None:
    bad = _violations(
        lambda imp: (
            _root(imp.target) == "matplotlib"
            and _within(imp.module, "proctor.analysis")
            and imp.module != "proctor.analysis.plots"
        )
    )
    assert bad == []


# The layers, lowest first (docs/architecture.md, "Layers"). A module may
# import its own unit and any unit of a lower layer: never a sibling in its
# own layer, never a higher one. A unit is a dotted prefix, each part matched
# as a glob; a module belongs to the unit with the longest matching prefix
# (proctor.cli is the composition root, proctor.core.settings the kernel). The
# kernel's unit is the bare package: proctor.core, and the package's own
# __init__ (the version); a module under proctor/ that no higher unit names
# falls there, so it has to keep the kernel's rules.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernel", ("proctor",)),
    ("policy wire", ("proctor.policywire",)),
    ("services", ("proctor.station", "proctor.analysis")),
    ("campaigns", ("proctor.scheduler", "proctor.annotator", "proctor.runner")),
    ("web", ("proctor.web",)),
    (
        "composition root",
        ("proctor.cli", "proctor.*_cli", "proctor.__main__", "proctor.demo", "proctor.export"),
    ),
)
ARCHITECTURE = ROOT / "docs" / "architecture.md"
RULE_SECTION = "Layers"
RULE_INWARD = "dependencies point inward: a layer imports only the layers below it"
RULE_SIBLINGS = "units of one layer do not import each other"
RULE_ROOT = "nothing imports the composition root"
RULE_CLI = "a CLI module is an entry point: only the root and its own package's commands import it"
RULE_FACES = "the policy wire, its dialects and its client never import conformance or serving"
RULE_CYCLES = "no import circle inside the station or the policy wire"


def _matches(module: str, unit: str) -> bool:
    parts, pattern = module.split("."), unit.split(".")
    return len(parts) >= len(pattern) and all(
        fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern, strict=False)
    )


def _unit(module: str) -> tuple[int, str] | None:
    """(layer index, unit) of ``module``, or None outside the project."""
    found = [
        (len(unit.split(".")), i, unit)
        for i, (_, units) in enumerate(LAYERS)
        for unit in units
        if _matches(module, unit)
    ]
    if not found:
        return None
    _, i, unit = max(found)
    return i, unit


def _is_cli(module: str) -> bool:
    last = module.split(".")[-1]
    return last == "cli" or last.endswith("_cli")


def layer_violations(imports: list[Import], root: Path) -> dict[tuple[str, str], str]:
    """(importer, target) → a message naming the rule it breaks, for every
    import that goes against ``LAYERS``."""
    top = len(LAYERS) - 1
    out: dict[tuple[str, str], str] = {}
    for imp in imports:
        src, dst = _unit(imp.module), _unit(imp.target)
        if src is None or dst is None or src[0] == top:
            continue  # the composition root may import anything, itself included
        (i, a), (j, b) = src, dst
        # a command may reuse its own package's commands; nothing else may
        cli = _is_cli(imp.target) and not (_is_cli(imp.module) and a == b)
        if j == top:
            rule = RULE_ROOT
        elif j > i:
            rule = RULE_INWARD
        elif a != b and j == i:
            rule = RULE_SIBLINGS
        elif cli:
            rule = RULE_CLI
        else:
            continue
        out.setdefault(
            (imp.module, imp.target),
            f"{imp.path.relative_to(root)}:{imp.line}: {imp.module} ({LAYERS[i][0]}) imports "
            f"{imp.target} ({LAYERS[j][0]}) — breaks docs/architecture.md, "
            f'"{RULE_SECTION}": {rule}',
        )
    return out


def test_every_module_of_the_project_has_a_layer() -> None:
    units = {_unit(imp.module) for imp in ALL_IMPORTS if _within(imp.module, PACKAGE)}
    assert units == {(i, u) for i, (_, us) in enumerate(LAYERS) for u in us}
    assert _unit("proctor.db_cli") == (len(LAYERS) - 1, "proctor.*_cli")
    assert _unit("proctor.demo.pipeline") == (len(LAYERS) - 1, "proctor.demo")
    assert _unit("proctor.core.cli_context") == (0, "proctor")  # the kernel, not the root
    assert _unit("proctor.station.cli") == (2, "proctor.station")
    assert _unit("proctor.policywire.wire.spec") == (1, "proctor.policywire")


# Imports that break a rule today and that a named change removes; the set may
# only shrink (none wait now).
PENDING: frozenset[tuple[str, str]] = frozenset()


def test_dependencies_follow_the_layers() -> None:
    """One table, one rule (docs/architecture.md, "Layers"): each import
    goes down the layers, never sideways to a sibling, never into the
    composition root or into another unit's CLI module."""
    found = layer_violations(ALL_IMPORTS, ROOT)
    bad = [msg for key, msg in sorted(found.items()) if key not in PENDING]
    assert bad == [], "\n".join(bad)
    # the set may only shrink: an entry the code no longer needs fails here
    assert not PENDING - found.keys(), sorted(PENDING - found.keys())


def _tree(root: Path, files: dict[str, str]) -> list[Import]:
    """A fake project under ``root``: every package of LAYERS, plus ``files``
    (path → source); its imports, walked exactly as the real tree's."""
    base = {
        "proctor/__init__.py": "",
        "proctor/core/__init__.py": "",
        "proctor/core/settings.py": "import os\n",
        "proctor/cli.py": "import proctor.station.cli\nimport proctor.web.app\n",
        "proctor/demo/__init__.py": (
            "from proctor.core import settings\nfrom proctor.web import app\n"
        ),
        "proctor/policywire/__init__.py": "",
        "proctor/policywire/client.py": "from proctor.core import settings\n",
        "proctor/station/__init__.py": "",
        "proctor/station/cli.py": "from proctor.core import settings\n",
        "proctor/analysis/__init__.py": "",
        "proctor/scheduler/__init__.py": "",
        "proctor/scheduler/service.py": "import proctor.station\n",
        "proctor/annotator/__init__.py": "",
        "proctor/web/__init__.py": "",
        "proctor/web/deps.py": "",
        "proctor/web/app.py": (
            "from proctor.scheduler import service\nfrom proctor.station import sim\n"
        ),
    }
    for rel, text in {**base, **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(imports_under(root, (PACKAGE,)))


def _rules(root: Path, files: dict[str, str]) -> dict[tuple[str, str], str]:
    return layer_violations(_tree(root, files), root)


def test_a_tree_that_keeps_the_layers_passes(tmp_path: Path) -> None:
    assert _rules(tmp_path, {}) == {}


def test_the_kernel_importing_a_service_fails(tmp_path: Path) -> None:
    found = _rules(tmp_path, {"proctor/core/settings.py": "from proctor.station import cli\n"})
    assert list(found) == [("proctor.core.settings", "proctor.station.cli")]
    assert RULE_INWARD in found["proctor.core.settings", "proctor.station.cli"]
    assert 'docs/architecture.md, "Layers"' in found["proctor.core.settings", "proctor.station.cli"]


def test_a_service_importing_another_services_cli_fails(tmp_path: Path) -> None:
    """web may import the station, but not the station's CLI module — and
    ``from proctor.station import cli`` is seen as ``proctor.station.cli``, not
    ``proctor.station``."""
    found = _rules(tmp_path, {"proctor/web/deps.py": "from proctor.station import cli\n"})
    assert list(found) == [("proctor.web.deps", "proctor.station.cli")]
    assert RULE_CLI in found["proctor.web.deps", "proctor.station.cli"]


def test_the_scheduler_importing_the_web_fails_even_inside_a_function(tmp_path: Path) -> None:
    source = (
        "def routes():\n    from proctor.web.deps import require_role\n    return require_role\n"
    )
    found = _rules(tmp_path, {"proctor/scheduler/routes.py": source})
    assert list(found) == [("proctor.scheduler.routes", "proctor.web.deps")]
    assert "proctor/scheduler/routes.py:2:" in found["proctor.scheduler.routes", "proctor.web.deps"]
    assert RULE_INWARD in found["proctor.scheduler.routes", "proctor.web.deps"]


def test_siblings_and_the_root_are_out_of_reach(tmp_path: Path) -> None:
    found = _rules(
        tmp_path,
        {
            "proctor/scheduler/service.py": "import proctor.annotator\n",
            "proctor/station/run.py": "from . import cli\nfrom proctor.demo import x\n",
            "proctor/demo/x.py": "",
        },
    )
    assert found.keys() == {
        ("proctor.scheduler.service", "proctor.annotator"),
        ("proctor.station.run", "proctor.station.cli"),
        ("proctor.station.run", "proctor.demo.x"),
    }
    assert RULE_SIBLINGS in found["proctor.scheduler.service", "proctor.annotator"]
    assert RULE_CLI in found["proctor.station.run", "proctor.station.cli"]
    assert RULE_ROOT in found["proctor.station.run", "proctor.demo.x"]


def test_the_policy_protocol_importing_the_station_fails(tmp_path: Path) -> None:
    """The protocol layer sits below the station: the client may not reach up
    into it, even for a type."""
    found = _rules(tmp_path, {"proctor/policywire/client.py": "import proctor.station\n"})
    assert list(found) == [("proctor.policywire.client", "proctor.station")]
    assert RULE_INWARD in found["proctor.policywire.client", "proctor.station"]


# Inside the protocol layer: what the station calls (the wire vocabulary, the
# dialects, the client, the observation builder) never imports what is built
# on it (the servers, the conformance checks), so a station never loads them.
PROTOCOL_BASE = tuple(
    f"proctor.policywire.{m}" for m in ("wire", "dialects", "handshake", "client", "observation")
)
PROTOCOL_TOP = ("proctor.policywire.serving", "proctor.policywire.conformance")


def face_violations(imports: list[Import], root: Path) -> dict[tuple[str, str], str]:
    """(importer, target) → message, for each import from the protocol's base
    (``PROTOCOL_BASE``) into its serving or conformance (``PROTOCOL_TOP``)."""
    out: dict[tuple[str, str], str] = {}
    for imp in imports:
        base = any(_within(imp.module, b) for b in PROTOCOL_BASE)
        if base and any(_within(imp.target, top) for top in PROTOCOL_TOP):
            out.setdefault(
                (imp.module, imp.target),
                f"{imp.path.relative_to(root)}:{imp.line}: {imp.module} imports {imp.target} — "
                f'breaks docs/architecture.md, "{RULE_SECTION}": {RULE_FACES}',
            )
    return out


# Imports from the base into the top that a named change removes; the set may
# only shrink (none wait now: ``Dialect`` is cut into its three faces).
PENDING_FACES: frozenset[tuple[str, str]] = frozenset()


def test_the_policy_wire_dialects_and_client_never_import_conformance_or_serving() -> None:
    found = face_violations(ALL_IMPORTS, ROOT)
    bad = [msg for key, msg in sorted(found.items()) if key not in PENDING_FACES]
    assert bad == [], "\n".join(bad)
    assert not PENDING_FACES - found.keys(), sorted(PENDING_FACES - found.keys())


def test_a_dialect_importing_a_server_fails_even_inside_a_function(tmp_path: Path) -> None:
    imports = _tree(
        tmp_path,
        {
            "proctor/policywire/dialects/__init__.py": (
                "def serve():\n    from proctor.policywire.serving import background\n"
            ),
            "proctor/policywire/serving/__init__.py": "",
            "proctor/policywire/serving/background.py": "",
            "proctor/policywire/conformance/__init__.py": "",
            # the checks are built on the client: that direction is the rule's
            "proctor/policywire/conformance/check.py": "from proctor.policywire import client\n",
        },
    )
    found = face_violations(imports, tmp_path)
    key = ("proctor.policywire.dialects", "proctor.policywire.serving.background")
    assert list(found) == [key]
    assert "proctor/policywire/dialects/__init__.py:2:" in found[key]
    assert RULE_FACES in found[key]


def import_cycles(imports: list[Import], package: str) -> list[frozenset[str]]:
    """The import circles among the modules of ``package``: its strongly
    connected components of more than one module (Tarjan), every import
    counted, a deferred or ``TYPE_CHECKING`` one included."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        inside = _within(imp.module, package) and _within(imp.target, package)
        if inside and imp.module != imp.target:
            graph.setdefault(imp.module, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# Circles that a named change removes; the set may only shrink (a circle that
# changes its members fails, and its entry is rewritten). Empty.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def test_no_import_circle_in_the_station_or_the_policy_protocol() -> None:
    found = {c for package in CYCLE_FREE for c in import_cycles(ALL_IMPORTS, package)}
    new = [sorted(c) for c in found - KNOWN_CYCLES]
    assert new == [], f'{new} — breaks docs/architecture.md, "{RULE_SECTION}": {RULE_CYCLES}'
    assert not KNOWN_CYCLES - found, [sorted(c) for c in KNOWN_CYCLES - found]


CYCLE_FREE = ("proctor.station", "proctor.policywire")


def test_an_import_circle_is_found_through_a_deferred_import(tmp_path: Path) -> None:
    imports = _tree(
        tmp_path,
        {
            "proctor/station/a.py": "from proctor.station import b\n",
            "proctor/station/b.py": "def f():\n    from proctor.station.c import x\n",
            "proctor/station/c.py": "import proctor.station.a\nx = 1\n",
            # a chain, not a circle
            "proctor/policywire/wire.py": "from proctor.policywire import client\n",
        },
    )
    assert import_cycles(imports, "proctor.station") == [
        frozenset({"proctor.station.a", "proctor.station.b", "proctor.station.c"})
    ]
    assert import_cycles(imports, "proctor.policywire") == []


# The server's services and the runner host read the contracts they share
# with a station (the policy wire, the recording format, the work a
# station is handed) below it, never in the robot's package. The set of what
# they still import from the station is empty, and stays so (the composition
# root, ``proctor calibrate`` or the demo, joins the two where a job needs both).
STATION_FREE = (
    "proctor.runner",
    "proctor.web",
    "proctor.annotator",
    "proctor.export",
    "proctor.scheduler",
)
PENDING_STATION: frozenset[tuple[str, str]] = frozenset()


def station_imports(imports: list[Import]) -> set[tuple[str, str]]:
    return {
        (imp.module, imp.target)
        for imp in imports
        if any(_within(imp.module, u) for u in STATION_FREE)
        and _within(imp.target, "proctor.station")
    }


def test_the_server_and_the_runner_host_do_not_import_the_station() -> None:
    found = station_imports(ALL_IMPORTS)
    assert sorted(found - PENDING_STATION) == []
    assert sorted(PENDING_STATION - found) == []


def test_a_runner_host_importing_the_station_is_seen(tmp_path: Path) -> None:
    imports = _tree(
        tmp_path,
        {
            "proctor/runner/__init__.py": "",
            "proctor/runner/manifest.py": "from proctor.station.policy import dialects\n",
        },
    )
    assert station_imports(imports) == {
        ("proctor.runner.manifest", "proctor.station.policy"),
        # the base tree's own imports: the scheduler's and the web's
        ("proctor.scheduler.service", "proctor.station"),
        ("proctor.web.app", "proctor.station"),
    }


def test_the_rule_section_exists() -> None:
    """The failure messages cite a section that is really there."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert f"\n## {RULE_SECTION}\n" in text
    words = " ".join(text.split())  # the doc wraps its lines
    for rule in (RULE_INWARD, RULE_SIBLINGS, RULE_ROOT, RULE_CLI, RULE_FACES, RULE_CYCLES):
        assert rule in words, rule


def test_services_never_import_tests() -> None:
    bad = _violations(lambda imp: _root(imp.module) == PACKAGE and _root(imp.target) == "tests")
    assert bad == []


def _calls_time_sleep(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "sleep"
            and isinstance(node.value, ast.Name)
            and node.value.id == "time"
        ):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "time"
            and any(a.name == "sleep" for a in node.names)
        ):
            lines.append(node.lineno)
    return lines


def test_no_time_sleep_in_station_drivers() -> None:
    """Drivers wait on their clock or on I/O, never on wall-clock sleeps that
    a virtual clock cannot advance (docs/style.md, Positronic)."""
    drivers = ROOT / "proctor" / "station" / "drivers"
    bad = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in sorted(drivers.rglob("*.py"))
        for line in _calls_time_sleep(p)
    ]
    assert bad == []
