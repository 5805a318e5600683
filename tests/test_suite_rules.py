"""Rules about the test suite itself (docs/engineering.md): which backends a
test runs on is declared, not decided at run time; the slow fixtures are
marked so that ``-m "not slow"`` is a fast inner loop."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


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
