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
    assert _unit("proctor.station.cli") == (1, "proctor.station")


def test_dependencies_follow_the_layers() -> None:
    """One table, one rule (docs/architecture.md, "Layers"): each import
    goes down the layers, never sideways to a sibling, never into the
    composition root or into another unit's CLI module."""
    found = layer_violations(ALL_IMPORTS, ROOT)
    bad = [msg for _, msg in sorted(found.items())]
    assert bad == [], "\n".join(bad)


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


def test_the_rule_section_exists() -> None:
    """The failure messages cite a section that is really there."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert f"\n## {RULE_SECTION}\n" in text
    words = " ".join(text.split())  # the doc wraps its lines
    for rule in (RULE_INWARD, RULE_SIBLINGS, RULE_ROOT, RULE_CLI):
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
