"""LeRobot checkpoints: a ``save_pretrained`` folder (config.json +
model.safetensors, optionally LeRobot's saved pre/post-processors) served
by ``servers/lerobot_server.py`` inside a LeRobot environment.

The station → policy mapping (``proctor/runner/README.md``): the policy's
input features may be ``observation.state`` of shape [8] (the 7 joint
positions, then the gripper's position 0..1) and ``observation.images.<camera>``
of shape [3, H, W] for the manifest's cameras; its output ``action`` is as
wide as the manifest's action space. Anything else is a feature the station
cannot provide, refused here before an environment is built.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from proctor.runner.frameworks.base import (
    PYTHON_PLACEHOLDER,
    SANDBOX_CHECKPOINT,
    SANDBOX_HELPERS,
    EnvSpec,
    ServerLaunch,
    register,
)
from proctor.runner.manifest import LerobotRunner, Manifest, ManifestProblem

# the release the runner has been tested with (its policy classes, config
# format and processor files); a checkpoint saved by another release names
# it in runner.lerobot_version
DEFAULT_LEROBOT_VERSION = "0.4.4"
# the wire our server speaks (proctor/policywire/wire/codec.py), pinned to the
# versions the station itself runs
WIRE_PACKAGES = ("msgpack==1.2.4", "websockets==17.4")
PYTHON = "3.11"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MAX_CONFIG_BYTES = 1 << 20
FIELD = "runner.policy_path"
STATE_FEATURE = "observation.state"
STATE_WIDTH = 8  # 7 joint positions + the gripper's position
IMAGE_PREFIX = "observation.images."
ACTION_FEATURE = "action"
SERVER_SCRIPT = "lerobot_server.py"


def _problem(message: str) -> ManifestProblem:
    return ManifestProblem(FIELD, f"{CONFIG_NAME}: {message}")


def _shape(spec: Any) -> list[int] | None:
    shape = spec.get("shape") if isinstance(spec, dict) else None
    if isinstance(shape, list) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in shape
    ):
        return shape
    return None


def _check_input(name: str, spec: Any, cameras: list[str]) -> str | None:
    """Why the station cannot feed input feature ``name``, or None."""
    shape = _shape(spec)
    if name == STATE_FEATURE:
        if shape != [STATE_WIDTH]:
            return (
                f"has shape {shape}; the station provides [{STATE_WIDTH}] "
                "(7 joint positions in radians, then the gripper's position 0..1)"
            )
        return None
    if name.startswith(IMAGE_PREFIX):
        camera = name.removeprefix(IMAGE_PREFIX)
        if camera not in cameras:
            return (
                f"the station has no camera '{camera}' for this policy: "
                f"the policy's cameras are {', '.join(cameras)} ([policy] cameras)"
            )
        if shape is None or len(shape) != 3 or shape[0] != 3 or min(shape) < 1:
            return f"has shape {shape}; an image feature must be [3, H, W]"
        return None
    return (
        "the station provides no such observation: inputs may be "
        f"{STATE_FEATURE} [{STATE_WIDTH}] and "
        + ", ".join(f"{IMAGE_PREFIX}{c} [3, H, W]" for c in cameras)
    )


def check_config(manifest: Manifest, raw: bytes | None) -> list[ManifestProblem]:
    """The problems with a LeRobot config.json's features, for ``manifest``'s station side."""
    if raw is None:
        return [_problem("is missing: the folder must be a LeRobot save_pretrained folder")]
    if len(raw) >= MAX_CONFIG_BYTES:
        return [_problem(f"is larger than {MAX_CONFIG_BYTES} bytes")]
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        return [_problem(f"is not valid JSON ({type(exc).__name__})")]
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        return [_problem("has no policy 'type' (is this LeRobot's config.json?)")]
    inputs = config.get("input_features")
    outputs = config.get("output_features")
    if not isinstance(inputs, dict) or not inputs:
        return [_problem("input_features: is missing or empty")]
    if not isinstance(outputs, dict):
        return [_problem("output_features: is missing")]
    problems = []
    for name, spec in inputs.items():
        reason = _check_input(str(name), spec, list(manifest.policy.cameras))
        if reason is not None:
            problems.append(_problem(f"input_features.{name}: {reason}"))
    space = manifest.policy.action_space
    for name, spec in outputs.items():
        if name != ACTION_FEATURE:
            problems.append(
                _problem(f"output_features.{name}: the station reads only '{ACTION_FEATURE}'")
            )
        elif _shape(spec) != [space.width]:
            problems.append(
                _problem(
                    f"output_features.{ACTION_FEATURE}: has shape {_shape(spec)}; "
                    f"the {space.value} action space (policy.action_space) needs [{space.width}]"
                )
            )
    if ACTION_FEATURE not in outputs:
        problems.append(_problem(f"output_features.{ACTION_FEATURE}: is missing"))
    return problems


def _check_weights(head: bytes | None) -> list[ManifestProblem]:
    if head is None:
        return [ManifestProblem(FIELD, f"{WEIGHTS_NAME}: is missing (save with save_pretrained)")]
    # safetensors: an 8-byte little-endian header length, then a JSON header
    if len(head) < 9 or head[8:9] != b"{":
        return [ManifestProblem(FIELD, f"{WEIGHTS_NAME}: is not a safetensors file")]
    return []


def _read_file(path: Path, limit: int) -> bytes | None:
    if not path.is_file():
        return None
    with path.open("rb") as f:
        return f.read(limit)


@register
class Lerobot:
    name: ClassVar[str] = "lerobot"

    def _runner(self, manifest: Manifest) -> LerobotRunner:
        runner = manifest.runner
        assert isinstance(runner, LerobotRunner)
        return runner

    def env_spec(self, manifest: Manifest, root: Path) -> EnvSpec:
        version = self._runner(manifest).lerobot_version or DEFAULT_LEROBOT_VERSION
        return EnvSpec(
            framework=self.name,
            version=version,
            python=PYTHON,
            packages=(f"lerobot=={version}", *WIRE_PACKAGES),
        )

    def check(self, manifest: Manifest, root: Path) -> list[ManifestProblem]:
        folder = root / self._runner(manifest).policy_path
        return self._checks(manifest, lambda name: _read_file(folder / name, MAX_CONFIG_BYTES))

    def check_members(
        self, manifest: Manifest, read: Callable[[str], bytes | None]
    ) -> list[ManifestProblem]:
        base = self._runner(manifest).policy_path
        prefix = "" if base == "." else base + "/"
        return self._checks(manifest, lambda name: read(prefix + name))

    def _checks(
        self, manifest: Manifest, read: Callable[[str], bytes | None]
    ) -> list[ManifestProblem]:
        return check_config(manifest, read(CONFIG_NAME)) + _check_weights(read(WEIGHTS_NAME))

    def launch(self, manifest: Manifest, port: int) -> ServerLaunch:
        runner = self._runner(manifest)
        policy = manifest.policy
        folder = (
            SANDBOX_CHECKPOINT
            if runner.policy_path == "."
            else (f"{SANDBOX_CHECKPOINT}/{runner.policy_path}")
        )
        argv = (
            PYTHON_PLACEHOLDER,
            f"{SANDBOX_HELPERS}/{SERVER_SCRIPT}",
            "--policy",
            folder,
            "--port",
            str(port),
            "--chunk-length",
            str(policy.chunk_length),
            "--action-space",
            policy.action_space.value,
            "--cameras",
            ",".join(policy.cameras),
            "--prompts",
            json.dumps(manifest.prompts),
        )
        # no hub: the sandbox has no network, and nothing may be fetched by name
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        return ServerLaunch(argv=argv, port=port, dialect=runner.serves, env=env)
