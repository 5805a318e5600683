"""The checks made on a raw WebSocket: the handshake, the metadata (sent
first, unasked, as binary msgpack-numpy; usable by the station; naming no
one; agreeing with the declared action space) and how errors are reported
(openpi's server sends the traceback as a text frame, then closes).

A Positronic v1 server is held to its own wire instead: status frames
(``loading`` / ``waiting``) then ``ready`` with the ``meta``, within the
load limit, and errors answered as ``{"error": …}`` with the session left
open."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection

from proctor.domain import EndpointDialect
from proctor.netguard import http_get
from station import keys
from station.policy import codec, positronic
from station.policy.conformance_base import COLUMNS, CheckState, Status, excerpt
from station.policy.spec import ProtocolError, ServerInfo, parse_metadata

# metadata keys that usually carry who made a model or where it lives
_SUSPICIOUS_KEYS = {
    "name",
    "model",
    "modelname",
    "policy",
    "policyname",
    "author",
    "authors",
    "owner",
    "user",
    "username",
    "team",
    "lab",
    "org",
    "organization",
    "organisation",
    "institution",
    "email",
    "checkpoint",
    "checkpointpath",
    "ckpt",
    "ckptpath",
    "path",
    "run",
    "runname",
    "runid",
    "wandb",
    "repo",
    "repoid",
    "hfrepo",
    "url",
    "configname",
    "experiment",
    "expname",
}
_LOCATION = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|/|~/)|\b[\w.-]+/[\w.-]+/[\w.-]+", re.IGNORECASE)


def _normalize(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _words(text: str) -> list[str]:
    # camelCase and snake_case alike: "AcmeRobotics_v2" -> acme, robotics, v2
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return re.findall(r"[a-z0-9]+", spaced.lower())


def mentions(text: str, term: str) -> bool:
    """Whether ``text`` names ``term`` as whole words ("Acme Robotics" is in
    "acme-robotics-v2" and "AcmeRobotics", but "ada" is not in "adaptive")."""
    words, wanted = _words(text), _words(term)
    if not wanted:
        return False
    joined = "".join(wanted)
    n = len(wanted)
    for i in range(len(words)):
        if words[i : i + n] == wanted:
            return True
        for j in range(i + 1, min(len(words), i + n) + 1):
            if "".join(words[i:j]) == joined:
                return True
    return False


def _walk_strings(obj: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """(path, key, string value or '') for every key and string in a nested map."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)
            here = f"{path}.{key}" if path else key
            yield here, key, ""
            yield from _walk_strings(v, here)
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _walk_strings(v, f"{path}[{i}]")
    elif isinstance(obj, bytes):
        yield path, "", obj.decode("utf-8", "replace")
    elif isinstance(obj, str):
        yield path, "", obj
    elif isinstance(obj, np.ndarray) and obj.dtype.kind in "SU":
        for i, v in enumerate(obj.ravel()[:1000]):
            yield from _walk_strings(v.item() if hasattr(v, "item") else v, f"{path}[{i}]")


class WireChecks(CheckState):
    # 1. the handshake and the metadata, raw
    def handshake(self) -> bool:
        self.progress("connecting")
        if self.positronic:
            try:
                positronic.session_url(self.url)
            except ValueError as exc:
                self.add(
                    "connect",
                    "WebSocket handshake",
                    Status.failed,
                    f"The endpoint is not a Positronic session URL: {exc}.",
                )
                return False
        t0 = time.monotonic()
        if not self.options.connect_detail:
            return self._handshake_without_detail(t0)
        try:
            ws = self.raw_connect()
        except InvalidStatus as exc:
            code = exc.response.status_code
            sent_as = (
                "'Authorization: Bearer <key>', as Positronic's client does"
                if self.positronic
                else "'Authorization: Api-Key <key>', as openpi's client does"
            )
            hint = (
                " Redirects are not followed: register the URL the server answers at."
                if 300 <= code < 400
                else " Does it need an API key? Register the endpoint with it (it is sent as "
                f"{sent_as})."
                if code in (401, 403)
                else " Is the model id in the URL one your server lists at /api/v1/models?"
                if code == 404 and self.positronic
                else ""
            )
            self.add(
                "connect",
                "WebSocket handshake",
                Status.failed,
                f"Your server refused the WebSocket handshake with HTTP {code}.{hint}",
                http_status=code,
            )
            return False
        except InvalidURI:
            self.add(
                "connect",
                "WebSocket handshake",
                Status.failed,
                "The endpoint is not a valid ws:// or wss:// URL.",
            )
            return False
        except TimeoutError:
            self.add(
                "connect",
                "WebSocket handshake",
                Status.failed,
                f"Your server did not complete the WebSocket handshake within "
                f"{self.options.connect_timeout_s:g} s.",
            )
            return False
        except (OSError, InvalidHandshake) as exc:
            reason = (
                "no such host"
                if isinstance(exc, socket.gaierror)
                else "nothing accepted the connection"
                if isinstance(exc, ConnectionRefusedError)
                else type(exc).__name__
            )
            self.add(
                "connect",
                "WebSocket handshake",
                Status.failed,
                f"Could not open a WebSocket to your server ({reason}). Is it running and "
                "reachable from the evaluation server?",
                reason=reason,
            )
            return False
        return self._handshake_succeeded(ws, t0)

    def _handshake_without_detail(self, t0: float) -> bool:
        """The handshake, where a failure must not say why: whether a port is
        open, closed or answers HTTP would tell a submitter about a network
        that is not theirs (the worker of a multi-user site)."""
        try:
            ws = self.raw_connect()
        except Exception:
            self.add(
                "connect",
                "WebSocket handshake",
                Status.failed,
                "Could not open a WebSocket connection to your server. Is it running, "
                "reachable from the evaluation server, and answering the WebSocket "
                "handshake at this URL (redirects are not followed)?",
            )
            return False
        return self._handshake_succeeded(ws, t0)

    def _handshake_succeeded(self, ws: ClientConnection, t0: float) -> bool:
        handshake_ms = (time.monotonic() - t0) * 1000
        self.add(
            "connect",
            "WebSocket handshake",
            Status.passed,
            "The WebSocket handshake succeeded.",
            handshake_ms=round(handshake_ms, 1),
        )
        try:
            if self.positronic:
                return self._positronic_handshake(ws)
            return self._metadata(ws)
        finally:
            self.close_quietly(ws)

    def positronic_models(self) -> None:
        """``GET /api/v1/models``: the catalogue lists the model the URL names."""
        title = "Model list"
        url = positronic.models_url(self.url)
        named = positronic.model_id(self.url)
        try:
            # from the address the handshake went to, directly (never through an
            # environment proxy), and a redirect is not followed: see proctor.netguard
            answer = http_get(
                url,
                pinned=self.options.pinned,
                headers=dict(self.options.headers),
                timeout_s=self.options.connect_timeout_s,
                max_bytes=1_000_000,
            )
            if answer.status // 100 != 2:
                redirect = " (redirects are not followed)" if answer.status // 100 == 3 else ""
                self.add(
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
            self.add(
                "models",
                title,
                Status.warning,
                f"GET /api/v1/models failed ({type(exc).__name__}); Positronic servers list "
                "their models there.",
            )
            return
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, list):
            self.add(
                "models",
                title,
                Status.warning,
                "GET /api/v1/models did not answer {'models': [id, …]}.",
            )
            return
        listed = [str(m) for m in models]
        decoded = urllib.parse.unquote(named) if named else None
        if decoded is not None and decoded not in listed:
            self.add(
                "models",
                title,
                Status.warning,
                f"Your URL names model '{decoded}', which GET /api/v1/models does not list "
                f"({len(listed)} listed). Check the id.",
                models=listed[:50],
            )
            return
        self.add(
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

    def _positronic_handshake(self, ws: ClientConnection) -> bool:
        per_message = self.options.connect_timeout_s
        total = self.options.load_timeout_s
        title = "Session handshake"
        try:
            hello = positronic.read_handshake(
                lambda timeout: ws.recv(timeout=timeout), per_message_s=per_message, total_s=total
            )
        except TimeoutError as exc:
            self.add(
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
            self.add(
                "metadata_first",
                title,
                Status.failed,
                f"Your server closed the session (close code {code}) before it was ready.",
                close_code=code,
            )
            return False
        except positronic.SessionRefused as exc:
            self.add(
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
            self.add(
                "metadata_encoding",
                "Handshake encoding",
                Status.failed,
                f"The station cannot read your server's handshake: {exc}. Every frame is a "
                "binary msgpack map (positronic.offboard.serialisation).",
            )
            return False
        self.add(
            "metadata_first",
            title,
            Status.passed,
            f"Your server sent {hello.status_messages} status frame(s), then 'ready' with its "
            f"meta, {hello.waited_s:.1f} s after the connection.",
            status_frames=hello.status_messages,
            ready_s=round(hello.waited_s, 3),
        )
        self.metadata = hello.meta
        return self._parse_metadata(hello.meta)

    def _metadata(self, ws: ClientConnection) -> bool:
        timeout = self.options.connect_timeout_s
        title = "Metadata first"
        try:
            raw = ws.recv(timeout=timeout)
        except TimeoutError:
            self.add(
                "metadata_first",
                title,
                Status.failed,
                f"Your server sent nothing within {timeout:g} s of the connection. Like "
                "openpi's WebsocketPolicyServer, it must send its metadata (a msgpack map, "
                "possibly empty) as soon as a client connects, before any request.",
            )
            return False
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            self.add(
                "metadata_first",
                title,
                Status.failed,
                "Your server closed the connection before sending its metadata "
                f"(close code {code}).",
                close_code=code,
            )
            return False
        if isinstance(raw, str):
            self.add(
                "metadata_first",
                title,
                Status.failed,
                "Your server's first message was a text frame. The metadata must be a "
                "binary frame holding a msgpack map (openpi's msgpack_numpy.packb).",
                text=excerpt(raw),
            )
            return False
        self.add(
            "metadata_first",
            title,
            Status.passed,
            "Your server sent its metadata first, as a binary frame.",
            bytes=len(raw),
        )
        try:
            metadata = codec.unpackb(raw)
        except codec.CodecError as exc:
            self.add(
                "metadata_encoding",
                "Metadata encoding",
                Status.failed,
                f"Your server's metadata is not msgpack-numpy: {exc}. Pack it with "
                "openpi_client.msgpack_numpy.packb.",
            )
            return False
        if not isinstance(metadata, dict):
            self.add(
                "metadata_encoding",
                "Metadata encoding",
                Status.failed,
                f"Your server's metadata is a msgpack {type(metadata).__name__}; it must be a "
                "map (a Python dict), even an empty one.",
            )
            return False
        self.metadata = metadata
        self.add(
            "metadata_encoding",
            "Metadata encoding",
            Status.passed,
            f"The metadata is a msgpack map with {len(metadata)} keys.",
            keys=sorted(str(k) for k in metadata)[:50],
        )
        return self._parse_metadata(metadata)

    def _parse_metadata(self, metadata: dict[Any, Any]) -> bool:
        o = self.options
        try:
            info = parse_metadata(
                metadata,
                dialect=o.dialect,
                default_image_size=o.default_image_size,
                n_cameras_available=o.exterior_cameras,
            )
        except ProtocolError as exc:
            self.add(
                "metadata",
                "Metadata contents",
                Status.failed,
                f"The station cannot use your server's metadata: {exc}.",
            )
            return False
        self.info = info
        if info.dialect == EndpointDialect.positronic_v1:
            self.add(
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
            self._identity(metadata)
            return True
        detected = parse_metadata(
            metadata, dialect=None, default_image_size=o.default_image_size, n_cameras_available=9
        ).dialect
        if o.dialect is not None and detected != o.dialect:
            self.add(
                "metadata",
                "Metadata contents",
                Status.warning,
                f"You registered the {o.dialect.value} dialect, but your metadata looks like "
                f"{detected.value}'s. The station will speak {o.dialect.value}: check that "
                "this is what your server expects.",
                server=info.public(),
            )
        else:
            self.add(
                "metadata",
                "Metadata contents",
                Status.passed,
                f"The station will speak the {info.dialect.value} dialect with your server: "
                f"{info.action_space.value} actions, images "
                + (
                    f"{info.image_size[0]}×{info.image_size[1]}"
                    if info.image_size
                    else "at the cameras' size"
                )
                + ".",
                server=info.public(),
            )
        self._identity(metadata)
        self._action_space(metadata, info)
        return True

    def _identity(self, metadata: dict[Any, Any]) -> None:
        terms = [t for t in self.expect.identity_terms if len(_normalize(t)) >= 3]
        named: list[str] = []
        suspicious: list[str] = []
        for path, key, value in _walk_strings(metadata):
            # Positronic's declared rig-side layers are protocol, not identity
            structural = self.positronic and path.startswith("local_stack")
            for term in terms:
                if mentions(key or value, term):
                    named.append(f"{path} mentions '{term}'")
            if structural:
                continue
            if key and _normalize(key) in _SUSPICIOUS_KEYS:
                suspicious.append(path)
            elif value and _LOCATION.search(value):
                suspicious.append(f"{path} (looks like a path or URL)")
        title = "Metadata names no one"
        if named:
            self.add(
                "identity",
                title,
                Status.failed,
                "Your server's metadata identifies your policy: "
                + "; ".join(sorted(set(named))[:10])
                + ". Evaluations are blind: the metadata reaches the station through the "
                "gateway, where it would tell the operator whose policy is running. "
                "Remove it from the metadata.",
                where=sorted(set(named))[:20],
            )
        elif suspicious:
            self.add(
                "identity",
                title,
                Status.warning,
                "Your server's metadata carries "
                + ", ".join(sorted(set(suspicious))[:10])
                + ". Metadata reaches the station through the gateway; anything in it that "
                "names your model, team or checkpoint can unblind the evaluation. Keep only "
                + (
                    "what the station reads (image_sizes, action_fps, local_stack, "
                    "compress_images)."
                    if self.positronic
                    else "what the station reads (action_space and, for RoboArena, its keys)."
                ),
                where=sorted(set(suspicious))[:20],
            )
        else:
            self.add(
                "identity",
                title,
                Status.passed,
                "Nothing in the metadata names the policy or its owner.",
            )

    def _action_space(self, metadata: dict[Any, Any], info: ServerInfo) -> None:
        declared = self.expect.action_space
        title = "Action space"
        named = metadata.get("action_space")
        if declared is None:
            self.add(
                "action_space",
                title,
                Status.passed,
                f"Your server works in {info.action_space.value}"
                + (" (DROID's default: the metadata names no action_space)." if not named else ".")
                + " Nothing was declared to compare it with.",
            )
        elif declared != info.action_space:
            how = (
                f"your metadata says action_space '{named}'"
                if named
                else "your metadata names no action_space, so the station assumes DROID's "
                "joint_velocity"
            )
            self.add(
                "action_space",
                title,
                Status.failed,
                f"You declared {declared.value}, but {how}. Make them agree: the station "
                "executes actions in the space the metadata names.",
                declared=declared.value,
                server=info.action_space.value,
            )
        else:
            self.add(
                "action_space",
                title,
                Status.passed,
                f"Your metadata and your declaration agree: {declared.value} "
                f"({info.action_space.width} columns: {COLUMNS[declared]}).",
            )

    # 4. the error convention, raw
    def error_convention(self) -> None:
        title = "Errors reported as text"
        try:
            ws = self.raw_connect()
        except Exception:
            self.add(
                "error_convention",
                title,
                Status.warning,
                "Could not reconnect to probe how your server reports errors.",
            )
            return
        try:
            hello = None
            try:
                if self.positronic:
                    hello = positronic.read_handshake(
                        lambda timeout: ws.recv(timeout=timeout),
                        per_message_s=self.options.connect_timeout_s,
                        total_s=self.options.load_timeout_s,
                    )
                else:
                    ws.recv(timeout=self.options.connect_timeout_s)  # the metadata
            except Exception:
                return
            if hello is not None:
                self._positronic_errors(ws, hello)
                return
            bad: dict[str, Any] = {"prompt": "conformance probe: an observation with no images"}
            if self.info is not None and self.info.dialect == EndpointDialect.roboarena:
                bad[keys.ROBOARENA_ENDPOINT] = "infer"
                if self.info.needs_session_id:
                    bad[keys.ROBOARENA_SESSION_ID] = "conformance-probe"
            ws.send(codec.packb(bad))
            try:
                raw = ws.recv(timeout=self.options.request_timeout_s)
            except TimeoutError:
                self.add(
                    "error_convention",
                    title,
                    Status.warning,
                    "Sent an observation without images, your server neither answered nor "
                    f"reported an error within {self.options.request_timeout_s:g} s. openpi's "
                    "server sends the traceback as a text frame and closes (code 1011), so "
                    "clients fail fast instead of waiting out their timeout.",
                )
                return
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                self.add(
                    "error_convention",
                    title,
                    Status.warning,
                    "Sent an observation without images, your server closed the connection "
                    f"(code {code}) without saying why. openpi's convention is to send the "
                    "error's text as a text frame first, then close with 1011.",
                    close_code=code,
                )
                return
            if isinstance(raw, str):
                self.add(
                    "error_convention",
                    title,
                    Status.passed,
                    "Sent an observation without images, your server reported the error as a "
                    "text frame, as openpi's server does.",
                    server_error=excerpt(raw),
                )
            else:
                self.add(
                    "error_convention",
                    title,
                    Status.passed,
                    "Your server answered even an observation without images (it tolerates "
                    "missing keys).",
                )
        finally:
            self.close_quietly(ws)

    def _positronic_errors(self, ws: ClientConnection, hello: positronic.Handshake) -> None:
        """Positronic's convention: a failing observation is answered with
        ``{"error": …}`` and the session stays open."""
        title = "Errors reported as {'error': …}"
        probe = {keys.POSITRONIC_TASK: "conformance probe: an empty observation"}
        ws.send(codec.packb(hello.request(probe)))
        try:
            raw = ws.recv(timeout=self.options.request_timeout_s)
        except TimeoutError:
            self.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server neither answered "
                f"nor reported an error within {self.options.request_timeout_s:g} s. "
                "Positronic's server answers {'error': <text>} so clients fail fast.",
            )
            return
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            self.add(
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
            self.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server ended the whole "
                "session with an error status. Positronic's convention is to answer "
                "{'error': <text>} and keep the session open.",
                server_error=excerpt(str(reply.get("error", ""))),
            )
        elif isinstance(reply, dict) and "error" in reply:
            self.add(
                "error_convention",
                title,
                Status.passed,
                "Sent an observation without state or images, your server answered "
                "{'error': …}, as Positronic's server does.",
                server_error=excerpt(str(reply["error"])),
            )
        elif isinstance(reply, dict) and "result" in reply:
            self.add(
                "error_convention",
                title,
                Status.passed,
                "Your server answered even an observation without state or images (it "
                "tolerates missing keys).",
            )
        else:
            self.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without state or images, your server answered with "
                + ("a text frame" if isinstance(raw, str) else "a frame that is not a map")
                + "; Positronic's convention is a binary {'error': <text>}.",
            )
