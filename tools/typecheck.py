"""Type-check the project with mypy against a baseline that may only shrink.

    python tools/typecheck.py            # the gate in ./run test
    python tools/typecheck.py --update   # rewrite the baseline to today's errors

mypy runs with the ``[tool.mypy]`` settings of the tree's ``pyproject.toml``.
Each error is keyed by file, error code and message, with a count: never by
line number, so that an edit elsewhere in a file does not disturb the
baseline. The check fails when an error appears that the baseline does not
list (or appears more often than it lists) and when the baseline lists an
error that is gone: whoever fixes an error removes it from the baseline in the
same commit (``--update``), so the baseline only ever shrinks.

Exit status: 0 when errors and baseline agree, 1 when they do not, 2 when
mypy itself could not run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path("tools/typecheck_baseline.json")

# (file, code, message)
Key = tuple[str, str, str]

# mypy names other lines inside some messages ('already defined on line 233');
# those numbers move with every edit above them, so they are not part of a key
_LINE_REFERENCE = re.compile(r"\bline \d+\b")


def _key(error: dict[str, object]) -> Key:
    message = _LINE_REFERENCE.sub("line N", str(error["message"]))
    return (str(error["file"]), str(error["code"]), message)


def run_mypy(root: Path) -> Counter[Key]:
    """Today's errors under ``root``, counted by key."""
    if importlib.util.find_spec("mypy") is None:
        raise RuntimeError(
            f"mypy is not installed for {sys.executable} (it is in the test extra: "
            "pip install -e '.[test]', which ./run test does)"
        )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--output", "json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    # 0: no errors, 1: errors reported; anything else is mypy failing to run
    # (bad configuration, a crash, mypy not installed), never "no errors"
    if proc.returncode not in (0, 1):
        said = proc.stderr.strip() or proc.stdout.strip()
        raise RuntimeError(f"mypy exited with status {proc.returncode}:\n{said}")
    errors: Counter[Key] = Counter()
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        error = json.loads(line)
        if error.get("severity") == "error":
            errors[_key(error)] += 1
    if proc.returncode == 1 and not errors:
        raise RuntimeError(f"mypy reported failure without errors:\n{proc.stdout}{proc.stderr}")
    return errors


def read_baseline(path: Path) -> Counter[Key]:
    if not path.exists():
        return Counter()
    entries = json.loads(path.read_text(encoding="utf-8"))
    baseline: Counter[Key] = Counter()
    for i, entry in enumerate(entries):
        try:
            key = (entry["file"], entry["code"], entry["message"])
            count = entry["count"]
        except (KeyError, TypeError):
            raise ValueError(f"{path}: entry {i} needs file, code, message and count") from None
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"{path}: entry {i}: count must be a positive integer")
        baseline[key] += count
    return baseline


def write_baseline(path: Path, errors: Counter[Key]) -> None:
    entries = [
        {"file": f, "code": c, "message": m, "count": n} for (f, c, m), n in sorted(errors.items())
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _describe(key: Key, n: int) -> str:
    file, code, message = key
    times = f" (x{n})" if n > 1 else ""
    return f"  {file}: [{code}] {message}{times}"


def compare(errors: Counter[Key], baseline: Counter[Key]) -> tuple[list[str], list[str]]:
    """(new errors, baseline entries that no longer occur), as printable lines."""
    new = [_describe(k, n) for k, n in sorted((errors - baseline).items())]
    stale = [_describe(k, n) for k, n in sorted((baseline - errors).items())]
    return new, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--update", action="store_true", help="rewrite the baseline to today's errors"
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the tree to check (default: this project)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help=f"baseline file (default: ROOT/{BASELINE})",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    path = args.baseline or root / BASELINE
    out = sys.stdout.write
    try:
        errors = run_mypy(root)
        baseline = read_baseline(path)
    except (RuntimeError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    new, stale = compare(errors, baseline)
    total = sum(errors.values())
    if args.update:
        existed = path.exists()
        write_baseline(path, errors)
        out(f"{path}: {total} mypy errors ({sum(baseline.values())} before)\n")
        if new and existed:
            # allowed, so that a merge can be recorded in one command, but it
            # should be rare and visible: the baseline is meant to shrink
            out(f"warning: the baseline GREW by {len(new)} entries:\n" + "\n".join(new) + "\n")
        return 0
    if not new and not stale:
        out(f"mypy: {total} errors, all in the baseline ({path.name})\n")
        return 0
    if new:
        out("error: mypy found errors that are not in the baseline (fix them):\n")
        out("\n".join(new) + "\n")
    if stale:
        out(
            "error: the baseline lists errors that no longer occur; remove them in this "
            "commit with `python tools/typecheck.py --update`:\n"
        )
        out("\n".join(stale) + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
