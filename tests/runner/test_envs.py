"""Environments (proctor/runner/envs.py): built once per key and reused,
one build when workers ask at once, the time limit kills pip, and a failed
build says why with pip's last lines and leaves nothing half-built."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from proctor.runner.envs import (
    MARKER,
    BuiltEnv,
    EnvBuildFailed,
    EnvStore,
    default_env_dir,
    find_interpreter,
    progress_line,
)
from proctor.runner.frameworks.base import EnvSpec
from proctor.runner.frameworks.lerobot import Lerobot
from tests.runner.conftest import HERE, lerobot_manifest

TINY = EnvSpec(framework="test", version="1", python="3.11")


def _leftovers(root: Path) -> list[str]:
    """What a store's root holds besides lock files."""
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock"))


def test_the_lerobot_environment_is_reused(lerobot_env: BuiltEnv) -> None:
    store = EnvStore(default_env_dir(None), build_timeout_s=1800)
    lines: list[str] = []
    start = time.monotonic()
    again = store.ensure(Lerobot().env_spec(lerobot_manifest(), HERE), lines.append)
    assert time.monotonic() - start < 2.0
    assert again.reused and again.path == lerobot_env.path and lines == []
    assert (again.path / MARKER).is_file() and again.python.is_file()
    assert "Successfully installed" in again.log_path.read_text()


def test_a_build_is_reused_and_leaves_no_temporary_folder(tmp_path: Path) -> None:
    store = EnvStore(tmp_path, build_timeout_s=300)
    lines: list[str] = []
    first = store.ensure(TINY, lines.append)
    assert not first.reused and first.path == tmp_path / TINY.key()
    assert lines[0] == "creating a Python 3.11 environment" and lines[-1] == "environment ready"
    assert first.python.is_file() and first.base_prefix.is_dir()
    start = time.monotonic()
    second = store.ensure(TINY, lines.append)
    assert second.reused and second.path == first.path
    assert time.monotonic() - start < 0.5
    assert _leftovers(tmp_path) == [TINY.key()]


def test_concurrent_requests_build_once(tmp_path: Path) -> None:
    store = EnvStore(tmp_path, build_timeout_s=300)
    lines: list[str] = []
    results: list[BuiltEnv] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            results.append(store.ensure(TINY, lines.append))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert sorted(r.reused for r in results) == [False, True, True]
    assert lines.count("creating a Python 3.11 environment") == 1
    assert "waiting for another build of this environment" in lines
    assert _leftovers(tmp_path) == [TINY.key()]


def test_the_time_limit_kills_the_build(tmp_path: Path) -> None:
    store = EnvStore(tmp_path, build_timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(EnvBuildFailed) as caught:
        store.ensure(TINY, lambda _: None)
    assert time.monotonic() - start < 10
    assert caught.value.timed_out
    assert "ran past 0.5 s while creating the venv and was stopped" in str(caught.value)
    time.sleep(1.0)  # a process still running would write its folder back
    assert _leftovers(tmp_path) == []


def test_a_requirement_that_does_not_resolve_fails_with_pip_s_words(tmp_path: Path) -> None:
    spec = EnvSpec(
        framework="command",
        version="x",
        python="3.11",
        requirements=b"proctor-no-such-package-zz==0.0.1\n",
    )
    with pytest.raises(EnvBuildFailed) as caught:
        EnvStore(tmp_path, build_timeout_s=300).ensure(spec, lambda _: None)
    assert not caught.value.timed_out
    assert str(caught.value).startswith("installing runner.requirements failed")
    assert "No matching distribution found for proctor-no-such-package-zz" in caught.value.log_tail
    assert _leftovers(tmp_path) == []


def test_a_submitter_s_source_only_package_is_never_built(tmp_path: Path) -> None:
    """evdev is published as a source distribution only: installing it would
    run its setup.py on the host; wheels-only refuses it."""
    spec = EnvSpec(framework="command", version="y", python="3.11", requirements=b"evdev\n")
    with pytest.raises(EnvBuildFailed) as caught:
        EnvStore(tmp_path, build_timeout_s=300).ensure(spec, lambda _: None)
    assert "No matching distribution found for evdev" in caught.value.log_tail
    assert "setup.py" not in caught.value.log_tail and "Building wheel" not in caught.value.log_tail


def test_refused_requirement_lines_are_not_handed_to_pip(tmp_path: Path) -> None:
    spec = EnvSpec(framework="command", version="z", python="3.11", requirements=b"-e .\n")
    with pytest.raises(EnvBuildFailed, match=r"runner\.requirements: '-e \.'"):
        EnvStore(tmp_path, build_timeout_s=300).ensure(spec, lambda _: None)
    assert _leftovers(tmp_path) == []


def test_a_missing_python_names_runner_python() -> None:
    with pytest.raises(EnvBuildFailed, match=r"^runner\.python: Python 3\.99 is not installed"):
        find_interpreter("3.99")
    assert find_interpreter("3.11").name == "python3.11"


def test_pip_output_becomes_progress_lines() -> None:
    assert progress_line("Collecting lerobot==0.4.4\n") == "collecting lerobot==0.4.4"
    assert progress_line("Installing collected packages: a, b, c\n") == "installing 3 packages"
    assert progress_line("Successfully installed a-1 b-2\n") == "installed 2 packages"
    assert progress_line("  Downloading torch-2.10.0.whl (900 MB)\n") is None
