"""The station's policy client: one WebSocket connection per episode.

Errors never carry the policy's URL or anything the server said about
itself: in a campaign the URL is a sealed handle and a server's error text
may name the policy, so messages describe what went wrong in the station's
own words.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.frames import CloseCode
from websockets.sync.client import ClientConnection

from proctor.core.clock import Clock, MonotonicClock
from proctor.core.domain import EndpointDialect
from proctor.core.netguard import Pinned, connect_websocket
from proctor.policywire import dialects
from proctor.policywire.dialects.base import Session
from proctor.policywire.handshake import parse_metadata
from proctor.policywire.wire import codec
from proctor.policywire.wire.spec import (
    ActionSpace,
    ErrorReply,
    ProtocolError,
    ServerInfo,
    first_due_row,
)


class PolicyError(RuntimeError):
    """Talking to the policy failed; the message is safe to show and store."""


class PolicyUnavailable(PolicyError):
    """Could not connect, or the server sent no metadata."""


class PolicyTimeout(PolicyError):
    pass


class PolicyDisconnected(PolicyError):
    # the close code the server sent, if any; only the submitter's own
    # conformance report repeats it (the message names an application code's range)
    close_code: int | None = None


class PolicyProtocolError(PolicyError):
    pass


@dataclass(frozen=True)
class Reply:
    actions: np.ndarray  # (H, D) float64
    latency_s: float  # wall clock, request sent → reply decoded
    t_request: float  # wall clock when the request went out
    space: ActionSpace  # the space the rows are in
    # True: the rows are timed from the request (Positronic's waypoints), so a
    # real-time player starts at the row now due; False: at the first row
    timed_from_call: bool = False
    # what the server says the call cost it, in ms by its own key names (openpi's
    # server_timing, Positronic's timing), validated by the dialect; None: it said
    # nothing. Reported beside latency_s, never used to decide anything
    server_timing: dict[str, float] | None = None

    def first_row(self, elapsed_s: float, control_hz: float) -> int:
        """The row playback starts at when the reply is played ``elapsed_s``
        after its request went out, on a real-time clock."""
        if not self.timed_from_call:
            return 0
        return first_due_row(elapsed_s, control_hz, len(self.actions))


def _close_code_text(code: int | None) -> str:
    """A close code as the station reports it. The standard codes (1000–2999)
    mean what the WebSocket protocol says; 3000–4999 are the server's own
    choice, so the number could stand for a team: only the range is named."""
    if code is not None and 3000 <= code <= 4999:
        return "an application close code, 3000–4999"
    return f"close code {code}"


class PolicyClient:
    def __init__(
        self,
        url: str,
        *,
        dialect: EndpointDialect | None = None,
        headers: dict[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        default_image_size: tuple[int, int] = (224, 224),
        exterior_cameras: int = 1,
        exterior_numbering: int | None = None,
        action_units: str | None = None,
        max_message_bytes: int = 64 * 2**20,
        wall: Clock | None = None,
        control_hz: float = 15.0,
        status_timeout_s: float = 30.0,
        load_timeout_s: float = 600.0,
        pinned: Pinned | None = None,
    ) -> None:
        self._url = url
        # a submitter's server as the conformance worker judged it (proctor.core.netguard)
        self._pinned = pinned
        self._dialect = dialect
        self._headers = dict(headers or {})
        self.connect_timeout_s = connect_timeout_s
        self._default_image_size = default_image_size
        self._exterior_cameras = exterior_cameras
        # the endpoint's choice of exterior camera numbering (None: the station's default)
        self._exterior_numbering = exterior_numbering
        # the endpoint's choice of action units (None: as the server's metadata reads)
        self._action_units = action_units
        # a frame announcing more is refused from its header, before its payload is read
        self._max_message_bytes = max_message_bytes
        # latency and timeouts are wall-clock matters even when the cell runs on a virtual clock
        self.wall = wall or MonotonicClock()
        self._ws: ClientConnection | None = None
        self.info: ServerInfo | None = None
        self.session_id = uuid.uuid4().hex
        self.calls = 0
        # the last reply's server-reported timing (``Reply.server_timing``)
        self.last_server_timing: dict[str, float] | None = None
        # Positronic: the chunk's schedule is sampled on the station's control grid;
        # a model still loading sends a status at least every status_timeout_s
        self.control_hz = control_hz
        self.status_timeout_s = status_timeout_s
        self.load_timeout_s = load_timeout_s
        # the dialect's state for this connection (``proctor/policywire/dialects``)
        self._session: Session | None = None

    def __repr__(self) -> str:  # never the URL
        return f"PolicyClient(dialect={self.info.dialect if self.info else '?'})"

    # -- lifecycle ----------------------------------------------------------
    def connect(self) -> ServerInfo:
        try:
            # the URL as given: a Positronic server's session path is added where an
            # endpoint enters (registration, the CLI), since a gateway URL has its own.
            # Entered as a context manager (what websockets ≥ 17.1 asks for); closed in
            # close(). A redirect is a failed handshake: it would lead to a host nobody chose
            ws = connect_websocket(
                self._url,
                pinned=self._pinned,
                open_timeout=self.connect_timeout_s,
                close_timeout=1.0,
                max_size=self._max_message_bytes,
                compression=None,
                additional_headers=self._headers or None,
            )
        except InvalidStatus as exc:
            code = exc.response.status_code
            if code in (401, 403):  # the one refusal whose cause the station can name
                raise PolicyUnavailable(
                    f"policy endpoint refused the connection (HTTP {code}): the key it needs "
                    "is missing or was refused (through the gateway: the run's handle is "
                    "not open to this station)"
                ) from None
            raise PolicyUnavailable(f"policy endpoint unreachable (HTTP {code})") from None
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise PolicyUnavailable(f"policy endpoint unreachable ({type(exc).__name__})") from None
        # the dialect named, or (None) the handshake of those detected from the metadata
        self._session = dialects.get_or_detected(self._dialect).open(self, ws)
        self.info = self._session.info
        self._ws = ws
        return self.info

    def read_metadata(self, metadata: Any) -> ServerInfo:
        """A metadata message, read by the dialect named (None: the one it shows)."""
        return parse_metadata(
            metadata,
            dialect=self._dialect,
            default_image_size=self._default_image_size,
            n_cameras_available=self._exterior_cameras,
            exterior_numbering=self._exterior_numbering,
            action_units=self._action_units,
        )

    def closed_early(self, exc: ConnectionClosed, before: str) -> PolicyError:
        """What a connection closed during the handshake means to the station."""
        if _too_big(exc):
            return PolicyProtocolError(f"policy metadata rejected: {self._too_big_text()}")
        return PolicyUnavailable(f"policy server closed the connection before {before}")

    def _too_big_text(self) -> str:
        # the station's own words: the close reason websockets wrote quotes the frame's size
        return f"a message larger than the station's limit of {self._max_message_bytes} bytes"

    def close(self) -> None:
        ws, self._ws = self._ws, None
        session = self._session
        end = session.end_message() if session is not None else None
        if ws is not None and session is not None and end is not None:
            # a session its dialect ends in words (Positronic v3, so the model frees
            # its state at once); the acknowledgement is waited for briefly, never required
            with contextlib.suppress(Exception):
                ws.send(codec.packb(end))
                deadline = self.wall.now() + 1.0
                while (left := deadline - self.wall.now()) > 0:
                    if session.is_end_ack(codec.unpackb(ws.recv(timeout=left))):
                        break
        if ws is not None:
            # closing a broken socket: nothing left to save
            with contextlib.suppress(Exception):
                ws.close()

    # -- requests -----------------------------------------------------------
    def _exchange(self, message: dict[str, Any], timeout_s: float) -> Any:
        ws = self._ws
        if ws is None:
            raise PolicyDisconnected("not connected to the policy server")
        try:
            ws.send(codec.packb(message))
            raw = ws.recv(timeout=timeout_s)
        except TimeoutError:
            self.close()  # a late reply must not be read as the next one's
            raise PolicyTimeout(f"policy did not answer within {timeout_s:g} s") from None
        except ConnectionClosed as exc:
            self._ws = None
            if _too_big(exc):
                raise PolicyProtocolError(
                    f"malformed policy reply: {self._too_big_text()}"
                ) from None
            code = exc.rcvd.code if exc.rcvd is not None else None
            dropped = PolicyDisconnected(
                f"policy server closed the connection ({_close_code_text(code)})"
            )
            dropped.close_code = code
            raise dropped from None
        except OSError as exc:
            self._ws = None
            raise PolicyDisconnected(f"policy connection failed ({type(exc).__name__})") from None
        return raw

    def reset(self, timeout_s: float) -> None:
        """Reset the server at an episode's start, where its dialect has a reset
        (RoboArena's ``reset``; openpi servers have none)."""
        message = self._session.reset_message(self.session_id) if self._session else None
        if self.info is None or message is None:
            return
        self._exchange(message, timeout_s)  # any reply (text or msgpack) acknowledges

    def infer(self, observation: dict[str, Any], timeout_s: float) -> Reply:
        info, session = self.info, self._session
        if info is None or session is None:
            raise PolicyDisconnected("not connected to the policy server")
        message = session.request(dict(observation), self.session_id)
        self.last_server_timing = None
        t0 = self.wall.now()
        raw = self._exchange(message, timeout_s)
        try:
            decoded = session.decode(raw, observation)
        except ErrorReply as exc:
            # the server's own text is not repeated: it may name the policy
            self.close()
            raise PolicyProtocolError(str(exc)) from None
        except (codec.CodecError, ProtocolError) as exc:
            raise PolicyProtocolError(f"malformed policy reply: {exc}") from None
        self.calls += 1
        self.last_server_timing = decoded.server_timing
        return Reply(
            actions=decoded.rows,
            latency_s=self.wall.now() - t0,
            t_request=t0,
            space=decoded.space,
            timed_from_call=decoded.timed_from_call,
            server_timing=decoded.server_timing,
        )

    @property
    def action_space(self) -> ActionSpace | None:
        """The session's action space; None while a Positronic server has not named it."""
        if self.info is None or self._session is None:
            raise PolicyDisconnected("not connected to the policy server")
        return self._session.action_space


def _too_big(exc: ConnectionClosed) -> bool:
    """The station closed the connection because a frame exceeded ``max_size``."""
    return exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG


class PolicyWorker:
    """Runs a client's requests on its own thread, so a real-time control loop
    keeps sampling (and can stop the arm) while a request is in flight."""

    def __init__(self, client: PolicyClient) -> None:
        self.client = client
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="policy")
        self._lock = threading.Lock()

    def submit(
        self, observation: dict[str, Any], timeout_s: float
    ) -> concurrent.futures.Future[Reply]:
        return self._pool.submit(self.client.infer, observation, timeout_s)

    def close(self) -> None:
        self.client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
