"""What a wire dialect is: the base every dialect module subclasses.

A ``Dialect`` is stateless (one instance per name, in the registry); a
``Session`` is one connection's dialect state, from the handshake to the
close. The defaults are the openpi wire's where one is natural; a dialect
overrides what differs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import numpy as np

from proctor.core.domain import EndpointDialect
from proctor.policywire.wire.spec import ActionSpace, ServerInfo

if TYPE_CHECKING:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import ClientConnection

    from proctor.core.clock import Clock
    from proctor.policywire.wire.proprio import Proprio


@dataclass(frozen=True)
class Decoded:
    """A reply's action chunk, as the dialect decoded it."""

    rows: np.ndarray  # (H, space.width) float64
    space: ActionSpace
    # True: row k is due k control steps after the request went out, so a
    # real-time player skips the rows already past when the reply arrives
    timed_from_call: bool = False
    # what the server says it spent on the call, in milliseconds under its own
    # key names (``read_server_timing``); for reporting only, never trusted for
    # anything the station decides
    server_timing: dict[str, float] | None = None


# a phase reported longer than this is a clock bug, not a measurement
MAX_SERVER_TIMING_MS = 3_600_000.0


def read_server_timing(value: Any, known: frozenset[str]) -> dict[str, float] | None:
    """A server's own timing map → the ``known`` phases it reports, in ms.

    The server chose these numbers, so each is checked (a real number, finite,
    0 … ``MAX_SERVER_TIMING_MS``) and one that fails is dropped, as are keys the
    dialect does not name; a malformed map is no timing at all (None), never a
    malformed reply: timing is reported, not acted on."""
    if not isinstance(value, Mapping):
        return None
    out: dict[str, float] = {}
    for key, number in value.items():
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        if not isinstance(name, str) or name not in known:
            continue
        if isinstance(number, bool | np.bool_) or not isinstance(
            number, int | float | np.integer | np.floating
        ):
            continue
        ms = float(number)
        if math.isfinite(ms) and 0.0 <= ms <= MAX_SERVER_TIMING_MS:
            out[name] = ms
    return out or None


class Session:
    """One connection's dialect state: what is sent and how replies are read."""

    def __init__(self, info: ServerInfo) -> None:
        self.info = info

    def reset_message(self, session_id: str) -> dict[str, Any] | None:
        """The message that resets the server at an episode's start (None: none)."""
        return None

    def request(self, observation: dict[str, Any], session_id: str) -> dict[str, Any]:
        """The frame an observation travels in."""
        return observation

    def decode(self, raw: Any, observation: dict[str, Any]) -> Decoded:
        """A received frame → its chunk. Raises ``ProtocolError`` (the reply is
        malformed) or ``ErrorReply`` (the server answered with an error text:
        the connection is closed)."""
        raise NotImplementedError

    def end_message(self) -> dict[str, Any] | None:
        """The frame that ends the session before the socket closes (None: none)."""
        return None

    def is_end_ack(self, frame: Any) -> bool:
        """Whether a decoded frame acknowledges ``end_message``."""
        return False

    @property
    def action_space(self) -> ActionSpace | None:
        """The session's action space; None while the replies have not named it."""
        return self.info.action_space


class Handshake(Protocol):
    """What a dialect's handshake needs from the client that opened the
    connection (``PolicyClient`` is one): its timeouts and clock, its reading
    of the metadata, and its words for a connection closed early. A port, so
    that the dialects never import the client."""

    @property
    def connect_timeout_s(self) -> float: ...

    @property
    def status_timeout_s(self) -> float: ...

    @property
    def load_timeout_s(self) -> float: ...

    @property
    def control_hz(self) -> float: ...

    @property
    def wall(self) -> Clock: ...

    def read_metadata(self, metadata: Any) -> ServerInfo: ...

    def closed_early(self, exc: ConnectionClosed, before: str) -> Exception: ...


class Dialect:
    """A wire's client face: what the station needs to speak it. Its other
    faces, registered under the same name, sit above the protocol's base: its
    conformance checks (``proctor.policywire.conformance.dialects``) and its
    test and demo server (``proctor.policywire.serving.dialects``)."""

    name: ClassVar[str]
    # the faces beyond this one that the dialect has, registered under its name
    # ("conformance", "serving"); tests/policywire/test_dialects.py holds every
    # claimed face to its registry
    faces: ClassVar[frozenset[str]] = frozenset()
    # how a key is sent: "Authorization: <scheme> <key>"
    auth_scheme: ClassVar[str] = "Api-Key"
    # detectable from the metadata when no dialect is named: lower ranks are
    # asked first, the highest is the fallback (None: must be named)
    detect_rank: ClassVar[int | None] = None
    # what ``dial_url`` adds to a URL, for the message when that makes it
    # too long (None: the URL is used as given)
    url_path_text: ClassVar[str | None] = None
    # the server sends a message as soon as a connection opens (openpi's
    # metadata): a server is ready when it arrives, not just the handshake
    greets_on_connect: ClassVar[bool] = True
    # whether the observation's keys number the exterior cameras
    # (``observation/exterior_image_{i}_left``), so an endpoint's numbering applies
    numbers_exterior_cameras: ClassVar[bool] = False
    # whether a reply's rows may be velocities, whose units (``units.py``) the
    # metadata declares or an endpoint selects; a wire of positions only has none
    velocity_actions: ClassVar[bool] = False
    # whether a reply's rows are timed from its request (the player starts at the
    # row due when the reply arrives) rather than played from the first row
    chunk_timed_from_call: ClassVar[bool] = False

    @property
    def ident(self) -> EndpointDialect:
        """The name as ``ServerInfo.dialect`` and a submission carry it (a dialect
        that is not in ``EndpointDialect``, such as a test's, by its bare name)."""
        try:
            return EndpointDialect(self.name)
        except ValueError:
            return cast(EndpointDialect, self.name)

    # -- the endpoint -------------------------------------------------------------
    def dial_url(self, url: str) -> str:
        """The URL as stored and dialled; ``ValueError`` (its message names what
        is wrong) when the dialect cannot use it."""
        return url

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        if not api_key:
            return {}
        return {"Authorization": f"{self.auth_scheme} {api_key}"}

    # -- the metadata ---------------------------------------------------------------
    def claims(self, metadata: Mapping[Any, Any]) -> bool:
        """Whether unnamed metadata is this dialect's (only asked of detectable ones)."""
        return False

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        raise NotImplementedError

    def public(self, info: ServerInfo) -> dict[str, Any]:
        """What ``ServerInfo.public`` adds for this dialect."""
        return {}

    # -- observations -----------------------------------------------------------------
    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        """Observation key → the camera whose (fitted) frame it carries."""
        raise NotImplementedError

    def cameras(self, info: ServerInfo) -> tuple[str, ...]:
        """The cameras a session needs, in the order they are named."""
        return tuple(dict.fromkeys(self.image_keys(info).values()))

    def encode(
        self,
        info: ServerInfo,
        *,
        proprio: Proprio,
        prompt: str,
        images: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        """The observation (without privileged keys); ``images``: camera → fitted frame."""
        raise NotImplementedError

    # -- the session --------------------------------------------------------------------
    def open(self, client: Handshake, ws: ClientConnection) -> Session:
        """Run the handshake on a fresh connection (``client`` gives the timeouts
        and maps failures to ``PolicyError``s); closes ``ws`` when it fails."""
        raise NotImplementedError

    def session(self, info: ServerInfo) -> Session:
        """The session for a server whose metadata another dialect's handshake
        read (a detectable dialect: detection runs after the openpi handshake)."""
        raise NotImplementedError
