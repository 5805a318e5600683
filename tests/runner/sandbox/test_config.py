"""What the sandbox refuses before anything starts, and which limit backend
it picks."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import pytest

from proctor.runner.frameworks.base import ServerLaunch
from proctor.runner.sandbox import start
from proctor.runner.sandbox.base import SandboxSpec
from proctor.runner.sandbox.bwrap import SandboxConfigError, base_prefix, sandbox_env
from proctor.runner.sandbox.limits import (
    CHILD_PREFIX,
    LIMIT_BACKENDS,
    LimitsUnavailable,
    _v1_dir,
    choose,
)
from tests.runner.sandbox.conftest import LIMITS, StartSandbox


def _spec(env_dir: Path, work: Path, fields: dict[str, object] | None = None) -> SandboxSpec:
    launch = ServerLaunch(argv=("python", "serve.py"), port=9000, dialect="openpi")
    values: dict[str, object] = {
        "launch": launch,
        "env_dir": env_dir,
        "checkpoint_dir": work,
        "work_dir": work / "w",
        "limits": LIMITS,
        **(fields or {}),
    }
    return SandboxSpec(**values)  # type: ignore[arg-type]


def test_the_environment_is_only_what_is_passed_and_ours_wins(
    env_dir: Path, short_dir: Path
) -> None:
    fields = {"env": {"HF_HUB_OFFLINE": "1", "PATH": "/evil", "HOME": "/root"}, "gpus": "1"}
    spec = _spec(env_dir, short_dir, fields)
    env = sandbox_env(spec)
    assert env == {
        "HF_HUB_OFFLINE": "1",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PATH": f"{env_dir}/bin:/usr/bin:/bin",
        "CUDA_VISIBLE_DEVICES": "1",
    }


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"env": {"BAD NAME": "x"}}, "env: invalid variable 'BAD NAME'"),
        ({"gpus": "0;rm -rf"}, "gpus: '0;rm -rf' is not a comma-separated list"),
        ({"env_dir": Path("relative/env")}, "env_dir: relative/env is not absolute"),
    ],
)
def test_a_bad_spec_is_refused_naming_its_field(
    env_dir: Path, short_dir: Path, fields: dict[str, object], names: str
) -> None:
    with pytest.raises(SandboxConfigError) as refused:
        start(_spec(env_dir, short_dir, fields))
    assert names in str(refused.value)
    assert not (short_dir / "w").exists()  # refused before anything was made


def test_the_base_python_is_read_from_pyvenv_cfg(env_dir: Path, short_dir: Path) -> None:
    home = next(
        line.split("=", 1)[1].strip()
        for line in (env_dir / "pyvenv.cfg").read_text().splitlines()
        if line.startswith("home")
    )
    assert base_prefix(env_dir) == Path(home).resolve().parent
    with pytest.raises(SandboxConfigError) as refused:
        base_prefix(short_dir)
    assert str(refused.value).startswith(f"env_dir: {short_dir}/pyvenv.cfg cannot be read")


def test_backends_are_found_by_name(caplog: pytest.LogCaptureFixture) -> None:
    assert set(LIMIT_BACKENDS) == {"cgroup-v2", "cgroup-v1", "rlimit"}
    # this host: cgroup v1 memory and pids writable, cgroup2 without controllers
    assert choose("auto").name == "cgroup-v1"
    assert choose("v1").name == "cgroup-v1"
    with caplog.at_level(logging.WARNING):
        assert choose("none").name == "rlimit"
    assert "NOT bounded" in caplog.text
    with pytest.raises(LimitsUnavailable, match=r"runner\.cgroups: unknown value 'cgroup-v3'"):
        choose("cgroup-v3")


def test_a_dead_workers_empty_cgroups_are_swept(sandboxes: StartSandbox) -> None:
    """A worker that died leaves its sandboxes' cgroups behind, empty; the
    next sandbox removes those older than a minute, never a young one (a
    sibling worker's, about to be entered)."""
    parent = _v1_dir("pids")
    assert parent is not None
    old, young = parent / f"{CHILD_PREFIX}test-old", parent / f"{CHILD_PREFIX}test-young"
    old.mkdir()
    young.mkdir()
    try:
        os.utime(old, (time.time() - 3600, time.time() - 3600))
        sandboxes("sweep", "echo_server.py", "9000")
        assert not old.exists()
        assert young.exists()
    finally:
        for path in (old, young):
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()
