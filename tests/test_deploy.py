"""The example deployment in deploy/ is read by the code that will read it in
production, so the files cannot drift from the code."""

from __future__ import annotations

import configparser
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from proctor.cli import app
from proctor.core.settings import load_settings
from proctor.station.config import load_station_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def test_server_config_is_valid_and_holds_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("PROCTOR_SECRET_KEY", "PROCTOR_ENV", "PROCTOR_DATABASE_URL", "PROCTOR_ARTIFACTS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PROCTOR_SECRET_KEY", "x" * 48)  # prod requires it, from the environment
    settings = load_settings(DEPLOY / "server" / "proctor.toml")
    assert settings.env == "prod"
    assert settings.db_url.startswith("postgresql+psycopg://")
    assert settings.submissions.conformance_dispatch == "worker"
    raw = (DEPLOY / "server" / "proctor.toml").read_text()
    assert "secret_key =" not in raw and "encryption_key =" not in raw


def test_env_example_names_only_settings_that_exist() -> None:
    names = [
        line.split("=", 1)[0].lstrip("# ").strip()
        for line in (DEPLOY / "server" / "proctor.env.example").read_text().splitlines()
        if "=" in line and line.lstrip("# ").startswith("PROCTOR_")
    ]
    assert "PROCTOR_SECRET_KEY" in names and "PROCTOR_ENCRYPTION_KEY" in names
    fields = set(type(load_settings()).model_fields)
    for name in names:
        assert name.removeprefix("PROCTOR_").lower().split("__")[0] in fields, name


def test_the_serial_latency_rule_pre_flight_names_sets_one_ms_on_ftdi_adapters() -> None:
    from proctor.station.preflight import LATENCY_UDEV_RULE

    rule = DEPLOY.parent / LATENCY_UDEV_RULE
    lines = [ln for ln in rule.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) == 1
    keys = dict(re.findall(r'([A-Z]+(?:\{[^}]+\})?)[=!]=?"([^"]*)"', lines[0]))
    assert keys["SUBSYSTEM"] == "tty" and keys["DRIVERS"] == "ftdi_sio"
    assert keys["ATTR{device/latency_timer}"] == "1"


@pytest.mark.parametrize("name", ["station-real.toml", "station-twin.toml", "station-sim.toml"])
def test_station_configs_load(name: str) -> None:
    config = load_station_config(DEPLOY / "station" / name)
    assert config.name


def test_the_real_station_config_builds_valid_driver_configs() -> None:
    """Every driver table of [real] is a valid config of its driver, checked
    without connecting to any hardware."""
    from proctor.station.drivers.arm.base import ARMS
    from proctor.station.drivers.camera.base import CAMERAS
    from proctor.station.drivers.gripper.base import GRIPPERS
    from proctor.station.profiles.real import driver_config

    section = tomllib.loads((DEPLOY / "station" / "station-real.toml").read_text())["real"]
    arm_cls = ARMS.load("franky")
    assert driver_config(arm_cls.config_class, dict(section["arm"]), "real.arm").host
    gripper_cls = GRIPPERS.load("robotiq_2f85")
    assert driver_config(gripper_cls.config_class, dict(section["gripper"]), "real.gripper").port
    for cam_name, table in section["cameras"].items():
        table = dict(table)
        cam_cls = CAMERAS.load(table.pop("driver"))
        driver_config(cam_cls.config_class, table, f"real.cameras.{cam_name}", name=cam_name)


def _commands_of_units() -> list[list[str]]:
    commands = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(unit)
        for key in ("ExecStartPre", "ExecStart"):
            if parser.has_option("Service", key):
                commands.append(shlex.split(parser.get("Service", key)))
    return commands


def _commands_of_compose() -> list[list[str]]:
    doc = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    return [
        svc["command"] for svc in doc["services"].values() if "proctor" in svc.get("command", [])
    ]


def _subcommand(argv: list[str]) -> list[str]:
    """The `proctor` words of a command line, without its options' values."""
    words = argv[argv.index(next(a for a in argv if a.endswith("proctor"))) + 1 :]
    return [w for w in words if not w.startswith("-") and "/" not in w]


@pytest.mark.parametrize("source", ["systemd", "compose"])
def test_every_command_the_deployment_runs_exists(source: str) -> None:
    commands = _commands_of_units() if source == "systemd" else _commands_of_compose()
    assert commands
    runner = CliRunner()
    for argv in commands:
        words = _subcommand(argv)
        # drop the option values that follow flags (e.g. `--profile real`)
        path = []
        for w in words:
            result = runner.invoke(app, [*path, w, "--help"])
            if result.exit_code != 0:
                break
            path.append(w)
        assert path, argv
        help_text = runner.invoke(app, [*path, "--help"]).output
        for flag in (a.split("=")[0] for a in argv if a.startswith("--")):
            assert flag in help_text, f"{' '.join(argv)}: {flag} is not an option of {path}"


def _registry_of(image: str) -> str:
    """The registry an image reference names ("" for a short name)."""
    first, _, rest = image.partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else ""


def test_the_compose_stack_starts_in_order_from_images_named_in_full() -> None:
    """What the first run under podman found (deploy/README.md, Containers)."""
    doc = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = doc["services"]
    # podman refuses short names unless registries.conf has a search registry
    for name, svc in services.items():
        assert _registry_of(svc["image"]), f"{name}: image {svc['image']!r} is a short name"
    dockerfile = (DEPLOY / "compose" / "Dockerfile").read_text()
    base = next(ln for ln in dockerfile.splitlines() if ln.startswith("ARG BASE_IMAGE="))
    assert _registry_of(base.split("=", 1)[1])
    # `serve --no-migrate` refuses a database behind the code: the schema comes first
    migrate = services["migrate"]
    assert migrate["command"] == ["proctor", "db", "upgrade"] and "profiles" not in migrate
    for name in ("web", "conformance-worker"):
        wait = services[name]["depends_on"]["migrate"]
        assert wait == {"condition": "service_completed_successfully"}, name
        assert services[name]["restart"] == "unless-stopped", name  # engines without conditions
    # one image for the three proctor services, built once
    assert {services[n]["image"] for n in ("migrate", "web", "conformance-worker")} == {
        "localhost/proctor-server:latest"
    }


def test_the_image_leaves_virtual_environments_and_secrets_out() -> None:
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    for pattern in (".venv", ".venv-*", "**/.env", "proctor-data", ".git"):
        assert pattern in ignored, pattern


def test_nginx_upgrades_the_websocket_paths_the_app_serves() -> None:
    conf = (DEPLOY / "nginx" / "proctor.conf").read_text()
    from proctor.scheduler.gateway import GATEWAY_PATH

    assert GATEWAY_PATH.startswith("/policy/")
    for location in ("location /policy/", "location /api/console/"):
        block = conf.split(location, 1)[1].split("}", 1)[0]
        assert "proxy_set_header Upgrade $http_upgrade" in block


def test_nginx_sends_hsts_on_its_tls_server_once() -> None:
    """HTTPS only, for a year: on the TLS server (not the port-80 redirect),
    for every answer (`always`), with the app's own copy hidden so that the
    header is not sent twice."""
    from proctor.web.middleware import STRICT_TRANSPORT_SECURITY

    conf = (DEPLOY / "nginx" / "proctor.conf").read_text()
    tls = conf.split("listen 443 ssl;", 1)[1]
    header = f'add_header Strict-Transport-Security "{STRICT_TRANSPORT_SECURITY}" always;'
    assert header in tls and header not in conf.split("listen 443 ssl;", 1)[0]
    assert "proxy_hide_header Strict-Transport-Security;" in tls
    # no location adds headers of its own (nginx would then drop the server's)
    assert conf.count("add_header") == 1


def _nginx_size(value: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


def test_nginx_bounds_bodies_as_the_app_does() -> None:
    """Small bodies everywhere, large only on the upload chunk location, and
    the same split as the app's own limits (proctor/web/limits.py)."""
    from proctor.core.settings import WebSettings
    from proctor.web.limits import BODY_LIMITS

    conf = (DEPLOY / "nginx" / "proctor.conf").read_text()
    server = conf.split("listen 443 ssl;", 1)[1]
    upload = re.search(r'location ~ "(\^/api/uploads/[^"]+)" \{(.*?)\}', server, re.S)
    assert upload, "no upload chunk location"
    outside = server.replace(upload.group(0), "")
    sizes = re.findall(r"client_max_body_size (\w+);", outside)
    web = WebSettings()
    assert sizes and all(_nginx_size(s) <= web.max_body_bytes for s in sizes)
    (chunk,) = re.findall(r"client_max_body_size (\w+);", upload.group(2))
    assert _nginx_size(chunk) == web.max_upload_chunk_bytes
    assert "proxy_request_buffering off;" in upload.group(2)
    # nginx's location matches exactly the requests the app lets be large
    path = upload.group(1)
    assert re.match(path, "/api/uploads/" + "a" * 32)
    assert not re.match(path, "/api/uploads/" + "a" * 32 + "/complete")
    (rule,) = BODY_LIMITS
    assert rule.method == "PUT" and rule.path.match("/api/uploads/" + "a" * 32)
    for directive in ("limit_conn proctor_per_client", "client_header_timeout"):
        assert directive in server, directive


def test_the_server_believes_forwarded_headers_only_from_its_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROCTOR_SECRET_KEY", "x" * 48)
    settings = load_settings(DEPLOY / "server" / "proctor.toml")
    assert settings.web.trusted_proxies == ["127.0.0.1"]  # nginx, on the same host
    assert load_settings().web.trusted_proxies == []  # by default: nobody


# -- the deploy guide ----------------------------------------------------------------

GUIDE = DEPLOY / "README.md"
ROOT = DEPLOY.parent
# paths the guide names that another change adds; an entry whose file exists
# fails the test below, so that it is taken out
PENDING_PATHS: set[str] = set()


def _guide_text() -> str:
    # code spans wrap across lines in the Markdown source: one space for any run
    return " ".join(GUIDE.read_text().split())


def _guide_commands() -> list[list[str]]:
    text = _guide_text()
    spans = re.findall(r"`(proctor [^`]+)`", text)
    blocks = [
        line.strip()
        for line in GUIDE.read_text().splitlines()
        if line.strip().startswith("proctor ")
    ]
    return [shlex.split(c.replace("…", "")) for c in spans + blocks]


def test_every_proctor_command_the_deploy_guide_names_exists() -> None:
    commands = _guide_commands()
    named = {" ".join(_subcommand(c)[:2]) for c in commands}
    # the steps an operator follows: a command missing here is a step that cannot be done
    assert {"station check", "station teleop", "submission reference", "station run"} <= named
    runner = CliRunner()
    for argv in commands:
        path: list[str] = []
        for w in _subcommand(argv):
            if runner.invoke(app, [*path, w, "--help"]).exit_code != 0:
                break
            path.append(w)
        assert len(path) >= 2 or path == ["serve"], argv
        help_text = runner.invoke(app, [*path, "--help"]).output
        for flag in (a.split("=")[0] for a in argv if a.startswith("--")):
            assert flag in help_text, f"{' '.join(argv)}: {flag} is not an option of {path}"


def test_every_repository_path_the_deploy_guide_names_exists() -> None:
    """A path in the guide is the repository's (``proctor/station/recovery.py``) or
    deploy/'s own (``station/station-real.toml``); files on the host
    (``/etc/…``) are the reader's to make."""
    text = _guide_text()
    extensions = "py|toml|md|rules|service|conf|yaml|example"
    # another project's file is written `owner/repo:path`, and is not looked for here
    pattern = rf"(?<![\w/.~:-])((?:[\w-]+/)+[\w.-]+\.(?:{extensions}))\b"
    paths = set(re.findall(pattern, text))
    assert "deploy/udev/99-proctor-robotiq.rules" in paths
    missing = [
        p
        for p in sorted(paths - PENDING_PATHS)
        if not (ROOT / p).is_file() and not (DEPLOY / p).is_file()
    ]
    assert not missing, missing
    arrived = [p for p in sorted(PENDING_PATHS) if (ROOT / p).is_file()]
    assert not arrived, f"{arrived} exist now: take them out of PENDING_PATHS"


def test_the_station_unit_waits_long_enough_for_a_clean_stop() -> None:
    """SIGTERM: the local API's connections close (a bounded grace), then the
    daemon stops the arm and waits for a running episode to finish before it
    closes the drivers; systemd must not kill it before, with a margin for
    closing the drivers (the arm's connection, the gripper's poller, cameras)."""
    from proctor.station.cli import API_SHUTDOWN_GRACE_S
    from proctor.station.runner import CLOSE_WAIT_S

    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / "proctor-station.service")
    timeout = float(parser.get("Service", "TimeoutStopSec"))
    assert timeout >= API_SHUTDOWN_GRACE_S + CLOSE_WAIT_S + 15.0


def test_the_station_host_holds_its_token_in_its_environment_file_only() -> None:
    """The station's gateway token: the variable the work source reads, in the
    environment file the station unit loads, empty in the example, and in no
    station config."""
    from proctor.core.station_credentials import TOKEN_ENV, TOKEN_PREFIX

    example = DEPLOY / "station" / "station.env.example"
    assigned = [
        line.split("=", 1)
        for line in example.read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    ]
    assert assigned == [[TOKEN_ENV, ""]]
    unit = (DEPLOY / "systemd" / "proctor-station.service").read_text()
    assert "EnvironmentFile=/etc/proctor/station.env" in unit
    for config in (DEPLOY / "station").glob("*.toml"):
        text = config.read_text()
        assert TOKEN_PREFIX not in text and "token =" not in text, config.name
