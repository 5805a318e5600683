"""Positronic's offboard protocol v1 (the wire itself: ``proctor/station/policy/positronic.py``).

Status frames then ``ready`` on connect; its own observation keys; replies
are waypoints timed from the call, sampled on the station's control grid.
Its key is a Bearer token; its URL gets the session path.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from proctor.core.netguard import http_get
from proctor.station import keys
from proctor.station.policy import codec, positronic
from proctor.station.policy.conformance_base import COLUMNS, Status, excerpt
from proctor.station.policy.conformance_exchange import span_text
from proctor.station.policy.dialects import register
from proctor.station.policy.dialects.base import Decoded, Dialect, Session, read_server_timing
from proctor.station.policy.spec import ActionSpace, ProtocolError, ServerInfo

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from proctor.station.drivers.arm.base import ArmState
    from proctor.station.drivers.gripper.base import GripperState
    from proctor.station.policy.client import PolicyClient
    from proctor.station.policy.conformance_base import CheckState


class PositronicSession(Session):
    def __init__(self, info: ServerInfo, hello: positronic.Handshake, control_hz: float) -> None:
        super().__init__(info)
        self.hello = hello
        self.control_hz = control_hz
        self.space: ActionSpace | None = None  # named by the replies' commands, once seen

    def request(self, observation: dict[str, Any], session_id: str) -> dict[str, Any]:
        return self.hello.request(observation)

    def decode(self, raw: Any, observation: dict[str, Any]) -> Decoded:
        if isinstance(raw, str):
            raise ProtocolError("a text frame instead of a msgpack reply")
        reply = codec.unpackb(raw)
        if isinstance(reply, dict) and "error" in reply:
            # Positronic's error text may name the model: not repeated
            raise ProtocolError("the policy server reported an error instead of actions")
        pose, q, grip = positronic.hold_state(observation)
        chunk = positronic.decode_result(
            reply,
            control_hz=self.control_hz,
            action_fps=self.info.action_fps,
            hold_pose=pose,
            hold_q=q,
            hold_grip=grip,
            space=self.space,
        )
        self.space = chunk.space
        # waypoints are timed from the call, as Positronic's chunk player plays them
        return Decoded(
            chunk.rows,
            chunk.space,
            timed_from_call=True,
            server_timing=read_server_timing(reply.get(positronic.TIMING), positronic.TIMING_KEYS),
        )

    def end_message(self) -> dict[str, Any] | None:
        # a v3 session is ended in words, so the model frees its state at once
        return self.hello.end()

    def is_end_ack(self, frame: Any) -> bool:
        return isinstance(frame, dict) and frame.get("end_session") is True

    @property
    def action_space(self) -> ActionSpace | None:
        return self.info.action_space or self.space


@register
class PositronicV1(Dialect):
    name = "positronic_v1"
    # the client speaks first (its hello); the server answers it
    greets_on_connect = False
    auth_scheme = "Bearer"
    wire_text = "Positronic wire"
    session_text = "session"
    url_path_text = "Positronic's session path"
    chunk_timed_from_call = True  # waypoints, timed from the request

    def dial_url(self, url: str) -> str:
        return positronic.session_url(str(url))

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        return positronic.parse_meta(dict(metadata))

    def public(self, info: ServerInfo) -> dict[str, Any]:
        return {"action_fps": info.action_fps}

    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        return {
            keys.POSITRONIC_EXTERIOR_IMAGE: keys.CAMERA_EXTERIOR,
            keys.POSITRONIC_WRIST_IMAGE: keys.CAMERA_WRIST,
        }

    def encode(
        self,
        info: ServerInfo,
        *,
        arm: ArmState,
        gripper: GripperState,
        prompt: str,
        images: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        return positronic.observation(
            q=arm.q,
            dq=arm.dq,
            ee_pose=arm.ee_pose,
            grip=gripper.position,
            prompt=prompt,
            images=images,
        )

    def serve(
        self,
        policy: Any,
        *,
        host: str,
        port: int,
        fault: Any,
        image_size: tuple[int, int] | None,
        action_fps: float,
    ) -> Any:
        from proctor.station.policy.positronic_server import PositronicServer

        if fault is not None:
            raise ValueError("fault drills are served on the openpi wire only")
        size = (image_size[1], image_size[0]) if image_size else None
        return PositronicServer(
            policy, host=host, port=port, image_size_wh=size, action_fps=action_fps
        )

    def served_text(self, server: Any) -> str:
        return f" (the Positronic v1 wire; session {server.session_url()})"

    def open(self, client: PolicyClient, ws: ClientConnection) -> Session:
        from proctor.station.policy.client import PolicyProtocolError, PolicyUnavailable

        try:
            hello = positronic.read_handshake(
                lambda timeout: ws.recv(timeout=timeout),
                per_message_s=client.status_timeout_s,
                total_s=client.load_timeout_s,
                clock=client.wall.now,
            )
            info = positronic.parse_meta(hello.meta)
        except TimeoutError as exc:
            ws.close()
            raise PolicyUnavailable(f"policy server not ready: {exc}") from None
        except ConnectionClosed as exc:
            raise client.closed_early(exc, "it was ready") from None
        except positronic.SessionRefused as exc:
            ws.close()
            raise PolicyUnavailable(str(exc)) from None
        except ProtocolError as exc:
            ws.close()
            raise PolicyProtocolError(f"policy metadata rejected: {exc}") from None
        return PositronicSession(info, hello, client.control_hz)

    # -- its conformance checks ---------------------------------------------------------------
    wire_text = "Positronic wire"
    session_text = "session"
    auth_hint = "'Authorization: Bearer <key>', as Positronic's client does"
    not_found_hint = " Is the model id in the URL one your server lists at /api/v1/models?"
    metadata_keys_text = "image_sizes, action_fps, local_stack, compress_images"

    def structural_metadata(self, path: str) -> bool:
        # the declared rig-side layers are protocol, not identity
        return path.startswith("local_stack")

    def check_url(self, check: CheckState) -> bool:
        try:
            positronic.session_url(check.url)
        except ValueError as exc:
            check.add(
                "connect",
                "WebSocket handshake",
                Status.failed,
                f"The endpoint is not a Positronic session URL: {exc}.",
            )
            return False
        return True

    def check_ready(self, check: CheckState) -> bool:
        """``POST /api/v1/keepalive`` until the model server is loaded and warm."""
        from proctor.station.policy.positronic_ready import check_ready

        return check_ready(check)

    def check_handshake(self, check: CheckState, ws: ClientConnection) -> bool:
        """Status frames, then ``ready`` with the meta."""
        per_message = check.options.connect_timeout_s
        total = check.options.load_timeout_s
        title = "Session handshake"
        try:
            hello = positronic.read_handshake(
                lambda timeout: ws.recv(timeout=timeout), per_message_s=per_message, total_s=total
            )
        except TimeoutError as exc:
            check.add(
                "metadata_first",
                title,
                Status.failed,
                f"Your server was not ready: {exc} (or it went more than {per_message:g} s "
                "without a frame). While a model loads, send a 'loading' or 'waiting' status "
                "frame at least that often, then {'status': 'ready', 'meta': {…}}.",
            )
            return False
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            check.add(
                "metadata_first",
                title,
                Status.failed,
                f"Your server closed the session (close code {code}) before it was ready.",
                close_code=code,
            )
            return False
        except positronic.SessionRefused as exc:
            check.add(
                "metadata_first",
                title,
                Status.failed,
                "Your server refused the session with an error status. Its text is below; "
                "session parameters in the URL (?key=value) and the model id are the usual "
                "causes.",
                server_error=excerpt(exc.server_text),
            )
            return False
        except ProtocolError as exc:
            check.add(
                "metadata_encoding",
                "Handshake encoding",
                Status.failed,
                f"The station cannot read your server's handshake: {exc}. Every frame is a "
                "binary msgpack map (positronic.offboard.serialisation).",
            )
            return False
        check.add(
            "metadata_first",
            title,
            Status.passed,
            f"Your server sent {hello.status_messages} status frame(s), then 'ready' with its "
            f"meta, {hello.waited_s:.1f} s after the connection.",
            status_frames=hello.status_messages,
            ready_s=round(hello.waited_s, 3),
        )
        check.metadata = hello.meta
        return check.judge_metadata(hello.meta)

    def check_metadata(self, check: CheckState, metadata: dict[Any, Any], info: ServerInfo) -> None:
        check.add(
            "metadata",
            "Metadata contents",
            Status.passed,
            "The station will speak the Positronic v1 wire with your server: images "
            + (
                f"fitted inside {info.image_size[1]}×{info.image_size[0]} (width × height)"
                if info.image_size
                else "at the cameras' size"
            )
            + (
                f", actions spaced at {info.action_fps:g} Hz unless stamped"
                if info.action_fps
                else ""
            )
            + "; the action space is what your commands say.",
            server=info.public(),
        )
        check.judge_identity(metadata)

    def check_extras(self, check: CheckState) -> None:
        """``GET /api/v1/models``: the catalogue (a v1 server's) lists the model the
        URL names; a server with no catalogue (404) is positronic-model-server's kind."""
        title = "Model list"
        url = positronic.models_url(check.url)
        named = positronic.model_id(check.url)
        try:
            # from the address the handshake went to, directly (never through an
            # environment proxy), and a redirect is not followed: see proctor.core.netguard
            answer = http_get(
                url,
                pinned=check.options.pinned,
                headers=dict(check.options.headers),
                timeout_s=check.options.connect_timeout_s,
                max_bytes=1_000_000,
            )
            if answer.status == 404:
                # positronic-model-server serves one model and lists none
                check.add(
                    "models",
                    title,
                    Status.passed,
                    "Your server lists no models (GET /api/v1/models answered 404), as "
                    "positronic-model-server does not: it serves the one model it loaded. "
                    "The station does not need the list.",
                    http_status=answer.status,
                )
                return
            if answer.status // 100 != 2:
                redirect = " (redirects are not followed)" if answer.status // 100 == 3 else ""
                check.add(
                    "models",
                    title,
                    Status.warning,
                    f"GET /api/v1/models answered HTTP {answer.status}{redirect}. Positronic "
                    "servers list their models there; the station does not need it, but "
                    "submitters and operators use it to see what a server offers.",
                    http_status=answer.status,
                )
                return
            body = json.loads(answer.body)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            check.add(
                "models",
                title,
                Status.warning,
                f"GET /api/v1/models failed ({type(exc).__name__}); Positronic servers list "
                "their models there.",
            )
            return
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, list):
            check.add(
                "models",
                title,
                Status.warning,
                "GET /api/v1/models did not answer {'models': [id, …]}.",
            )
            return
        listed = [str(m) for m in models]
        decoded = urllib.parse.unquote(named) if named else None
        if decoded is not None and decoded not in listed:
            check.add(
                "models",
                title,
                Status.warning,
                f"Your URL names model '{decoded}', which GET /api/v1/models does not list "
                f"({len(listed)} listed). Check the id.",
                models=listed[:50],
            )
            return
        check.add(
            "models",
            title,
            Status.passed,
            f"Your server lists {len(listed)} model(s)"
            + (
                f", including '{decoded}', the one your URL names."
                if decoded
                else "; your URL asks for its default model."
            ),
            models=listed[:50],
        )

    def check_error_convention(self, check: CheckState, ws: ClientConnection) -> None:
        try:
            hello = positronic.read_handshake(
                lambda timeout: ws.recv(timeout=timeout),
                per_message_s=check.options.connect_timeout_s,
                total_s=check.options.load_timeout_s,
            )
        except Exception:
            return
        self._errors(check, ws, hello)

    def _errors(self, check: CheckState, ws: ClientConnection, hello: positronic.Handshake) -> None:
        """Positronic's convention: a failing observation is answered with
        ``{"error": …}`` and the session stays open."""
        title = "Errors reported as {'error': …}"
        probe = {keys.POSITRONIC_TASK: "conformance probe: an empty observation"}
        ws.send(codec.packb(hello.request(probe)))
        try:
            raw = ws.recv(timeout=check.options.request_timeout_s)
        except TimeoutError:
            check.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server neither answered "
                f"nor reported an error within {check.options.request_timeout_s:g} s. "
                "Positronic's server answers {'error': <text>} so clients fail fast.",
            )
            return
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            check.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server closed the session "
                f"(code {code}) without saying why. Positronic's convention is to answer "
                "{'error': <text>} and keep the session open.",
                close_code=code,
            )
            return
        try:
            reply = codec.unpackb(raw) if isinstance(raw, bytes) else None
        except codec.CodecError:
            reply = None
        if isinstance(reply, dict) and reply.get("status") == positronic.ERROR:
            check.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server ended the whole "
                "session with an error status. Positronic's convention is to answer "
                "{'error': <text>} and keep the session open.",
                server_error=excerpt(str(reply.get("error", ""))),
            )
        elif isinstance(reply, dict) and "error" in reply:
            check.add(
                "error_convention",
                title,
                Status.passed,
                "Sent an observation without state or images, your server answered "
                "{'error': …}, as Positronic's server does.",
                server_error=excerpt(str(reply["error"])),
            )
        elif isinstance(reply, dict) and "result" in reply:
            check.add(
                "error_convention",
                title,
                Status.passed,
                "Your server answered even an observation without state or images (it "
                "tolerates missing keys).",
            )
        else:
            check.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server answered with "
                + ("a text frame" if isinstance(raw, str) else "a frame that is not a map")
                + "; Positronic's convention is a binary {'error': <text>}.",
            )

    def reply_error_text(self, raw: Any) -> str | None:
        """The text of a Positronic ``{"error": …}`` reply, if that is what ``raw`` is."""
        if not isinstance(raw, bytes | bytearray):
            return None
        try:
            reply = codec.unpackb(raw)
        except codec.CodecError:
            return None
        return str(reply["error"]) if isinstance(reply, dict) and "error" in reply else None

    def explain_reply(self, check: CheckState, raw: Any, station_says: str, n: str) -> str:
        said = station_says.removeprefix("malformed policy reply: ")
        if ".robot_command.mode" in said:
            # the advice is in what the station said: which mode, and what runs instead
            return (
                f"Your reply to observation {n} pins a control mode the station will not "
                f"run, so the station refuses it rather than ignore it: {said}."
            )
        return (
            f"The station cannot run your reply to observation {n}: "
            f"{said}. A reply is "
            "{'result': [action, …]}, each action a map of 'robot_command' (cartesian_pos "
            "or joint_pos), 'target_grip' and 'timestamp' (s after the call)."
        )

    def reply_notes(self, reply: Any, str_keys: bool) -> dict[str, Any]:
        result = reply.get("result") if isinstance(reply, dict) else None
        actions = [result] if isinstance(result, dict) else result or []
        return {
            "waypoints": len(actions),
            "stamped": all(isinstance(a, dict) and keys.POSITRONIC_TIMESTAMP in a for a in actions),
            "str_keys": str_keys,
            "modes": sorted(set(positronic.command_modes(reply))),
        }

    def judge_replies(self, check: CheckState, chunks: list[np.ndarray]) -> None:
        replies = check.replies
        space = check.reply_space
        waypoints = sorted({r["waypoints"] for r in replies})
        steps = sorted({len(c) for c in chunks})
        notes: list[str] = []
        status = Status.passed
        if not all(r["stamped"] for r in replies):
            status = Status.warning
            fps = check.info.action_fps if check.info else None
            notes.append(
                "some actions carry no 'timestamp', so the station spaces them "
                + (f"at your meta's action_fps ({fps:g} Hz)" if fps else "one per control step")
            )
        if any(r["str_keys"] for r in replies):
            status = Status.warning
            notes.append(
                "your numpy arrays are tagged with text keys ('__ndarray__' as a str); "
                "Positronic's serialiser writes binary keys (the station reads both)"
            )
        modes = sorted({m for r in replies for m in r.get("modes", [])})
        if modes:
            check.add(
                "control_mode",
                "Control mode",
                Status.passed,
                f"Your commands pin the control mode {', '.join(modes)} without a stiffness: "
                "the station runs them under its arm's own position control, which is that "
                "mode.",
                modes=modes,
            )
        check.add(
            "replies",
            "Replies",
            status,
            f"All {len(chunks)} replies were Positronic results of {span_text(waypoints)} "
            f"waypoints, run as {span_text(steps)} steps at {check.options.control_hz:g} Hz"
            + ("; but " + "; ".join(notes) + "." if notes else "."),
            waypoints=waypoints,
            steps=steps,
        )
        if space is None:  # every reply was refused, and said so
            return
        declared = check.expect.action_space
        title = "Action space"
        if declared is not None and declared != space:
            check.add(
                "action_space",
                title,
                Status.failed,
                f"You declared {declared.value}, but your commands are "
                f"{'cartesian_pos' if space == ActionSpace.cartesian_position else 'joint_pos'}, "
                f"which the station runs as {space.value}. Make them agree.",
                declared=declared.value,
                server=space.value,
            )
        else:
            check.add(
                "action_space",
                title,
                Status.passed,
                f"Your commands run as {space.value} ({COLUMNS[space]})"
                + (", as declared." if declared is not None else "."),
            )
        check.judge_chunk_length(chunks, lengths=waypoints, unit="waypoints")
        check.judge_values(chunks, space)
