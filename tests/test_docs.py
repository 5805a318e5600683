"""The documentation's references resolve, and it says what the code does
rather than which piece of work brought it (docs/engineering.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TEXT_SUFFIXES = {".py", ".md", ".html", ".js", ".css", ".toml", ".cfg", ".txt", ".sh"}


def _tracked() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    out = []
    for name in names:
        path = ROOT / name.decode()
        if name and path.suffix in TEXT_SUFFIXES and "vendor" not in path.parts and path.is_file():
            out.append(path)
    return out


def _hits(pattern: re.Pattern[str], paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return found


def test_the_walk_sees_the_docs() -> None:
    paths = {p.relative_to(ROOT).as_posix() for p in _tracked()}
    assert {"docs/methods.md", "docs/style.md", "proctor/analysis/leaderboard.py"} <= paths


def test_no_reference_to_a_docs_file_that_does_not_exist() -> None:
    """The method and style documents are docs/methods.md and docs/style.md;
    the upper-case names at the root that older text cites never existed."""
    paths = _tracked()
    stale = _hits(re.compile(r"(?<![\w/])(METHODS|STYLE)(\.md|\s+§)"), paths)
    assert not stale, "\n".join(stale)
    missing = []
    for path in paths:
        for ref in re.findall(r"(?<![\w/.])docs/[\w.-]+\.md", path.read_text(encoding="utf-8")):
            if not (ROOT / ref).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not missing, "\n".join(missing)


def test_code_and_docs_do_not_name_the_issue_that_built_them() -> None:
    """ "(issue 8)", "issue #5", "station issue": process history, which says
    nothing to a reader; the sentence should say what it means. Tests may
    still cite the bug report a regression test pins."""
    paths = [p for p in _tracked() if "tests" not in p.relative_to(ROOT).parts]
    found = _hits(re.compile(r"\(issue\b|\bissue #?\d+|\bstation issue\b", re.I), paths)
    assert not found, "\n".join(found)
