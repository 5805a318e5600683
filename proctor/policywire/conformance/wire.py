"""The checks made on a raw WebSocket: the handshake, the metadata (sent
first, unasked, as binary msgpack-numpy; usable by the station; naming no
one; agreeing with the declared action space) and how errors are reported
(openpi's server sends the traceback as a text frame, then closes).

A Positronic v1 server is held to its own wire instead: status frames
(``loading`` / ``waiting``) then ``ready`` with the ``meta``, within the
load limit, and errors answered as ``{"error": …}`` with the session left
open."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection

from proctor.policywire.conformance import dialects as dialect_checks
from proctor.policywire.conformance.sends import station_sends
from proctor.policywire.conformance.state import COLUMNS, CheckState, Status
from proctor.policywire.conformance.units import judge_conflict
from proctor.policywire.handshake import dialect_of, parse_metadata
from proctor.policywire.wire.spec import ProtocolError, ServerInfo, UnitsConflict

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
        if not dialect_checks.of(self).check_url(self):
            return False
        if not dialect_checks.of(self).check_ready(self):
            return False
        t0 = time.monotonic()
        if not self.options.connect_detail:
            return self._handshake_without_detail(t0)
        try:
            ws = self.raw_connect()
        except InvalidStatus as exc:
            code = exc.response.status_code
            sent_as = dialect_checks.of(self).auth_hint
            hint = (
                " Redirects are not followed: register the URL the server answers at."
                if 300 <= code < 400
                else " Does it need an API key? Register the endpoint with it (it is sent as "
                f"{sent_as})."
                if code in (401, 403)
                else dialect_checks.of(self).not_found_hint
                if code == 404
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
            return dialect_checks.of(self).check_handshake(self, ws)
        finally:
            self.close_quietly(ws)

    def extra_checks(self) -> None:
        """The checks only the server's dialect has (Positronic's model list)."""
        dialect_checks.of(self).check_extras(self)

    def judge_metadata(self, metadata: dict[Any, Any]) -> bool:
        """The metadata as the dialect reads it, and the findings it makes of it."""
        o = self.options

        def read(action_units: str | None) -> ServerInfo:
            return parse_metadata(
                metadata,
                dialect=o.dialect,
                default_image_size=o.default_image_size,
                n_cameras_available=o.exterior_cameras,
                exterior_numbering=o.exterior_numbering,
                action_units=action_units,
            )

        try:
            try:
                info = read(o.action_units)
            except UnitsConflict as conflict:
                # reported with what to change; the station's client would refuse the
                # server, so the rest of the check reads it as its metadata declares
                judge_conflict(self, conflict)
                self.options = replace(o, action_units=None)
                info = read(None)
        except ProtocolError as exc:
            self.add(
                "metadata",
                "Metadata contents",
                Status.failed,
                f"The station cannot use your server's metadata: {exc}.",
            )
            return False
        self.info = info
        dialect_checks.get(dialect_of(info).name).check_metadata(self, metadata, info)
        station_sends(self, info)
        return True

    def judge_identity(self, metadata: dict[Any, Any]) -> None:
        terms = [t for t in self.expect.identity_terms if len(_normalize(t)) >= 3]
        named: list[str] = []
        suspicious: list[str] = []
        for path, key, value in _walk_strings(metadata):
            # what the dialect declares as protocol (Positronic's rig-side layers) is not identity
            structural = dialect_checks.of(self).structural_metadata(path)
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
                + f"what the station reads ({dialect_checks.of(self).metadata_keys_text}).",
                where=sorted(set(suspicious))[:20],
            )
        else:
            self.add(
                "identity",
                title,
                Status.passed,
                "Nothing in the metadata names the policy or its owner.",
            )

    def judge_action_space(self, metadata: dict[Any, Any], info: ServerInfo) -> None:
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
            dialect_checks.of(self).check_error_convention(self, ws)
        finally:
            self.close_quietly(ws)
