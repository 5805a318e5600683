"""The pages' JavaScript is linted with biome (``biome.jsonc``), as part of
``./run test`` before pytest; ``./run`` installs the pinned npm package into
``.tools/js``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIOME = ROOT / ".tools" / "js" / "node_modules" / ".bin" / "biome"


@pytest.fixture(scope="module")
def biome() -> Path:
    if not BIOME.is_file():
        pytest.fail(
            f"{BIOME.relative_to(ROOT)} is missing: `./run test` installs it", pytrace=False
        )
    return BIOME


def _lint(biome: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(biome), "lint", "--error-on-warnings", "--colors=off", "."],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_lints_the_javascript_before_pytest() -> None:
    script = (ROOT / "run").read_text(encoding="utf-8")
    test_block = script[script.index("\n  test)") :]
    test_block = test_block[: test_block.index(";;")]
    steps = [line.strip() for line in test_block.splitlines()]
    lint = next(k for k, s in enumerate(steps) if re.search(r"biome\"? lint", s))
    pytest_ = next(k for k, s in enumerate(steps) if "-m pytest" in s)
    assert "ensure_biome" in steps and lint < pytest_
    version = re.search(r"^BIOME_VERSION=(\S+)$", script, re.M)
    assert version is not None


def test_the_pages_javascript_is_lint_clean(biome: Path) -> None:
    result = _lint(biome, ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert re.search(r"Checked (\d+) files?", result.stdout + result.stderr)


def test_the_configuration_reaches_every_static_folder_but_vendor(
    biome: Path, tmp_path: Path
) -> None:
    """A lint error in a feature's own static folder fails; the same code in
    vendored third-party files is not ours to lint."""
    shutil.copy(ROOT / "biome.jsonc", tmp_path / "biome.jsonc")
    bad = "(function () {\n  if (x == null) { var y = 1; y = y; }\n})();\n"
    vendor = tmp_path / "proctor" / "web" / "static" / "vendor" / "lib"
    vendor.mkdir(parents=True)
    (vendor / "lib.js").write_text(bad)
    assert _lint(biome, tmp_path).returncode == 0
    feature = tmp_path / "proctor" / "web" / "leaderboard" / "static"
    feature.mkdir(parents=True)
    (feature / "bad.js").write_text(bad)
    result = _lint(biome, tmp_path)
    assert result.returncode != 0
    assert "proctor/web/leaderboard/static/bad.js" in result.stdout + result.stderr
    assert "vendor" not in result.stdout + result.stderr
