"""Rules about the test suite itself (docs/engineering.md): which backends a
test runs on is declared, not decided at run time."""

from __future__ import annotations

import ast
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
