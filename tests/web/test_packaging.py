"""The wheel carries everything the installed app needs: every module, every
template, static file and vendored asset of the web app (with the vendored
licences), the conformance observations, the annotator's thresholds and the
migrations — and nothing else: not the tests, the benchmarks or the tools.
An editable install reads them from the tree, so only a built wheel shows
what is missing or what is too much.

The wheel is built from a copy of the sources in a temporary folder: an
in-tree build writes ``build/`` and ``*.egg-info`` into the working tree.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# what the installed app reads at run time besides its modules
DATA_GLOBS = (
    "proctor/web/**/templates/**/*",
    "proctor/web/**/static/**/*",
    "proctor/policywire/conformance/*.npz",
    "proctor/annotator/thresholds.toml",
    "proctor/core/migrations/script.py.mako",
    "proctor/core/migrations/versions/*.py",
)
APP_PACKAGES = ("proctor",)  # one top-level name: nothing another distribution installs


def _skip(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix in {".pyc", ".pyo"}


def _tree_files(patterns: tuple[str, ...]) -> set[str]:
    return {
        p.relative_to(ROOT).as_posix()
        for pattern in patterns
        for p in ROOT.glob(pattern)
        if p.is_file() and not _skip(p.relative_to(ROOT))
    }


def _copy_sources(dst: Path) -> None:
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    # every top-level folder: the wheel must leave out what it should, not
    # merely what the copy left behind
    for top in sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()):
        if (ROOT / top).is_dir():
            shutil.copytree(
                ROOT / top,
                dst / top,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
            )


def _local_backend_is_enough() -> bool:
    """The venv's setuptools satisfies ``build-system.requires`` (then the
    build needs no index); else pip builds in an isolated environment."""
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
        importlib.metadata.version("wheel")
    except importlib.metadata.PackageNotFoundError:
        return False
    return major >= 77


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("wheel")
    src, out = tmp_path / "src", tmp_path / "dist"
    src.mkdir()
    _copy_sources(src)
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(out)]
    if _local_backend_is_enough():
        cmd.append("--no-build-isolation")
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [found] = out.glob("proctor-*.whl")
    return found


def test_the_wheel_ships_only_the_projects_packages(wheel: Path) -> None:
    """Top-level names in the wheel: the project's packages and its metadata
    (docs/architecture.md, "Layers": the names still collide with other
    distributions'; the rename is the step left)."""
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
    assert (ROOT / "tests" / "__init__.py").is_file()  # a package the wheel must leave out
    assert tops == {*APP_PACKAGES, "proctor-0.1.0.dist-info"}


def test_the_wheel_carries_every_template_static_file_and_data_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if not n.endswith("/")}
        data = _tree_files(DATA_GLOBS)
        # the globs find what they should (a moved folder would make this test vacuous)
        for must in (
            "proctor/web/templates/base.html",
            "proctor/web/leaderboard/templates/board.html",
            "proctor/web/leaderboard/static/charts.js",
            "proctor/web/static/vendor/swagger-ui/swagger-ui-bundle.js",
            "proctor/web/static/vendor/swagger-ui/LICENSE",
            "proctor/web/static/vendor/swagger-ui/NOTICE",
            "proctor/web/console/static/layouts/tote-left-camera-left.svg",
            "proctor/policywire/conformance/observations.npz",
            "proctor/annotator/thresholds.toml",
            "proctor/core/migrations/script.py.mako",
        ):
            assert must in data, must
        assert any(d.startswith("proctor/core/migrations/versions/") for d in data)
        missing = sorted(data - shipped)
        assert missing == [], f"not in the wheel: {missing}"
        # byte for byte what the tree holds
        changed = [
            name
            for name in sorted(data)
            if hashlib.sha256(z.read(name)).digest()
            != hashlib.sha256((ROOT / name).read_bytes()).digest()
        ]
        assert changed == []
    modules = _tree_files(tuple(f"{p}/**/*.py" for p in APP_PACKAGES))
    assert len(modules) > 100
    assert sorted(modules - shipped) == []
    assert [n for n in shipped if "__pycache__" in n or n.endswith(".pyc")] == []
