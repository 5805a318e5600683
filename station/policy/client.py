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
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.frames import CloseCode
from websockets.sync.client import ClientConnection

from proctor.domain import EndpointDialect
from proctor.netguard import Pinned, connect_websocket
from station import keys
from station.clock import Clock, MonotonicClock
from station.policy import codec, positronic
from station.policy.spec import (
    ActionSpace,
    ProtocolError,
    ServerInfo,
    extract_chunk,
    parse_metadata,
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
        max_message_bytes: int = 64 * 2**20,
        wall: Clock | None = None,
        control_hz: float = 15.0,
        status_timeout_s: float = 30.0,
        load_timeout_s: float = 600.0,
        pinned: Pinned | None = None,
    ) -> None:
        self._url = url
        # a submitter's server as the conformance worker judged it (proctor.netguard)
        self._pinned = pinned
        self._dialect = dialect
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout_s
        self._default_image_size = default_image_size
        self._exterior_cameras = exterior_cameras
        # a frame announcing more is refused from its header, before its payload is read
        self._max_message_bytes = max_message_bytes
        # latency and timeouts are wall-clock matters even when the cell runs on a virtual clock
        self.wall = wall or MonotonicClock()
        self._ws: ClientConnection | None = None
        self.info: ServerInfo | None = None
        self.session_id = uuid.uuid4().hex
        self.calls = 0
        # Positronic: the chunk's schedule is sampled on the station's control grid;
        # a model still loading sends a status at least every status_timeout_s
        self._control_hz = control_hz
        self._status_timeout = status_timeout_s
        self._load_timeout = load_timeout_s
        self._space: ActionSpace | None = None  # a Positronic session's, once seen
        self._hello: positronic.Handshake | None = None  # a Positronic session's handshake

    def __repr__(self) -> str:  # never the URL
        return f"PolicyClient(dialect={self.info.dialect.value if self.info else '?'})"

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
                open_timeout=self._connect_timeout,
                close_timeout=1.0,
                max_size=self._max_message_bytes,
                compression=None,
                additional_headers=self._headers or None,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise PolicyUnavailable(f"policy endpoint unreachable ({type(exc).__name__})") from None
        if self._dialect == EndpointDialect.positronic_v1:
            return self._positronic_handshake(ws)
        try:
            raw = ws.recv(timeout=self._connect_timeout)
        except TimeoutError:
            ws.close()
            raise PolicyUnavailable(
                f"policy server sent no metadata within {self._connect_timeout:g} s"
            ) from None
        except ConnectionClosed as exc:
            raise self._closed_early(exc, "its metadata") from None
        try:
            if isinstance(raw, str):
                raise ProtocolError("metadata arrived as text, not msgpack")
            metadata = codec.unpackb(raw)
            self.info = parse_metadata(
                metadata,
                dialect=self._dialect,
                default_image_size=self._default_image_size,
                n_cameras_available=self._exterior_cameras,
            )
        except (codec.CodecError, ProtocolError) as exc:
            ws.close()
            raise PolicyProtocolError(f"policy metadata rejected: {exc}") from None
        self._ws = ws
        return self.info

    def _positronic_handshake(self, ws: ClientConnection) -> ServerInfo:
        try:
            hello = positronic.read_handshake(
                lambda timeout: ws.recv(timeout=timeout),
                per_message_s=self._status_timeout,
                total_s=self._load_timeout,
                clock=self.wall.now,
            )
            self.info = positronic.parse_meta(hello.meta)
            self._hello = hello
        except TimeoutError as exc:
            ws.close()
            raise PolicyUnavailable(f"policy server not ready: {exc}") from None
        except ConnectionClosed as exc:
            raise self._closed_early(exc, "it was ready") from None
        except positronic.SessionRefused as exc:
            ws.close()
            raise PolicyUnavailable(str(exc)) from None
        except ProtocolError as exc:
            ws.close()
            raise PolicyProtocolError(f"policy metadata rejected: {exc}") from None
        self._ws = ws
        return self.info

    def _closed_early(self, exc: ConnectionClosed, before: str) -> PolicyError:
        """What a connection closed during the handshake means to the station."""
        if _too_big(exc):
            return PolicyProtocolError(f"policy metadata rejected: {self._too_big_text()}")
        return PolicyUnavailable(f"policy server closed the connection before {before}")

    def _too_big_text(self) -> str:
        # the station's own words: the close reason websockets wrote quotes the frame's size
        return f"a message larger than the station's limit of {self._max_message_bytes} bytes"

    def close(self) -> None:
        ws, self._ws = self._ws, None
        end = self._hello.end() if self._hello is not None else None
        if ws is not None and end is not None:
            # a v3 Positronic session is ended in words, so the model frees its state
            # at once; the acknowledgement is waited for briefly, never required
            with contextlib.suppress(Exception):
                ws.send(codec.packb(end))
                deadline = self.wall.now() + 1.0
                while (left := deadline - self.wall.now()) > 0:
                    ack = codec.unpackb(ws.recv(timeout=left))
                    if isinstance(ack, dict) and ack.get("end_session") is True:
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
        """RoboArena ``reset`` at an episode's start (openpi servers have none)."""
        if self.info is None or self.info.dialect != EndpointDialect.roboarena:
            return
        message: dict[str, Any] = {keys.ROBOARENA_ENDPOINT: "reset"}
        if self.info.needs_session_id:
            message[keys.ROBOARENA_SESSION_ID] = self.session_id
        self._exchange(message, timeout_s)  # any reply (text or msgpack) acknowledges

    def infer(self, observation: dict[str, Any], timeout_s: float) -> Reply:
        info = self.info
        if info is None:
            raise PolicyDisconnected("not connected to the policy server")
        message = dict(observation)
        if info.dialect == EndpointDialect.roboarena:
            message[keys.ROBOARENA_ENDPOINT] = "infer"
            if info.needs_session_id:
                message[keys.ROBOARENA_SESSION_ID] = self.session_id
        if info.dialect == EndpointDialect.positronic_v1 and self._hello is not None:
            message = self._hello.request(message)
        t0 = self.wall.now()
        raw = self._exchange(message, timeout_s)
        if info.dialect == EndpointDialect.positronic_v1:
            return self._positronic_reply(raw, observation, t0)
        if isinstance(raw, str):
            # openpi servers send their traceback as text; it may name the
            # policy, so it is not repeated here
            self.close()
            raise PolicyProtocolError(
                f"policy server sent an error message ({len(raw)} characters) instead of actions"
            )
        try:
            actions = extract_chunk(codec.unpackb(raw), info.action_space)
        except (codec.CodecError, ProtocolError) as exc:
            raise PolicyProtocolError(f"malformed policy reply: {exc}") from None
        self.calls += 1
        assert info.action_space is not None
        return Reply(
            actions=actions, latency_s=self.wall.now() - t0, t_request=t0, space=info.action_space
        )

    def _positronic_reply(self, raw: Any, observation: dict[str, Any], t0: float) -> Reply:
        info = self.info
        assert info is not None
        try:
            if isinstance(raw, str):
                raise ProtocolError("a text frame instead of a msgpack reply")
            reply = codec.unpackb(raw)
            if isinstance(reply, dict) and "error" in reply:
                # Positronic's error text may name the model: not repeated
                raise ProtocolError("the policy server reported an error instead of actions")
            pose, q, grip = positronic.hold_state(observation)
            chunk = positronic.decode_result(
                reply,
                control_hz=self._control_hz,
                action_fps=info.action_fps,
                hold_pose=pose,
                hold_q=q,
                hold_grip=grip,
                space=self._space,
            )
        except (codec.CodecError, ProtocolError) as exc:
            raise PolicyProtocolError(f"malformed policy reply: {exc}") from None
        self._space = chunk.space
        self.calls += 1
        return Reply(
            actions=chunk.rows, latency_s=self.wall.now() - t0, t_request=t0, space=chunk.space
        )

    @property
    def action_space(self) -> ActionSpace | None:
        """The session's action space; None while a Positronic server has not named it."""
        if self.info is None:
            raise PolicyDisconnected("not connected to the policy server")
        return self.info.action_space or self._space


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
