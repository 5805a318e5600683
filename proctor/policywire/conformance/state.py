"""The conformance check's shared parts: what a finding is, what the
submitter declared, the options, and the state every check writes to.
``conformance.py`` documents the check as a whole."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from websockets.sync.client import ClientConnection

from proctor.core.domain import EndpointDialect
from proctor.core.netguard import Pinned, connect_websocket
from proctor.policywire import dialects
from proctor.policywire.client import PolicyClient
from proctor.policywire.dialects.base import Dialect
from proctor.policywire.handshake import dialect_of
from proctor.policywire.wire.spec import ActionSpace, ServerInfo

# a reply larger than this is refused by the check (a 10×8 float chunk is 640 bytes)
MAX_FRAME_BYTES = 64 * 2**20
ERROR_EXCERPT = 1500
# actions equal to this tolerance count as the same (float32 round-off)
ATOL = 1e-5
RTOL = 1e-5

COLUMNS = {
    ActionSpace.joint_position: "q1…q7 (rad), gripper",
    ActionSpace.joint_velocity: "dq1…dq7 (rad/s), gripper",
    ActionSpace.cartesian_position: "x, y, z (m), roll, pitch, yaw, gripper",
    ActionSpace.cartesian_velocity: "vx, vy, vz (m/s), wx, wy, wz (rad/s), gripper",
}


class Status(StrEnum):
    passed = "passed"
    failed = "failed"
    warning = "warning"
    skipped = "skipped"


@dataclass(frozen=True)
class Finding:
    check: str  # a stable id, e.g. "action_shape"
    title: str
    status: Status
    message: str  # advice, written to the submitter
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expectations:
    """What the submitter declared (policy.toml's [policy], or the endpoint form)."""

    action_space: ActionSpace | None = None
    chunk_length: int | None = None
    deterministic: bool = False
    # names that must not appear in the metadata: the policy's, its owner's
    identity_terms: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckOptions:
    dialect: EndpointDialect | None = None  # None: detected from the metadata
    headers: dict[str, str] = field(default_factory=dict)
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 5.0  # the station's policy_timeout_s
    # replies slower than this (90th percentile) get a warning: the arm waits meanwhile
    slow_reply_s: float = 1.0
    control_hz: float = 15.0
    open_loop_steps: int = 8
    default_image_size: tuple[int, int] = (224, 224)
    exterior_cameras: int = 1
    # the endpoint's exterior camera numbering (None: the station's default, 1)
    exterior_numbering: int | None = None
    # the action units the endpoint selects (None: as the server's metadata reads)
    action_units: str | None = None
    sim_keys: bool = True  # send the sim profile's privileged keys
    observations: int | None = None  # how many recorded observations (default: all)
    prompt: str | None = None  # default: the recording's
    # Positronic: how long a model may take to load (status frames meanwhile)
    load_timeout_s: float = 300.0
    # the address the worker resolved and judged (proctor.core.netguard): every connection
    # of the check goes there; None resolves the URL's host at each connection
    pinned: Pinned | None = None
    # whether a failed handshake says why (HTTP status, refused, timed out): the
    # worker of a multi-user site turns it off, or the report maps its network
    connect_detail: bool = True


def shape_text(a: Any) -> str:
    return str(tuple(int(n) for n in np.shape(a)))


def excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= ERROR_EXCERPT else text[:ERROR_EXCERPT] + "\n…"


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ms = np.asarray(values) * 1000.0
    return {
        "count": len(values),
        "p50": round(float(np.percentile(ms, 50)), 2),
        "p90": round(float(np.percentile(ms, 90)), 2),
        "p99": round(float(np.percentile(ms, 99)), 2),
        "max": round(float(ms.max()), 2),
    }


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RecordingClient(PolicyClient):
    """The station's client, keeping the last raw frame it received, so that
    the report can say more than the station would (the submitter owns the
    server: its own error text is theirs to read)."""

    last_raw: bytes | str | None = None

    def _exchange(self, message: dict[str, Any], timeout_s: float) -> Any:
        self.last_raw = None
        raw = super()._exchange(message, timeout_s)
        self.last_raw = raw
        return raw


class CheckState:
    """Where the checks write their findings and what they learn on the way."""

    def __init__(
        self,
        url: str,
        expect: Expectations,
        options: CheckOptions,
        progress: Callable[[str], None] | None,
    ) -> None:
        self.url = url
        self.expect = expect
        self.options = options
        self.progress = progress or (lambda _msg: None)
        self.findings: list[Finding] = []
        self.latencies: list[float] = []
        self.info: ServerInfo | None = None
        self.metadata: Any = None
        self.replies: list[dict[str, Any]] = []
        self.reply_space: ActionSpace | None = None  # what the replies' commands named
        self.context = ""  # which run of the observations is going on, for messages

    # findings
    def add(self, check: str, title: str, status: Status, message: str, **details: Any) -> Finding:
        f = Finding(check, title, status, message, details)
        self.findings.append(f)
        return f

    def failed(self) -> bool:
        return any(f.status == Status.failed for f in self.findings)

    def client(self, *, exterior_numbering: int | None = None) -> RecordingClient:
        """The station's client as a campaign would use it (``exterior_numbering``:
        another numbering than the endpoint's, to probe which one the server reads)."""
        o = self.options
        numbering = o.exterior_numbering if exterior_numbering is None else exterior_numbering
        return RecordingClient(
            self.url,
            dialect=o.dialect,
            headers=o.headers,
            connect_timeout_s=o.connect_timeout_s,
            default_image_size=o.default_image_size,
            exterior_cameras=o.exterior_cameras,
            exterior_numbering=numbering,
            action_units=o.action_units,
            control_hz=o.control_hz,
            status_timeout_s=o.connect_timeout_s,
            load_timeout_s=o.load_timeout_s,
            pinned=o.pinned,
        )

    @property
    def wire(self) -> Dialect:
        """The dialect whose checks run: the one the metadata was read as, or
        (before that) the one named (None: the detection fallback's)."""
        if self.info is not None:
            return dialect_of(self.info)
        return dialects.get_or_detected(self.options.dialect)

    # The checks' two halves (``wire``, ``exchange``)
    # define these; declared here so that a dialect's checks, which get the
    # whole check, are typed against this class.
    def judge_metadata(self, metadata: dict[Any, Any]) -> bool:
        raise NotImplementedError

    def judge_identity(self, metadata: dict[Any, Any]) -> None:
        raise NotImplementedError

    def judge_action_space(self, metadata: dict[Any, Any], info: ServerInfo) -> None:
        raise NotImplementedError

    def episode(self, context: str = "", *, warmup: int = 0) -> list[np.ndarray] | None:
        raise NotImplementedError

    def judge_chunk_length(
        self, chunks: list[np.ndarray], *, lengths: list[int] | None = None, unit: str = "actions"
    ) -> None:
        raise NotImplementedError

    def judge_values(self, chunks: list[np.ndarray], space: ActionSpace) -> None:
        raise NotImplementedError

    def judge_repeat(
        self, first: list[np.ndarray], again: list[np.ndarray], *, how: str, check: str
    ) -> None:
        raise NotImplementedError

    def raw_connect(self) -> ClientConnection:
        return connect_websocket(
            self.url,
            pinned=self.options.pinned,
            open_timeout=self.options.connect_timeout_s,
            close_timeout=1.0,
            max_size=MAX_FRAME_BYTES,
            compression=None,
            additional_headers=self.options.headers or None,
            proxy=None,
        )

    def close_quietly(self, ws: ClientConnection) -> None:
        with contextlib.suppress(Exception):
            ws.close()
