"""The frameworks' checks and launches (proctor/runner/frameworks): a LeRobot
folder saved by LeRobot passes; a feature the station cannot provide is
refused naming it; openpi is refused naming runner.framework; a command's
requirements must be plain specifiers; launches fill their placeholders."""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import pytest

from proctor.runner.frameworks import FRAMEWORKS, framework_for
from proctor.runner.frameworks.base import HELPERS_DIR, ServerLaunch
from proctor.runner.frameworks.lerobot import DEFAULT_LEROBOT_VERSION, WIRE_PACKAGES
from proctor.runner.manifest import parse_manifest
from proctor.runner.requirements import check_requirements
from tests.runner.conftest import lerobot_manifest


def test_the_registry_holds_the_three_frameworks() -> None:
    assert sorted(FRAMEWORKS) == ["command", "lerobot", "openpi"]


def test_real_lerobot_checkpoints_pass_the_check(checkpoints: Path) -> None:
    for kind in ("act", "diffusion"):
        manifest = lerobot_manifest(kind)
        assert framework_for(manifest).check(manifest, checkpoints) == []


def _edited(checkpoints: Path, tmp_path: Path, edit: dict[str, object]) -> Path:
    root = tmp_path / "ckpt"
    shutil.copytree(checkpoints / "act", root / "act")
    config_path = root / "act" / "config.json"
    config = json.loads(config_path.read_text())
    for dotted, value in edit.items():
        section, name = dotted.split(":")
        if value is None:
            del config[section][name]
        else:
            config[section][name] = value
    config_path.write_text(json.dumps(config))
    return root


@pytest.mark.parametrize(
    ("edit", "space", "expected"),
    [
        (
            {"input_features:observation.environment_state": {"type": "ENV", "shape": [4]}},
            "joint_position",
            "policy.toml: runner.policy_path: config.json: "
            "input_features.observation.environment_state: the station provides no such "
            "observation",
        ),
        (
            {"output_features:action": {"type": "ACTION", "shape": [6]}},
            "joint_position",
            "policy.toml: runner.policy_path: config.json: output_features.action: has shape "
            "[6]; the joint_position action space (policy.action_space) needs [8]",
        ),
        (
            {},
            "cartesian_velocity",
            "policy.toml: runner.policy_path: config.json: output_features.action: has shape "
            "[8]; the cartesian_velocity action space (policy.action_space) needs [7]",
        ),
        (
            {"input_features:observation.state": {"type": "STATE", "shape": [14]}},
            "joint_position",
            "policy.toml: runner.policy_path: config.json: input_features.observation.state: "
            "has shape [14]; the station provides [8]",
        ),
    ],
    ids=["environment_state", "action [6]", "cartesian needs 7", "state [14]"],
)
def test_a_feature_the_station_cannot_provide_is_refused_naming_it(
    checkpoints: Path, tmp_path: Path, edit: dict[str, object], space: str, expected: str
) -> None:
    root = _edited(checkpoints, tmp_path, edit)
    manifest = lerobot_manifest("act", space)
    problems = [str(p) for p in framework_for(manifest).check(manifest, root)]
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems


def test_a_camera_the_manifest_does_not_list_is_refused(checkpoints: Path) -> None:
    text = (
        'name = "tiny-act"\n[runner]\nframework = "lerobot"\npolicy_path = "act"\n'
        '[policy]\naction_space = "joint_position"\nchunk_length = 4\ncameras = ["exterior"]\n'
    )
    manifest = parse_manifest(text)
    problems = [str(p) for p in framework_for(manifest).check(manifest, checkpoints)]
    assert problems == [
        "policy.toml: runner.policy_path: config.json: input_features.observation.images.wrist: "
        "the station has no camera 'wrist' for this policy: the policy's cameras are exterior "
        "([policy] cameras)"
    ]


def test_the_check_reads_json_only_and_needs_the_weights(tmp_path: Path) -> None:
    folder = tmp_path / "act"
    folder.mkdir()
    (folder / "config.json").write_bytes(b"\x80\x04 not json (a pickle?)")
    manifest = lerobot_manifest("act")
    problems = [str(p) for p in framework_for(manifest).check(manifest, tmp_path)]
    assert problems == [
        "policy.toml: runner.policy_path: config.json: is not valid JSON (UnicodeDecodeError)",
        "policy.toml: runner.policy_path: model.safetensors: is missing (save with "
        "save_pretrained)",
    ]


def test_the_lerobot_environment_and_launch() -> None:
    manifest = lerobot_manifest("act", "joint_velocity", 7)
    lerobot = FRAMEWORKS["lerobot"]
    spec = lerobot.env_spec(manifest, Path())
    assert spec.packages == (f"lerobot=={DEFAULT_LEROBOT_VERSION}", *WIRE_PACKAGES)
    assert all("==" in p for p in spec.packages)  # every one pinned
    pinned = parse_manifest(
        'name = "tiny-act"\n[runner]\nframework = "lerobot"\npolicy_path = "act"\n'
        'lerobot_version = "0.4.3"\n[policy]\naction_space = "joint_position"\nchunk_length = 4\n'
    )
    assert lerobot.env_spec(pinned, Path()).packages[0] == "lerobot==0.4.3"
    assert lerobot.env_spec(pinned, Path()).key() != spec.key()
    launch = lerobot.launch(manifest, 18300)
    assert launch.argv[:6] == (
        "{python}",
        "/opt/proctor/lerobot_server.py",
        "--policy",
        "/checkpoint/act",
        "--port",
        "18300",
    )
    assert launch.dialect == "openpi" and launch.port == 18300
    filled = launch.fill(Path("/envs/lerobot-x"))
    assert filled.argv[0] == "/envs/lerobot-x/bin/python"
    assert json.loads(filled.argv[filled.argv.index("--prompts") + 1]) == {
        "default": "put the items into the target bin"
    }


COMMAND = """\
name = "own-server"
[runner]
framework = "command"
command = {command}
requirements = "requirements.txt"
dialect = "roboarena"
[policy]
action_space = "joint_position"
chunk_length = 4
"""


def _command(command: str) -> object:
    return parse_manifest(COMMAND.format(command=command))


def test_a_command_launch_runs_bare_names_from_its_environment() -> None:
    manifest = _command('["python", "serve.py", "--port={port}", "--x", "{y}"]')
    launch = FRAMEWORKS["command"].launch(manifest, 18400)  # type: ignore[arg-type]
    assert launch == ServerLaunch(
        argv=("{env}/bin/python", "serve.py", "--port=18400", "--x", "{y}"),
        port=18400,
        dialect="roboarena",
        # the submitter's files are named relative to policy.toml
        cwd="/checkpoint",
    )
    assert launch.fill(Path("/e")).argv == (
        "/e/bin/python",
        "serve.py",
        "--port=18400",
        "--x",
        "{y}",
    )
    by_path = _command('["/checkpoint/serve.sh", "{port}"]')
    argv = FRAMEWORKS["command"].launch(by_path, 1).argv  # type: ignore[arg-type]
    assert argv == ("/checkpoint/serve.sh", "1")


def test_a_command_s_requirements_are_checked_and_hashed_into_its_key(tmp_path: Path) -> None:
    manifest = _command('["python", "serve.py", "{port}"]')
    command = FRAMEWORKS["command"]
    (tmp_path / "requirements.txt").write_bytes(b"numpy==2.2.6\n")
    assert command.check(manifest, tmp_path) == []  # type: ignore[arg-type]
    spec = command.env_spec(manifest, tmp_path)  # type: ignore[arg-type]
    assert spec.requirements == b"numpy==2.2.6\n" and spec.packages == ()
    (tmp_path / "requirements.txt").write_bytes(b"numpy==2.2.6\n-e .\n")
    problems = [str(p) for p in command.check(manifest, tmp_path)]  # type: ignore[arg-type]
    assert problems == [
        "policy.toml: runner.requirements: '-e .': options are not allowed (no -e, -r, -c, "
        "--index-url, --extra-index-url, -f): list package names with versions only; "
        "packages come from the package index the runner host uses, as wheels"
    ]
    assert command.env_spec(manifest, tmp_path).key() != spec.key()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        "-e .",
        "-r other.txt",
        "--index-url https://example.com/simple",
        "-f https://example.com/wheels",
        "https://example.com/pkg-1.0.tar.gz",
        "pkg @ git+https://example.com/pkg.git",
        "./vendor/pkg",
        "/abs/pkg.whl",
        "pkg==1.0 --hash=sha256:00",
    ],
)
def test_requirement_lines_that_are_not_plain_specifiers_are_refused(line: str) -> None:
    problems = check_requirements(f"numpy==2.2.6\n{line}\n".encode())
    assert len(problems) == 1 and problems[0].field == "runner.requirements"
    assert f"'{line}'" in problems[0].message


def test_plain_specifiers_pass() -> None:
    text = b"# comment\nnumpy==2.2.6\ntorch>=2.2,<3 ; python_version >= '3.10'\nx[a,b]~=1.0\n\n"
    assert check_requirements(text) == []


def test_openpi_is_refused_naming_runner_framework(tmp_path: Path) -> None:
    manifest = parse_manifest(
        'name = "pi-policy"\n[runner]\nframework = "openpi"\nconfig = "pi05_droid"\n'
        'checkpoint_path = "ckpt"\n[policy]\naction_space = "joint_velocity"\nchunk_length = 8\n'
    )
    openpi = framework_for(manifest)
    for problems in (
        openpi.check(manifest, tmp_path),
        openpi.check_members(manifest, lambda p: b""),
    ):
        assert [p.field for p in problems] == ["runner.framework"]
        assert "not installable from the package index" in problems[0].message
    with pytest.raises(ValueError, match="cannot be served"):
        openpi.launch(manifest, 1)


def test_the_in_sandbox_servers_never_import_proctor() -> None:
    """They run in the framework's environment, where proctor is not installed
    (and must not be: the sandbox sees only the environment and the checkpoint)."""
    for script in sorted(HELPERS_DIR.glob("*.py")):
        tree = ast.parse(script.read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert "proctor" not in imported and "tests" not in imported, script.name
        assert imported <= set(sys.stdlib_module_names) | {
            "numpy",
            "torch",
            "lerobot",
            "msgpack",
            "websockets",
        }, (script.name, imported)
