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
    path = DEPLOY / "station" / name
    config = load_station_config(path)
    assert config.name


def test_the_real_station_config_builds_valid_driver_configs() -> None:
    """Every driver table of [real] is a valid config of its driver, checked
    without connecting to any hardware."""
    from proctor.station.drivers.arm.base import ARMS
    from proctor.station.drivers.camera.base import CAMERAS
    from proctor.station.drivers.gripper.base import GRIPPERS
    from proctor.station.profiles.real import driver_config

    section = tomllib.loads((DEPLOY / "station" / "station-real.toml").read_text())["real"]
    arm_cls = ARMS.get("franky")
    assert driver_config(arm_cls.config_class, dict(section["arm"]), "real.arm").host
    gripper_cls = GRIPPERS.get("robotiq_2f85")
    assert driver_config(gripper_cls.config_class, dict(section["gripper"]), "real.gripper").port
    for cam_name, table in section["cameras"].items():
        table = dict(table)
        cam_cls = CAMERAS.get(table.pop("driver"))
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
    """Small bodies everywhere, large only on the locations of checkpoint
    upload chunks and station artifact parts, and the same split as the
    app's own limits (proctor/web/limits.py)."""
    from proctor.core.settings import WebSettings
    from proctor.web.limits import BODY_LIMITS

    conf = (DEPLOY / "nginx" / "proctor.conf").read_text()
    server = conf.split("listen 443 ssl;", 1)[1]
    large = [
        m
        for m in re.finditer(r'location ~ "([^"]+)" \{(.*?)\}', server, re.S)
        if "client_max_body_size" in m.group(2)
    ]
    outside = server
    for m in large:
        outside = outside.replace(m.group(0), "")
    sizes = re.findall(r"client_max_body_size (\w+);", outside)
    web = WebSettings()
    assert sizes and all(_nginx_size(s) <= web.max_body_bytes for s in sizes)
    for m in large:
        (chunk,) = re.findall(r"client_max_body_size (\w+);", m.group(2))
        assert _nginx_size(chunk) == web.max_upload_chunk_bytes
        assert "proxy_request_buffering off;" in m.group(2)
    # nginx's locations match exactly the requests the app lets be large
    examples = {
        "/api/uploads/" + "a" * 32: "/api/uploads/" + "a" * 32 + "/complete",
        "/api/station/v1/uploads/Ab3_x-9zQw/parts/12": "/api/station/v1/uploads/Ab3_x-9zQw",
    }
    assert len(large) == len(BODY_LIMITS) == len(examples)
    for big, small in examples.items():
        assert [m for m in large if re.match(m.group(1), big)], big
        assert not [m for m in large if re.match(m.group(1), small)], small
        (rule,) = [r for r in BODY_LIMITS if r.path.match(big)]
        assert rule.method == "PUT" and rule.limit(web) == web.max_upload_chunk_bytes
        assert not [r for r in BODY_LIMITS if r.path.match(small)]
    for directive in ("limit_conn proctor_per_client", "client_header_timeout"):
        assert directive in server, directive


def test_nginx_limits_filtered_leaderboards_per_address() -> None:
    """Security review round three, [N2]: a query naming any filter the app
    takes is keyed by the client's address (the plain board by "", which
    limit_req leaves alone), and the location of the leaderboard page and its
    JSON applies that zone."""
    from proctor.analysis.subsets import FILTERS

    conf = (DEPLOY / "nginx" / "proctor.conf").read_text()
    (source, var) = re.findall(r'map "([^"]+)" (\$proctor_filter_client) \{', conf)[0]
    assert sorted(re.findall(r"\$arg_(\w+)", source)) == sorted(FILTERS)
    block = conf.split(f'map "{source}" {var} {{', 1)[1].split("}", 1)[0]
    assert re.search(r'""\s+"";', block) and "default $binary_remote_addr;" in block
    zone = re.search(rf"limit_req_zone \{var} zone=(\w+):\w+ rate=(\d+)r/m;", conf)
    assert zone is not None and 0 < int(zone.group(2)) <= 60
    server = conf.split("listen 443 ssl;", 1)[1]
    limited = [
        m
        for m in re.finditer(r'location ~ "([^"]+)" \{(.*?)\}', server, re.S)
        if f"limit_req zone={zone.group(1)}" in m.group(2)
    ]
    assert len(limited) == 1
    pattern, body = limited[0].group(1), limited[0].group(2)
    for path in ("/leaderboard/12", "/api/leaderboard/12"):
        assert re.match(pattern, path), path
    for path in ("/leaderboard/12/policies/arm%20A", "/api/leaderboard/12/episodes", "/"):
        assert not re.match(pattern, path), path
    assert "proxy_pass http://proctor_app;" in body and "X-Forwarded-For" in body


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
    from proctor.station.episode_runner import CLOSE_WAIT_S

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


# -- a station host holds no server secrets ---------------------------------------------

# what would let a station host read the database or the store directly
SERVER_SECRETS = re.compile(
    r"PROCTOR_DATABASE_URL|PROCTOR_DB_URL|database_url|db_url|postgresql|sqlite:|"
    r"PROCTOR_ARTIFACTS|artifacts\s*=|s3://|AWS_|aws_|MINIO|endpoint_url|"
    r"PROCTOR_SECRET_KEY|PROCTOR_ENCRYPTION_KEY|proctor\.env\b|proctor\.toml\b"
)


# names a station host file may hold as its own: the console signs its cookies
# with a key made on the host, never the server's
HOST_OWN = {"console.env.example": {"PROCTOR_SECRET_KEY"}}


def _station_host_files() -> list[Path]:
    """What a station host is given: its configs (the daemon's and the
    console's), their environment files and both units."""
    station = DEPLOY / "station"
    return [
        *sorted(station.glob("*.toml")),
        station / "station.env.example",
        station / "console.env.example",
        DEPLOY / "systemd" / "proctor-station.service",
        DEPLOY / "systemd" / "proctor-console.service",
    ]


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / name)
    return parser


def _unit_environment(name: str) -> tuple[list[str], list[str]]:
    """The unit's ``Environment=`` assignments and ``EnvironmentFile=`` paths
    (systemd allows each key many times; configparser keeps the last, so the
    lines are read as text)."""
    lines = (DEPLOY / "systemd" / name).read_text().splitlines()
    values = [ln.split("=", 1)[1].strip() for ln in lines if "=" in ln and not ln.startswith("#")]
    keys = [ln.split("=", 1)[0].strip() for ln in lines if "=" in ln and not ln.startswith("#")]
    pairs = list(zip(keys, values, strict=True))
    return (
        [v for k, v in pairs if k == "Environment"],
        [v for k, v in pairs if k == "EnvironmentFile"],
    )


@pytest.mark.parametrize("path", _station_host_files(), ids=lambda p: p.name)
def test_a_station_host_file_names_no_database_or_store_credential(path: Path) -> None:
    """A station host is a client of the server over HTTPS: nothing it is given
    names the database, the store or their credentials (comments included: an
    example that shows where a database URL would go invites one)."""
    found = set(SERVER_SECRETS.findall(path.read_text())) - HOST_OWN.get(path.name, set())
    assert not found, f"{path.name}: {sorted(found)}"


def test_the_console_on_a_station_host_runs_on_the_hosts_own_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The console's unit reads its own config and its own cookie key; the
    config names no database, so the console's is the data folder's SQLite
    file (its operators are accounts made on the host)."""
    from proctor.core.settings import embedded_database_url

    environment, files = _unit_environment("proctor-console.service")
    assert files == ["/etc/proctor/console.env"]
    assert environment == ["PROCTOR_CONFIG=/etc/proctor/console.toml"]
    argv = shlex.split(_unit("proctor-console.service").get("Service", "ExecStart"))
    assert _subcommand(argv) == ["serve"] and "--migrate" in argv
    example = DEPLOY / "station" / "console.env.example"
    assigned = [
        line.split("=", 1)
        for line in example.read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    ]
    assert assigned == [["PROCTOR_SECRET_KEY", ""]]
    for key in ("PROCTOR_ENV", "PROCTOR_DATABASE_URL", "PROCTOR_DB_URL", "PROCTOR_ARTIFACTS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PROCTOR_SECRET_KEY", "h" * 48)  # the host's own, from console.env
    settings = load_settings(DEPLOY / "station" / "console.toml")
    assert settings.env == "prod"
    assert settings.db_url == embedded_database_url(settings.data_dir)
    assert not settings.artifacts_location.startswith("s3://")
    station = tomllib.loads((DEPLOY / "station" / "station-real.toml").read_text())
    assert settings.web.station_url == f"http://127.0.0.1:{station['api']['port']}"
    # the console alone: no leaderboard, station API or gateway on the robot's machine
    assert settings.web.surface == "station_console"


def test_the_console_and_the_daemon_share_the_hosts_station_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon's local API answers only requests carrying the host's station
    key (review finding [N1]): the deployed console and daemon must read the
    same key file, and run as the account that owns it (the file is 0600)."""
    for key in ("PROCTOR_ENV", "PROCTOR_DATA_DIR", "PROCTOR_STATION_KEY_FILE", "PROCTOR_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PROCTOR_SECRET_KEY", "h" * 48)  # the console's own, from console.env
    console = load_settings(DEPLOY / "station" / "console.toml")
    monkeypatch.delenv("PROCTOR_SECRET_KEY")
    environment, _ = _unit_environment("proctor-station.service")
    for assignment in environment:  # the daemon reads no config file: its unit's environment
        name, value = assignment.split("=", 1)
        monkeypatch.setenv(name, value)
    daemon = load_settings()
    assert daemon.station_key_path == console.station_key_path
    assert console.station_key_path == Path("/var/lib/proctor/station-api.key")
    units = [_unit(f"proctor-{u}.service") for u in ("station", "console")]
    assert {(u.get("Service", "User"), u.get("Service", "Group")) for u in units} == {
        ("proctor", "proctor")
    }


def test_the_station_unit_takes_its_token_from_its_environment_file_only() -> None:
    from proctor.core.station_credentials import TOKEN_ENV

    environment, files = _unit_environment("proctor-station.service")
    # one environment file, the station's own, and nothing the server's
    assert files == ["/etc/proctor/station.env"]
    assert not [e for e in environment if e.startswith(TOKEN_ENV)]
    assert not [e for e in environment if e.split("=", 1)[0] == "PROCTOR_CONFIG"]
    # the daemon's ExecStart names its config and no server setting
    for key in ("ExecStartPre", "ExecStart"):
        argv = shlex.split(_unit("proctor-station.service").get("Service", key))
        assert "--config" in argv and TOKEN_ENV not in " ".join(argv), key


def test_the_real_station_reaches_the_server_through_its_uplink_only() -> None:
    """The station host's config names the server's HTTPS origin and a campaign,
    and takes no work from a source that reads the database."""
    raw = tomllib.loads((DEPLOY / "station" / "station-real.toml").read_text())
    uplink = raw["uplink"]
    assert uplink["server"].startswith("https://") and uplink["server"].count("/") == 2
    assert uplink["campaign"] and float(uplink["heartbeat_s"]) > 0
    assert "work" not in raw  # the direct-database work source is not a station host's


def test_the_server_still_holds_the_store_credentials() -> None:
    """What the station host gave up, the server keeps: its environment example
    and the compose stack carry the S3 keys and endpoint the presigned URLs are
    signed with."""
    names = (DEPLOY / "server" / "proctor.env.example").read_text()
    assert "AWS_ACCESS_KEY_ID=" in names and "AWS_SECRET_ACCESS_KEY=" in names
    env = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())["x-proctor"][
        "environment"
    ]
    assert env["PROCTOR_ARTIFACTS"].startswith("s3://")
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"} <= set(env)
    _, files = _unit_environment("proctor-web.service")
    assert "/etc/proctor/proctor.env" in files


def test_the_spacemouse_rule_names_the_drivers_devices() -> None:
    """deploy/udev/99-proctor-spacemouse.rules opens exactly the SpaceMice the
    teleop driver looks for (hidraw is root-only by default)."""
    from proctor.station.drivers.input.spacemouse_hid import (
        LOGITECH_SPACE_PRODUCTS,
        VENDOR_3DCONNEXION,
        VENDOR_LOGITECH,
    )

    rules = [
        dict(re.findall(r'ATTRS\{(idVendor|idProduct)\}=="([0-9a-f]{4})"', line))
        for line in (DEPLOY / "udev" / "99-proctor-spacemouse.rules").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert {"idVendor": f"{VENDOR_3DCONNEXION:04x}"} in rules
    logitech = {int(r["idProduct"], 16) for r in rules if r["idVendor"] == f"{VENDOR_LOGITECH:04x}"}
    assert logitech == set(LOGITECH_SPACE_PRODUCTS)
    assert all("idProduct" in r for r in rules if r["idVendor"] == f"{VENDOR_LOGITECH:04x}")
