"""A submitter's requirements file: plain requirement specifiers only.

The file is installed on the runner host, outside the sandbox, so every line
is checked first: an editable install, a URL or a local path, an index
option or an include could fetch code from anywhere or run a build script
(setup.py) on the host. What is left is names with versions, extras and
markers, installed from wheels only (``--only-binary=:all:``, see ``envs``).
"""

from __future__ import annotations

import re

from proctor.runner.manifest import ManifestProblem

FIELD = "runner.requirements"
MAX_REQUIREMENTS_BYTES = 256 * 1024
MAX_LINES = 2000

# PEP 508 without the URL form: a name, optional [extras], an optional
# version specifier list and an optional ``; marker``. The marker may hold
# quotes and comparisons, never '@' (a direct reference) or '/'.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_EXTRAS = r"(?:\s*\[\s*" + _NAME + r"(?:\s*,\s*" + _NAME + r")*\s*\])?"
_VERSION = r"(?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_SPECS = r"(?:\s*\(?\s*" + _VERSION + r"(?:\s*,\s*" + _VERSION + r")*\s*\)?)?"
_MARKER = r"(?:\s*;\s*[A-Za-z0-9_.\s'\"<>=!~()-]+)?"
_REQUIREMENT = re.compile(r"^" + _NAME + _EXTRAS + _SPECS + _MARKER + r"$")


def requirement_lines(raw: bytes) -> list[str]:
    """The file's requirement lines, comments and blanks dropped (no checks)."""
    text = raw.decode("utf-8", "replace")
    lines = []
    for line in text.splitlines():
        # pip: a comment starts at '#' at the line's start or after whitespace
        stripped = re.sub(r"(^|\s)#.*$", "", line).strip()
        if stripped:
            lines.append(stripped)
    return lines


def check_requirements(raw: bytes, *, field: str = FIELD) -> list[ManifestProblem]:
    """Every problem with the file, each naming ``field`` and the line."""
    if len(raw) > MAX_REQUIREMENTS_BYTES:
        return [ManifestProblem(field, f"is larger than {MAX_REQUIREMENTS_BYTES} bytes")]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return [ManifestProblem(field, "is not UTF-8 text")]
    lines = requirement_lines(raw)
    if len(lines) > MAX_LINES:
        return [ManifestProblem(field, f"has more than {MAX_LINES} requirements")]
    problems = []
    for line in lines:
        reason = _refusal(line)
        if reason is not None:
            shown = line if len(line) <= 120 else line[:120] + "…"
            problems.append(ManifestProblem(field, f"'{shown}': {reason}"))
    return problems


def _refusal(line: str) -> str | None:
    if line.startswith("-"):
        return (
            "options are not allowed (no -e, -r, -c, --index-url, --extra-index-url, "
            "-f): list package names with versions only; packages come from the "
            "package index the runner host uses, as wheels"
        )
    if "@" in line or "://" in line or "/" in line or "\\" in line:
        return (
            "URLs and paths are not allowed: list package names with versions "
            "(e.g. 'numpy==2.2.6'); packages are installed from wheels on the package index"
        )
    if not _REQUIREMENT.match(line):
        return "is not a requirement specifier (a package name, optional [extras] and versions)"
    return None
