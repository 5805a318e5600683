"""Rules about the test suite itself (docs/engineering.md): which backends a
test runs on is declared, not decided at run time; the slow fixtures are
marked so that ``-m "not slow"`` is a fast inner loop; the folders mirror
the packages they test (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "proctor"

# Folders of test modules that name no package, each with its reason.
CROSS_CUTTING = {
    # the kernel's and the composition root's tests: the CLI, the database and
    # its migrations, artifacts, settings, the demo end to end
    "proctor",
}


def _is_skip_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "skip"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "pytest"
    )


def test_no_test_skips_at_run_time_for_a_backend() -> None:
    """``if backend != "sqlite": pytest.skip(...)`` shows up in ``-ra`` as a
    skip on every run; ``tests/backends.py`` declares the backends instead
    (``once()``, ``only_on(...)``, ``cases_on_backends(...)``)."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.If) or "backend" not in ast.unparse(node.test):
                continue
            if any(_is_skip_call(sub) for stmt in node.body for sub in ast.walk(stmt)):
                found.append(f"{path.relative_to(TESTS.parent)}:{node.lineno}")
    assert not found, found


def _collected(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}


def test_the_inner_loop_leaves_out_the_corpus_and_the_demo() -> None:
    """``-m "not slow"`` skips minutes of simulation: the 216-episode
    annotator corpus (every test using the fixture) and the whole demo; the
    plain command still collects them."""
    slow_files = {
        "tests/annotator/test_acceptance.py",
        "tests/annotator/test_corpus_profiles.py",
        "tests/proctor/test_demo.py",
    }
    targets = ["tests/annotator", "tests/proctor/test_demo.py"]
    assert slow_files <= _collected(*targets)
    fast = _collected("-m", "not slow", *targets)
    assert fast and not fast & slow_files, fast


def _imports_from_a_test_module(path: Path) -> list[int]:
    """The lines where ``path`` imports a ``test_*`` module (absolute or relative)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
            if node.module is None:  # ``from . import test_x``
                names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(part.startswith("test_") for name in names for part in name.split(".")):
            found.append(node.lineno)
    return found


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in support modules (``*_support.py``, ``conftest.py``,
    ``factories.py``): importing from a ``test_*`` module ties two test files
    together, re-registers its fixtures, and breaks when it is renamed or split."""
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in _imports_from_a_test_module(path)
    ]
    assert not found, found


def test_the_import_rule_sees_each_form(tmp_path: Path) -> None:
    planted = {
        "a.py": "from tests.web.test_x import helper\n",
        "b.py": "from .test_x import helper\n",
        "c.py": "from . import test_x\n",
        "d.py": "import tests.web.test_x as x\n",
        "ok.py": "from tests.web.submissions_support import manifest\nimport pytest\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    hits = {name: _imports_from_a_test_module(tmp_path / name) for name in planted}
    assert [name for name, h in hits.items() if h] == ["a.py", "b.py", "c.py", "d.py"]


def _folders_naming_no_package(tests: Path, package: Path) -> list[str]:
    """The folders under ``tests`` holding a ``test_*`` module whose path is
    not a package's path under ``package`` (``tests/station/control`` needs
    ``proctor/station/control/__init__.py``); modules directly in ``tests``
    are the suite-wide ones and the ``CROSS_CUTTING`` folders are let be."""
    found = set()
    for path in tests.rglob("test_*.py"):
        folder = path.parent.relative_to(tests)
        if not folder.parts or folder.parts[0] in CROSS_CUTTING:
            continue
        if not (package / folder / "__init__.py").is_file():
            found.add(folder.as_posix())
    return sorted(found)


def test_the_test_folders_mirror_the_packages() -> None:
    """A test module sits in the folder named for the package it tests, so
    the tests of ``proctor/policywire/`` are found in ``tests/policywire/``
    and not among the station's."""
    found = _folders_naming_no_package(TESTS, PACKAGE)
    assert not found, f"test folders that name no package under proctor/: {found}"


def test_the_mirror_rule_sees_a_stray_folder(tmp_path: Path) -> None:
    package = tmp_path / "proctor"
    for folder in ("station", "station/control", "policywire"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "station" / "loose").mkdir()  # a folder, but not a package
    tests = tmp_path / "tests"
    for module in (
        "test_rules.py",
        "station/control/test_loop.py",
        "policywire/test_wire.py",
        "policywire/wire_support.py",
        "proctor/test_cli.py",
        "station/loose/test_a.py",
        "station/contrl/test_b.py",
        "protocol/test_c.py",
        "runner/sandbox/scripts/hostile.py",
    ):
        (tests / module).parent.mkdir(parents=True, exist_ok=True)
        (tests / module).write_text("")
    assert _folders_naming_no_package(tests, package) == [
        "protocol",
        "station/contrl",
        "station/loose",
    ]
