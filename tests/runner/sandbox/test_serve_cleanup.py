"""``proctor runner serve`` leaves no server folder behind when the start
fails: a server that exits before it is ready, or an interruption while it
loads. (The review found 175 MB left in the runtime folder after one.) The
environment is the sandbox tests' tiny venv, so no pip runs."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from proctor.runner.archive import ArchiveLimits
from proctor.runner.envs import BuiltEnv
from proctor.runner.frameworks.base import EnvSpec
from proctor.runner.pipeline import PipelineConfig
from proctor.runner.serve import serve_checkpoint
from tests.runner.conftest import free_port
from tests.runner.sandbox.conftest import LIMITS

POLICY = """name = "{name}"
[runner]
framework = "command"
command = ["python", "serve.py", "{{port}}"]
[policy]
action_space = "joint_position"
chunk_length = 4
"""

CRASH = "import sys\nprint('loading weights... no', flush=True)\nsys.exit(3)\n"
# loads for longer than the test waits: never ready
SLOW = "import time\nprint('loading', flush=True)\ntime.sleep(60)\n"


class TinyEnvs:
    """An ``EnvStore`` that hands out the sandbox tests' venv."""

    def __init__(self, env_dir: Path) -> None:
        self.env_dir = env_dir

    def ensure(self, spec: EnvSpec, progress: object) -> BuiltEnv:
        return BuiltEnv(
            path=self.env_dir,
            python=self.env_dir / "bin" / "python",
            key="tiny",
            reused=True,
            log_path=self.env_dir / "build.log",
            base_prefix=Path(sys.base_prefix),
        )


def _checkpoint(folder: Path, name: str, server: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "policy.toml").write_text(POLICY.format(name=name))
    (folder / "serve.py").write_text(server)
    return folder


def _serve(
    short_dir: Path, env_dir: Path, server: str, stop: threading.Event
) -> tuple[str | None, Path]:
    runtime = short_dir / "rt"
    config = PipelineConfig(
        work_dir=short_dir / "work",
        limits=LIMITS,
        archive_limits=ArchiveLimits(max_unpacked_bytes=2**20, max_files=10, max_ratio=100),
        ready_timeout_s=60,
        runtime_dir=runtime,
    )
    said: list[str] = []

    def say(text: str) -> None:
        said.append(text)
        if "waiting for the server to answer" in text and server == SLOW:
            stop.set()  # Ctrl-C while it loads

    result = serve_checkpoint(
        _checkpoint(short_dir / "ckpt", "cleanup", server),
        port=free_port(),
        config=config,
        envs=TinyEnvs(env_dir),  # type: ignore[arg-type]
        say=say,
        stop=stop,
        latency_budget_s=30,
    )
    assert any("starting the sandboxed server" in line for line in said), said
    return result.failure, runtime


@pytest.mark.parametrize(
    ("server", "failure"),
    [(CRASH, "setup_crash"), (SLOW, "host_error")],
    ids=["exits-before-ready", "interrupted-while-loading"],
)
def test_a_failed_start_leaves_no_server_folder(
    short_dir: Path, env_dir: Path, server: str, failure: str
) -> None:
    ended, runtime = _serve(short_dir, env_dir, server, threading.Event())
    assert ended == failure
    assert runtime.is_dir()  # the server's folder was made in it…
    assert list(runtime.iterdir()) == []  # …and is gone
