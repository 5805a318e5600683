"""The runner's LeRobot environment as a session fixture, shared by the
runner's tests and the LeRobot export's (built through ``EnvStore`` under
~/.cache/proctor/runner-envs, once per machine, then reused by every run).
A plugin of the suite (``tests/conftest.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from proctor.runner.envs import BuiltEnv, EnvStore, default_env_dir
from proctor.runner.frameworks.lerobot import Lerobot
from proctor.runner.manifest import Manifest, parse_manifest

MANIFEST = """\
name = "tiny-{kind}"

[runner]
framework = "lerobot"
policy_path = "{kind}"

[policy]
action_space = "{space}"
chunk_length = {chunk}
cameras = ["exterior", "wrist"]

[prompts]
default = "put the items into the target bin"
"""


def lerobot_manifest(kind: str = "act", space: str = "joint_position", chunk: int = 6) -> Manifest:
    return parse_manifest(MANIFEST.format(kind=kind, space=space, chunk=chunk))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # by the fixture: building the environment the first time on a machine
    # takes minutes (a hook of the whole suite: every item passes here)
    for item in items:
        if "lerobot_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"[lerobot env] {text}")


@pytest.fixture(scope="session")
def lerobot_env(pytestconfig: pytest.Config) -> BuiltEnv:
    """The runner's LeRobot environment, as the runner builds it (the first
    time on a machine: about 2–3 minutes, pip's progress shown)."""
    spec = Lerobot().env_spec(lerobot_manifest(), Path(__file__).resolve().parent)
    store = EnvStore(default_env_dir(None), build_timeout_s=1800)
    start = time.monotonic()
    env = store.ensure(spec, lambda line: _say(pytestconfig, line))
    if not env.reused:
        _say(pytestconfig, f"built {env.key} in {time.monotonic() - start:.0f} s")
    return env
