"""Guarantees that are structural, not conventional (docs/style.md): which module
may import what, checked by walking every module's imports."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("proctor", "station", "scheduler", "annotator", "analysis", "web")

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
    module: str  # dotted path of the importing file, e.g. "station.drivers.arm.franky"
    path: Path
    target: str  # the imported module, e.g. "franky" or "proctor.db.models"
    line: int


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports() -> Iterator[Import]:
    for top in (*SERVICES, "tests", "benchmarks", "migrations"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            module = _module_name(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        yield Import(module, path, alias.name, node.lineno)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    yield Import(module, path, node.module, node.lineno)
                elif isinstance(node, ast.ImportFrom) and node.level > 0:
                    base = module.split(".")
                    # a package's __init__ is its own base; a module's base is its package
                    if path.name != "__init__.py":
                        base = base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                    yield Import(module, path, target, node.lineno)


ALL_IMPORTS = list(_imports())


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
    assert "proctor.cli" in modules and "proctor.db.models.base" in modules


def test_hardware_libraries_only_inside_driver_modules() -> None:
    """Only station/drivers/ touches hardware libraries (tests may run their
    protocol peers), so everything else imports on a laptop."""
    bad = _violations(
        lambda imp: (
            _root(imp.target) in HARDWARE_LIBS
            and not _within(imp.module, "station.drivers")
            and not _within(imp.module, "tests")
        )
    )
    assert bad == []


def test_web_never_imports_station_drivers_or_sim() -> None:
    """The web app talks to a station over its local API, never in-process."""
    bad = _violations(
        lambda imp: (
            _within(imp.module, "web")
            and (_within(imp.target, "station.drivers") or _within(imp.target, "station.sim"))
        )
    )
    assert bad == []


# the thin layer that reads the store, and the entry points; everything else
# in analysis/ is pure arrays-in, dataclasses-out
ANALYSIS_IMPURE = {"analysis.store", "analysis.cli", "analysis.plots", "analysis.interchange"}
ANALYSIS_ALLOWED_THIRD_PARTY = {"numpy", "scipy", "analysis"}


def test_analysis_core_is_pure() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}

    def impure(imp: Import) -> bool:
        if not _within(imp.module, "analysis") or imp.module in ANALYSIS_IMPURE:
            return False
        return _root(imp.target) not in stdlib | ANALYSIS_ALLOWED_THIRD_PARTY

    assert _violations(impure) == []


def test_matplotlib_only_in_plots() -> None:
    bad = _violations(
        lambda imp: (
            _root(imp.target) == "matplotlib"
            and _within(imp.module, "analysis")
            and imp.module != "analysis.plots"
        )
    )
    assert bad == []


KERNEL_ENTRY_POINTS = {"proctor.cli", "proctor.demo_cli", "proctor.export_cli", "proctor.__main__"}


def test_kernel_does_not_depend_on_services() -> None:
    """Dependencies point inward: services use proctor/, not the reverse
    (the CLI and the demo assemble services, so they are exempt)."""
    others = set(SERVICES) - {"proctor"}
    bad = _violations(
        lambda imp: (
            _within(imp.module, "proctor")
            and imp.module not in KERNEL_ENTRY_POINTS
            and not _within(imp.module, "proctor.demo")
            and not _within(imp.module, "proctor.export")
            and _root(imp.target) in others
        )
    )
    assert bad == []


def test_services_never_import_tests() -> None:
    bad = _violations(lambda imp: _root(imp.module) in SERVICES and _root(imp.target) == "tests")
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
    drivers = ROOT / "station" / "drivers"
    bad = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in sorted(drivers.rglob("*.py"))
        for line in _calls_time_sleep(p)
    ]
    assert bad == []
