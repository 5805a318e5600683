"""Positronic v1's conformance checks: its session URL, readiness, the status
frames and ``ready`` handshake, its model list, error frames and waypoints."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from proctor.core.netguard import http_get
from proctor.policywire.conformance.dialects import register
from proctor.policywire.conformance.dialects.base import DialectChecks
from proctor.policywire.conformance.exchange import span_text
from proctor.policywire.conformance.state import COLUMNS, Status, excerpt
from proctor.policywire.dialects import positronic_frames as positronic
from proctor.policywire.handshake import public_info
from proctor.policywire.wire import codec
from proctor.policywire.wire import keys as wire_keys
from proctor.policywire.wire.spec import ActionSpace, ProtocolError, ServerInfo

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from proctor.policywire.conformance.state import CheckState


@register
class PositronicV1Checks(DialectChecks):
    name = "positronic_v1"

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
        from proctor.policywire.conformance.positronic_ready import check_ready

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
            server=public_info(info),
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
        probe = {wire_keys.POSITRONIC_TASK: "conformance probe: an empty observation"}
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
            "stamped": all(
                isinstance(a, dict) and wire_keys.POSITRONIC_TIMESTAMP in a for a in actions
            ),
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
