"""Settings: environment (``PROCTOR_*``) over one TOML config file over defaults.

Built once at the entry point (CLI command, ``create_app``) and passed down;
nothing here runs at import time. Secrets (``secret_key``, ``encryption_key``)
come only from the environment: a config file that names one is refused, so
a config file can be committed to ``deploy/`` without leaking anything.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from proctor.core.errors import ConfigError

SECRET_FIELDS = ("secret_key", "encryption_key")
_config_file: ContextVar[Path | None] = ContextVar("proctor_config_file", default=None)


class WebSettings(BaseModel):
    model_config = {"extra": "forbid"}

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    # a signed-in session ends after this long without a request (a shared
    # tablet at the robot should not stay signed in through a lunch break)...
    session_idle_minutes: int = Field(default=120, ge=1, le=7 * 24 * 60)
    # ...and this long after sign-in, however active: one working day
    session_max_hours: int = Field(default=12, ge=1, le=30 * 24)
    # creating an API token from a page session needs a sign-in at most this
    # old: a cookie left on a shared machine must not turn into a lasting token
    token_reauth_minutes: int = Field(default=10, ge=1, le=24 * 60)
    # API tokens made on the pages or the API expire after this many days unless
    # the request asks for fewer or more (at most 3650); only the server's CLI
    # (`proctor user token create --no-expiry`) mints tokens that never expire
    token_expiry_days: int = Field(default=90, ge=1, le=3650)
    # password hashes (argon2id, 64 MiB and ~0.13 s of CPU each) computed at once
    # by one server process; a sign-in that waits longer than hash_wait_s for a
    # slot gets 503 with Retry-After instead of queueing without bound
    max_concurrent_hashes: int = Field(default=4, ge=1, le=64)
    hash_wait_s: float = Field(default=5.0, gt=0, le=60)
    # send the session cookie over HTTPS only; default: on in prod, off otherwise
    secure_cookies: bool | None = None
    # the station daemon's local API that this server's operator console drives; it
    # binds to loopback only, so the console runs on the station's machine (or tunnels)
    station_url: str = "http://127.0.0.1:8100"
    # what this process serves (proctor.web.app.SURFACES): "server", everything; or
    # "station_console", on a station host, the operator console, sign-in and health
    # only, with no gateway, station API or background sweeps
    surface: Literal["server", "station_console"] = "server"
    # public result pages (released, nobody signed in) answered from memory for up
    # to this long; this process's own writes clear it at once (proctor.web.shared_cache)
    shared_cache_s: float = Field(default=2.0, ge=0, le=30)
    # how often each server process reads the database's cache generation (bumped
    # by every write, from any process): a write made elsewhere (another worker,
    # the CLI, a station) reaches this process's shared cache within about this long
    cache_check_s: float = Field(default=0.5, gt=0, le=10)
    # `proctor serve` worker processes (uvicorn); pools, request limits and hashing
    # slots above are per process
    workers: int = Field(default=1, ge=1, le=64)
    # requests the app works on at once (proctor.web.limits); beyond it, 503 with Retry-After.
    # The database pool and the worker threads are sized from it, so that no admitted
    # request can wait on a connection that another is holding while it waits for a
    # thread (the deadlock that froze the server under ~100 anonymous requests). On
    # PostgreSQL, max_connections must leave room for it plus 16 (proctor.web.limits.POOL_HEADROOM)
    max_concurrent_requests: int = Field(default=48, ge=1, le=1000)
    # requests past that limit wait their turn, first come first served, at most this
    # long (s) before the 503; at most admission_queue of them wait (the rest: 503 at
    # once), so a peak of readers is served a moment late instead of refused
    admission_wait_s: float = Field(default=5.0, ge=0, le=60)
    admission_queue: int = Field(default=512, ge=0, le=100_000)
    # filtered leaderboards computed on request (signed-in callers; the public
    # reads the documented levels stored with each snapshot) run this many at
    # once per process; beyond it, 503 with Retry-After (proctor.web.leaderboard.subset)
    subset_analyses: int = Field(default=1, ge=1, le=16)
    # filtered boards kept in memory, apart from the public pages' cache, so
    # that no number of filters can evict those
    subset_cache_entries: int = Field(default=64, ge=1, le=4096)
    # how long a request waits for a pooled database connection before it is answered
    # 503 (SQLAlchemy's default, 30 s, kept every worker stuck for the whole of it)
    db_pool_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # request bodies: JSON APIs and forms are small; only a checkpoint upload's
    # chunk (PUT /api/uploads/{id}) is large (the page sends at most 8 MiB a chunk),
    # and a station's artifact part sent through the server (scheduler.upload_part_bytes)
    max_body_bytes: int = Field(default=2**20, ge=1024, le=2**30)
    max_upload_chunk_bytes: int = Field(default=256 * 2**20, ge=64 * 1024, le=2**34)
    # a connection must have sent a request's whole header this long after it opened
    # (or after its first byte, on a kept-alive connection), else it is closed; the
    # same as uvicorn's keep-alive idle timeout. Stops slow-header clients from holding
    # sockets forever (uvicorn has no such timeout of its own)
    header_timeout_s: float = Field(default=5.0, gt=0, le=300)
    # addresses (or networks) of the reverse proxies whose X-Forwarded-For /
    # X-Forwarded-Proto are believed, e.g. ["127.0.0.1"] behind deploy/nginx on the same
    # host. Default: none, so the client address is the socket's peer (login throttling
    # counts by it, and any local process could otherwise claim any address)
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry)
            except ValueError:
                raise ValueError(
                    "each entry must be an IP address or network (e.g. 127.0.0.1 or "
                    f"10.0.0.0/24): a name or '*' would trust anyone, got {entry!r}"
                ) from None
        return value

    @field_validator("station_url")
    @classmethod
    def _loopback_station(cls, value: str) -> str:
        parts = urlsplit(value)
        if (
            parts.scheme != "http"
            or parts.hostname not in ("127.0.0.1", "localhost", "::1")
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
        ):
            raise ValueError(
                "must be an http:// origin on loopback, e.g. http://127.0.0.1:8100 (the "
                f"station's API is loopback-only), got {value!r}"
            )
        return value.rstrip("/")


class SubmissionSettings(BaseModel):
    """Checkpoint uploads and conformance checks (``proctor/web/submissions``)."""

    model_config = {"extra": "forbid"}

    # a checkpoint larger than this is refused before a byte is stored; 50 GiB
    # holds a π0-sized model with its optimizer state dropped
    max_upload_bytes: int = Field(default=50 * 2**30, ge=1)
    # archive inspection: what the archive may unpack to, in bytes and files,
    # and how much larger than the upload it may be (decompression bombs)
    max_unpacked_bytes: int = Field(default=200 * 2**30, ge=1)
    max_files: int = Field(default=100_000, ge=1)
    max_compression_ratio: float = Field(default=100.0, gt=1)
    # uploads in progress are staged here (default: data_dir/uploads)
    upload_dir: Path | None = None
    # an upload untouched this long is abandoned: its staged bytes are deleted
    upload_expiry_hours: float = Field(default=48.0, gt=0)
    # unfinished uploads one submitter may hold at once (each stages up to a checkpoint)
    max_open_uploads: int = Field(default=4, ge=1)
    # free disk an upload may not eat into (bytes): a new upload is refused when
    # its size plus what the open uploads still have to receive would leave less
    # than this free where uploads are staged (the database, logs and the
    # artifact store's copy at completion need room too)
    upload_disk_margin_bytes: int = Field(default=5 * 2**30, ge=0)
    # during a PUT, the bytes in so far are fsynced and their offset recorded
    # every this many bytes, so a server crash mid-request loses at most this
    # much of it (the client resumes from GET /api/uploads/{id}'s offset)
    upload_progress_bytes: int = Field(default=64 * 2**20, ge=2**20)
    # how a submission's conformance check is started: "subprocess" spawns a
    # `proctor submission work` process from the web server for each check it
    # can start now (within the caps below); "worker" leaves it queued for a
    # separately run `proctor submission worker`. Default: "worker" in prod (one
    # long-lived process, deploy/systemd/proctor-conformance-worker.service),
    # "subprocess" elsewhere (the demo and dev need no second process)
    conformance_dispatch: Literal["subprocess", "worker"] | None = None
    # conformance checks running at once, over every worker and web process (the
    # rest wait queued): each holds a process and a submitter's server, and a
    # checkpoint's waits for a runner host (proctor.web.submissions.queue.claim)
    max_concurrent_checks: int = Field(default=2, ge=1, le=1000)
    # of those, how many one submitter's checks may take (the owner of the policy)
    max_concurrent_checks_per_submitter: int = Field(default=1, ge=1, le=1000)
    # what one submitter may ask for in any hour (429 with Retry-After beyond;
    # counted from the database, so it holds across web workers; admins are not
    # limited): endpoints registered, uploads begun, checks asked for again
    registrations_per_hour: int = Field(default=20, ge=1)
    uploads_per_hour: int = Field(default=20, ge=1)
    rechecks_per_hour: int = Field(default=20, ge=1)
    # send the simulated cell's privileged sim/… keys with the recorded
    # observations, as the sim profile does (the demo policies need them)
    conformance_sim_keys: bool = True
    # endpoints on loopback or private networks (default: allowed only in test;
    # `proctor demo` turns it on, its policies are served on loopback). Elsewhere
    # they would let a submitter probe the server's own network through the
    # conformance worker and the gateway (proctor/core/netguard.py)
    allow_private_endpoints: bool | None = None


class SchedulerSettings(BaseModel):
    """Campaign allocation and claims (``scheduler``)."""

    model_config = {"extra": "forbid"}

    # policy wire failures (malformed replies or metadata) a policy may have
    # in one campaign as requeued ``system`` episodes; later ones are charged to
    # it (docs/methods.md §1). Read by the station's campaign work source, so set
    # it alike on every station of a campaign.
    free_protocol_faults: int = Field(default=3, ge=0, le=1000)
    # the policy gateway accepts a handle only with a live token of the station
    # holding its claim (proctor.core.station_credentials). True also accepts a
    # connection that has no token but names the claiming station's id
    # (X-Proctor-Station): a claim anyone can make, so for a closed development
    # set-up only; never in production (env = "prod" refuses it)
    trust_station_header: bool = False
    # a station on the station API says hello this often: frequent enough that a
    # silent one is noticed within a lease, rare enough to cost the server nothing
    station_heartbeat_s: float = Field(default=10.0, gt=0)
    # a claim held by a station whose token was revoked is handed back to the
    # scheduler once the station has been silent this long; a station with a live
    # token keeps its claim however long it is offline (it resumes the same run)
    claim_lease_s: float = Field(default=120.0, ge=5)
    # a run whose policy could not be reached at the station's pre-flight is skipped
    # and its slot offered again this long after (doubling with each attempt, up to
    # preflight_retry_max_s): a policy down for a while is not hammered
    preflight_retry_s: float = Field(default=300.0, gt=0)
    preflight_retry_max_s: float = Field(default=3600.0, gt=0)
    # artifacts a station host uploads (proctor.scheduler.station_uploads). The
    # largest accepted: a long episode's recordings are a few GiB, and the cap
    # bounds what one station can make the store hold with one request
    upload_max_bytes: int = Field(default=20 * 2**30, ge=1, le=5 * 2**40)
    # the part size handed out: every part but the last is this long. S3 takes
    # 5 MiB..5 GiB (a production server on S3 is refused less); larger parts
    # mean fewer requests, smaller ones less to resend
    upload_part_bytes: int = Field(default=8 * 2**20, ge=64 * 2**10, le=5 * 2**30)
    # a presigned part URL works this long; a station that resumes later asks
    # for the plan again and gets fresh ones
    upload_url_expiry_s: int = Field(default=3600, ge=60, le=7 * 86400)
    # the web app's sweep (proctor.scheduler.station_sweeps) runs this often: it
    # releases lapsed claims when no station calls, and aborts abandoned uploads.
    # 0 turns it off (the lease is then checked only on hello and claim)
    station_sweep_s: float = Field(default=30.0, ge=0, le=86400)
    # an upload still open this long after it was begun is abandoned: the sweep
    # aborts it in the store and a station that comes back begins it afresh.
    # Counted from the begin (the row keeps no later activity), so well above
    # the time one artifact takes to send
    upload_abandon_s: int = Field(default=86400, ge=3600, le=30 * 86400)

    @field_validator("station_sweep_s")
    @classmethod
    def _sweep_period(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("at least 1 second, or 0 to turn the sweep off")
        return value


class RunnerSettings(BaseModel):
    """The inference host's checkpoint runners (``proctor/runner``): where
    environments and unpacked checkpoints live, how servers are reached, and
    the limits every sandboxed server runs under."""

    model_config = {"extra": "forbid"}

    # environments, one per (framework, version, requirements hash), reused
    # across checkpoints and runs (default: ~/.cache/proctor/runner-envs, shared
    # by every data folder on the host: a LeRobot environment is several GB)
    env_dir: Path | None = None
    # unpacked checkpoints and downloaded archives (default: data_dir/runner)
    work_dir: Path | None = None
    # each running server's folder: its wire socket, temp and output log. A
    # Unix socket's path has at most 107 bytes, so keep it short
    # (default: /tmp/proctor-runner-<uid>)
    runtime_dir: Path | None = None
    # an environment build (pip) that takes longer than this is stopped: setup_crash
    build_timeout_s: float = Field(default=1800.0, gt=0)
    # from the sandbox's start to the server answering the wire; a cold start
    # loads the model, which can take minutes
    ready_timeout_s: float = Field(default=600.0, gt=0)
    # a ready server nothing has used this long is stopped (it starts again on demand)
    idle_stop_s: float = Field(default=900.0, gt=0)
    # one server life may not exceed this (then wall_clock_exceeded)
    max_lifetime_s: float = Field(default=24 * 3600.0, gt=0)
    # a reply slower than this ends the server with latency_exceeded
    latency_budget_s: float = Field(default=30.0, gt=0)
    # the worker writes its heartbeat this often; a row silent for
    # stale_after_s is the platform's fault (runner_unresponsive) and is served again
    # (at most 5 s: the scheduler stops handing out a ready server whose host
    # has been silent for 15 s, proctor.core.runner_rows.SILENT_AFTER_S)
    heartbeat_s: float = Field(default=2.0, gt=0, le=5.0)
    stale_after_s: float = Field(default=30.0, gt=0)
    # where the worker listens for the gateway and the checker (one port per
    # server, from the range), and the host name they use to reach it
    bind_host: str = "127.0.0.1"
    advertise_host: str | None = None
    port_range: tuple[int, int] = (18200, 18999)
    # the sandbox's limits: memory (bytes), processes, CPU seconds, open files.
    # memory_bytes unset: three quarters of the host's memory shared by
    # max_servers (proctor.runner.worker.default_memory_bytes), so that every
    # server at its limit still fits beside the worker and the system
    memory_bytes: int | None = Field(default=None, ge=64 * 2**20)
    max_processes: int = Field(default=256, ge=8)
    cpu_seconds: int = Field(default=24 * 3600, ge=1)
    max_open_files: int = Field(default=1024, ge=64)
    # servers on this host at once (each holds a model in memory)
    max_servers: int = Field(default=2, ge=1)
    # GPUs to place servers on ("0,1"); empty: none, every server on the CPU
    gpus: str = ""
    # the cgroup hierarchy the sandbox's limits are made in: "auto" finds one
    # this process may write (v2, then v1), "none" uses rlimits alone
    cgroups: Literal["auto", "v2", "v1", "none"] = "auto"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PROCTOR_", env_nested_delimiter="__", extra="forbid"
    )

    env: Literal["dev", "test", "prod"] = "dev"
    data_dir: Path = Path("proctor-data")
    # default: a SQLite file under data_dir
    database_url: str | None = None
    # a local folder or an fsspec URL (s3://bucket/prefix); default: data_dir/artifacts
    artifacts: str | None = None
    # the S3 endpoint as station hosts reach it (https://s3.lab.example.org), when
    # it is not the server's own (AWS_ENDPOINT_URL, often a name inside the
    # server's network): the presigned part URLs are signed for this host, since
    # SigV4 signs the Host and a URL rewritten afterwards would be refused.
    # Default: the server's endpoint. Only for an s3:// artifact store
    artifacts_public_endpoint: str | None = None
    web: WebSettings = Field(default_factory=WebSettings)
    submissions: SubmissionSettings = Field(default_factory=SubmissionSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    # the station daemon's log level (`proctor station run`; proctor.station.logs)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # signs session cookies; from the environment only
    secret_key: SecretStr | None = None
    # encrypts submitters' endpoint API keys at rest; from the environment only
    encryption_key: SecretStr | None = None
    # the station host's local API key file (proctor.core.station_key), read by the
    # station daemon (which makes it, mode 0600, when absent) and by the operator
    # console that drives it: the two must run as the account that owns it.
    # Default: <data_dir>/station-api.key. A path, not a secret: the key is in the file
    station_key_file: Path | None = None

    @field_validator("artifacts_public_endpoint")
    @classmethod
    def _endpoint_origin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _http_origin(value):
            raise ValueError(
                "must be an http(s) origin with no path or credentials, e.g. "
                f"https://s3.lab.example.org or http://10.0.0.5:9000, got {value!r}"
            )
        return value.rstrip("/")

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, value: object) -> object:
        # PROCTOR_LOG_LEVEL=info reads as INFO
        return value.upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlFileSource(settings_cls))

    @model_validator(mode="after")
    def _fill_defaults(self) -> Settings:
        if self.database_url is None:
            self.database_url = embedded_database_url(self.data_dir)
        if self.artifacts is None:
            self.artifacts = str((self.data_dir / "artifacts").resolve())
        if self.station_key_file is None:
            self.station_key_file = (self.data_dir / "station-api.key").resolve()
        if self.env == "prod" and self.secret_key is None:
            raise ValueError("PROCTOR_SECRET_KEY must be set when PROCTOR_ENV=prod")
        if self.submissions.conformance_dispatch is None:
            # a server runs one long-lived worker (bounded, outside the web
            # process); dev and the demo start checks from the web app itself
            self.submissions.conformance_dispatch = "worker" if self.env == "prod" else "subprocess"
        if self.scheduler.upload_part_bytes > self.web.max_upload_chunk_bytes:
            # a part through the server is one request body, bounded by the web's limit
            raise ValueError(
                "scheduler.upload_part_bytes: at most web.max_upload_chunk_bytes "
                f"({self.web.max_upload_chunk_bytes})"
            )
        if (
            self.env == "prod"
            and self.artifacts.startswith("s3://")
            and self.scheduler.upload_part_bytes < 5 * 2**20
        ):
            raise ValueError(
                "scheduler.upload_part_bytes: S3 refuses parts under 5 MiB (5242880 bytes)"
            )
        if self.artifacts_public_endpoint is not None and not self.artifacts.startswith("s3://"):
            raise ValueError(
                "artifacts_public_endpoint: only for an s3:// artifact store (with a "
                "local one, stations send their parts through the server)"
            )
        if self.env == "prod" and self.scheduler.trust_station_header:
            raise ValueError(
                "scheduler.trust_station_header: stations prove who they are with "
                "their token when PROCTOR_ENV=prod"
            )
        return self

    @property
    def db_url(self) -> str:
        assert self.database_url is not None  # filled by the validator
        return self.database_url

    @property
    def artifacts_location(self) -> str:
        assert self.artifacts is not None  # filled by the validator
        return self.artifacts

    @property
    def station_key_path(self) -> Path:
        assert self.station_key_file is not None  # filled by the validator
        return self.station_key_file


def _http_origin(value: str) -> bool:
    """``http(s)://host[:port]``: no path, query, fragment or credentials."""
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.username is None
        and parts.path in ("", "/")
        and not parts.query
        and not parts.fragment
    )


def embedded_database_url(data_dir: Path) -> str:
    """The embedded default: an SQLite file in the data folder, used when no
    ``database_url`` is configured (the only database a command migrates
    on its own: ``proctor.core.db.opening``). A file left under the name one
    release gave it by mistake is moved back: ``proctor.core.db.renamed``."""
    return f"sqlite:///{(data_dir / 'proctor.db').resolve()}"


class _TomlFileSource(PydanticBaseSettingsSource):
    """Reads the config file named by ``load_settings`` or ``PROCTOR_CONFIG``."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        path = _config_file.get()
        if path is None and os.environ.get("PROCTOR_CONFIG"):
            path = Path(os.environ["PROCTOR_CONFIG"])
        self._data = read_config_file(path) if path is not None else {}

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse the TOML config file; refuse secrets in it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
    for key in SECRET_FIELDS:
        if key in data:
            raise ConfigError(
                f"config file {path}: '{key}' is a secret; set PROCTOR_{key.upper()} "
                "in the environment instead"
            )
    return data


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings for an entry point; errors become one-line ConfigErrors."""
    token = _config_file.set(config_file)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from None
    finally:
        _config_file.reset(token)
