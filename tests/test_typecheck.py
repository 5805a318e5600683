"""tools/typecheck.py: the mypy baseline may only shrink.

Each test runs the real script and real mypy on a small package in a temporary
tree, so what is checked is the gate ./run test runs, not a model of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "typecheck.py"

ONE_ERROR = """\
def count() -> int:
    return "three"
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # shared, so typeshed is analysed once for the module rather than per test
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.fixture
def tree(tmp_path: Path, mypy_cache: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.mypy]\npackages = ["pkg"]\ncache_dir = "{mypy_cache.as_posix()}"\n'
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(ONE_ERROR)
    return tmp_path


def typecheck(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def baseline(root: Path) -> list[dict[str, object]]:
    return json.loads((root / "tools" / "typecheck_baseline.json").read_text())


def test_update_records_errors_by_file_code_and_message_and_then_the_check_passes(
    tree: Path,
) -> None:
    assert typecheck(tree, "--update").returncode == 0
    assert baseline(tree) == [
        {
            "file": "pkg/mod.py",
            "code": "return-value",
            "message": 'Incompatible return value type (got "str", expected "int")',
            "count": 1,
        }
    ]
    done = typecheck(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 errors, all in the baseline" in done.stdout


def test_a_new_error_fails_and_is_named(tree: Path) -> None:
    assert typecheck(tree, "--update").returncode == 0
    (tree / "pkg" / "other.py").write_text("size: int = None\n")
    done = typecheck(tree)
    assert done.returncode == 1
    assert "not in the baseline" in done.stdout
    assert "pkg/other.py: [assignment]" in done.stdout
    assert "pkg/mod.py" not in done.stdout  # the baselined error is not reported


def test_one_more_of_an_error_already_listed_fails(tree: Path) -> None:
    assert typecheck(tree, "--update").returncode == 0
    (tree / "pkg" / "mod.py").write_text(ONE_ERROR + ONE_ERROR.replace("count", "total"))
    done = typecheck(tree)
    assert done.returncode == 1
    assert "pkg/mod.py: [return-value]" in done.stdout


def test_a_fixed_error_left_in_the_baseline_fails_until_update(tree: Path) -> None:
    assert typecheck(tree, "--update").returncode == 0
    (tree / "pkg" / "mod.py").write_text("def count() -> int:\n    return 3\n")
    done = typecheck(tree)
    assert done.returncode == 1
    assert "no longer occur" in done.stdout
    assert "pkg/mod.py: [return-value]" in done.stdout
    assert "--update" in done.stdout

    assert typecheck(tree, "--update").returncode == 0
    assert baseline(tree) == []
    assert typecheck(tree).returncode == 0


def test_moving_an_error_to_another_line_keeps_the_baseline_valid(tree: Path) -> None:
    # a redefinition's message names the line of the first definition
    (tree / "pkg" / "mod.py").write_text(ONE_ERROR + "\n\ndef count() -> int:\n    return 1\n")
    assert typecheck(tree, "--update").returncode == 0
    assert any("on line N" in str(e["message"]) for e in baseline(tree))

    source = (tree / "pkg" / "mod.py").read_text()
    (tree / "pkg" / "mod.py").write_text('"""Now with a docstring."""\n\nimport os\n\n' + source)
    done = typecheck(tree)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_failing_to_run_is_an_error_not_a_pass(tree: Path) -> None:
    (tree / "pyproject.toml").write_text('[tool.mypy]\npackages = ["no_such_package"]\n')
    done = typecheck(tree, "--update")
    assert done.returncode == 2
    assert "mypy exited with status 2" in done.stderr
    assert not (tree / "tools" / "typecheck_baseline.json").exists()


def test_a_malformed_baseline_is_refused_naming_the_entry(tree: Path) -> None:
    (tree / "tools").mkdir()
    (tree / "tools" / "typecheck_baseline.json").write_text(
        '[{"file": "pkg/mod.py", "code": "return-value", "count": 1}]'
    )
    done = typecheck(tree)
    assert done.returncode == 2
    assert "entry 0 needs file, code, message and count" in done.stderr
