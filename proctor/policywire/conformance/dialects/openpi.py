"""The openpi wire's conformance checks: metadata first, its encoding and
contents, the exterior camera numbering, the error convention, the replies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from websockets.exceptions import ConnectionClosed

from proctor.policywire.conformance.dialects import register
from proctor.policywire.conformance.dialects.base import DialectChecks
from proctor.policywire.conformance.state import (
    COLUMNS,
    Status,
    excerpt,
    last_line,
    shape_text,
)
from proctor.policywire.conformance.units import judge_units
from proctor.policywire.dialects.openpi import is_error_map
from proctor.policywire.dialects.server_config import declares_config
from proctor.policywire.handshake import dialect_of, parse_metadata, public_info
from proctor.policywire.wire import codec
from proctor.policywire.wire.spec import ServerInfo

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from proctor.policywire.conformance.state import CheckState


def _error_map(raw: Any) -> bool:
    """Whether a raw frame is a msgpack error map (undecodable: not one)."""
    try:
        return is_error_map(codec.unpackb(raw))
    except codec.CodecError:
        return False


@register
class OpenpiChecks(DialectChecks):
    name = "openpi"

    wire_text = "openpi dialect"
    auth_hint = "'Authorization: Api-Key <key>', as openpi's client does"
    metadata_keys_text = "action_space and, for RoboArena, its keys"
    # a bare array as a reply draws a warning (openpi clients expect {'actions': …})
    map_replies_only: ClassVar[bool] = True

    def check_handshake(self, check: CheckState, ws: ClientConnection) -> bool:
        """The metadata message comes first, a binary msgpack map."""
        timeout = check.options.connect_timeout_s
        title = "Metadata first"
        try:
            raw = ws.recv(timeout=timeout)
        except TimeoutError:
            check.add(
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
            check.add(
                "metadata_first",
                title,
                Status.failed,
                "Your server closed the connection before sending its metadata "
                f"(close code {code}).",
                close_code=code,
            )
            return False
        if isinstance(raw, str):
            check.add(
                "metadata_first",
                title,
                Status.failed,
                "Your server's first message was a text frame. The metadata must be a "
                "binary frame holding a msgpack map (openpi's msgpack_numpy.packb).",
                text=excerpt(raw),
            )
            return False
        check.add(
            "metadata_first",
            title,
            Status.passed,
            "Your server sent its metadata first, as a binary frame.",
            bytes=len(raw),
        )
        try:
            metadata = codec.unpackb(raw)
        except codec.CodecError as exc:
            check.add(
                "metadata_encoding",
                "Metadata encoding",
                Status.failed,
                f"Your server's metadata is not msgpack-numpy: {exc}. Pack it with "
                "openpi_client.msgpack_numpy.packb.",
            )
            return False
        if not isinstance(metadata, dict):
            check.add(
                "metadata_encoding",
                "Metadata encoding",
                Status.failed,
                f"Your server's metadata is a msgpack {type(metadata).__name__}; it must be a "
                "map (a Python dict), even an empty one.",
            )
            return False
        check.metadata = metadata
        check.add(
            "metadata_encoding",
            "Metadata encoding",
            Status.passed,
            f"The metadata is a msgpack map with {len(metadata)} keys.",
            keys=sorted(str(k) for k in metadata)[:50],
        )
        return check.judge_metadata(metadata)

    def check_metadata(self, check: CheckState, metadata: dict[Any, Any], info: ServerInfo) -> None:
        o = check.options
        detected = parse_metadata(
            metadata, dialect=None, default_image_size=o.default_image_size, n_cameras_available=9
        ).dialect
        # a PolicyServerConfig on the openpi wire is read, not a sign of the wrong dialect
        config_on_openpi = declares_config(metadata) and dialect_of(info).name == OpenpiChecks.name
        if o.dialect is not None and detected != o.dialect and not config_on_openpi:
            check.add(
                "metadata",
                "Metadata contents",
                Status.warning,
                f"You registered the {o.dialect.value} dialect, but your metadata looks like "
                f"{detected.value}'s. The station will speak {o.dialect.value}: check that "
                "this is what your server expects.",
                server=public_info(info),
            )
        else:
            check.add(
                "metadata",
                "Metadata contents",
                Status.passed,
                f"The station will speak the {info.dialect.value} dialect with your server: "
                f"{info.action_space.value if info.action_space else 'undeclared'} actions, "
                "images "
                + (
                    f"{info.image_size[0]}×{info.image_size[1]}"
                    if info.image_size
                    else "at the cameras' size"
                )
                + "."
                + (
                    " Your first frame is a PolicyServerConfig (RoboArena's keys): on the "
                    "openpi wire the station sends what it asks for (image size, cameras, "
                    "session id), without RoboArena's 'endpoint' key or reset (register the "
                    "roboarena dialect for those)."
                    if config_on_openpi
                    else ""
                ),
                server=public_info(info),
            )
        check.judge_identity(metadata)
        check.judge_action_space(metadata, info)

    def check_extras(self, check: CheckState) -> None:
        """Which exterior camera numbering the server reads."""
        from proctor.policywire.conformance.numbering import check_numbering

        check_numbering(check)

    def check_error_convention(self, check: CheckState, ws: ClientConnection) -> None:
        title = "Errors reported as text"
        try:
            ws.recv(timeout=check.options.connect_timeout_s)  # the metadata
        except Exception:
            return
        bad: dict[str, Any] = {"prompt": "conformance probe: an observation with no images"}
        if check.info is not None:  # framed as the dialect frames a request
            bad = dialect_of(check.info).session(check.info).request(bad, "conformance-probe")
        ws.send(codec.packb(bad))
        try:
            raw = ws.recv(timeout=check.options.request_timeout_s)
        except TimeoutError:
            check.add(
                "error_convention",
                title,
                Status.warning,
                "Sent an observation without images, your server neither answered nor "
                f"reported an error within {check.options.request_timeout_s:g} s. openpi's "
                "server sends the traceback as a text frame and closes (code 1011), so "
                "clients fail fast instead of waiting out their timeout.",
            )
            return
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            check.add(
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
            check.add(
                "error_convention",
                title,
                Status.passed,
                "Sent an observation without images, your server reported the error as a "
                "text frame, as openpi's server does.",
                server_error=excerpt(raw),
            )
        elif _error_map(raw):
            check.add(
                "error_convention",
                title,
                Status.passed,
                "Sent an observation without images, your server reported the error as a "
                "{'type': 'error'} map, as vLLM-Omni's robot endpoint does; the station "
                "ends the episode on it as on openpi's text frame.",
            )
        else:
            check.add(
                "error_convention",
                title,
                Status.passed,
                "Your server answered even an observation without images (it tolerates "
                "missing keys).",
            )

    def explain_reply(self, check: CheckState, raw: Any, station_says: str, n: str) -> str:
        space = check.info.action_space if check.info else None
        try:
            decoded = codec.unpackb(raw) if isinstance(raw, bytes | bytearray) else None
        except codec.CodecError as exc:
            return (
                f"Your reply to observation {n} is not msgpack-numpy ({exc}). Pack replies "
                "with openpi_client.msgpack_numpy.packb."
            )
        actions = decoded.get("actions") if isinstance(decoded, dict) else decoded
        if isinstance(decoded, dict) and is_error_map(decoded):
            said = last_line(str(decoded.get("message", "")))
            return (
                f"Your server answered observation {n} with an error map "
                "({'type': 'error', 'message': …}, as vLLM-Omni's robot endpoint reports a "
                "failed request)" + (f": {said}" if said else "") + ". The station would end "
                "the episode as a system failure (and never shows the text to the operator)."
            )
        if isinstance(decoded, dict) and "actions" not in decoded:
            got = ", ".join(sorted(str(k) for k in decoded)) or "none"
            return (
                f"Your reply to observation {n} has no 'actions' key (it has: {got}). Reply "
                "with {'actions': array of shape (H, D)}."
            )
        if isinstance(actions, np.ndarray) and space is not None:
            if actions.dtype.kind not in "fiu":
                return (
                    f"Your server returned actions of dtype {actions.dtype}; send numbers "
                    "(float32 or float64)."
                )
            if actions.ndim not in (1, 2) or actions.shape[-1] != space.width:
                return (
                    f"Your server returned actions of shape {shape_text(actions)}; the "
                    f"{space.value} action space needs {space.width} columns "
                    f"({COLUMNS[space]}), so a chunk of shape (H, {space.width})."
                )
            if not np.all(np.isfinite(actions.astype(np.float64))):
                return f"Your reply to observation {n} contains NaN or infinite actions."
        return super().explain_reply(check, raw, station_says, n)

    def reply_notes(self, reply: Any, str_keys: bool) -> dict[str, Any]:
        actions = reply.get("actions") if isinstance(reply, dict) else reply
        return {
            "bare": not isinstance(reply, dict),
            "str_keys": str_keys,
            "dtype": str(actions.dtype) if isinstance(actions, np.ndarray) else None,
            "ndim": int(actions.ndim) if isinstance(actions, np.ndarray) else None,
        }

    def judge_replies(self, check: CheckState, chunks: list[np.ndarray]) -> None:
        space = check.info.action_space if check.info else None
        replies = check.replies
        shapes = sorted({c.shape for c in chunks})
        shapes_seen = ", ".join(shape_text(np.empty(s)) for s in shapes)
        notes: list[str] = []
        status = Status.passed
        # servers that send a PolicyServerConfig (RoboArena's, vLLM-Omni's) reply bare arrays
        config = isinstance(check.metadata, dict) and declares_config(check.metadata)
        if self.map_replies_only and not config and any(r["bare"] for r in replies):
            status = Status.warning
            notes.append(
                "your replies are bare arrays; openpi clients expect a map "
                "{'actions': …} (RoboArena servers may reply with the array)"
            )
        if any(r["ndim"] == 1 for r in replies):
            status = Status.warning
            notes.append(
                "some replies are a single action (1-D): the station runs it as a chunk of 1"
            )
        if any(r["str_keys"] for r in replies):
            status = Status.warning
            notes.append(
                "your numpy arrays are tagged with text keys ('__ndarray__' as a str); openpi's "
                "msgpack_numpy writes and reads them as binary keys, so openpi clients "
                "would not decode your arrays (the station reads both)"
            )
        check.add(
            "replies",
            "Replies",
            status,
            f"All {len(chunks)} replies were msgpack-numpy with actions of shape {shapes_seen}"
            + ("; but " + "; ".join(notes) + "." if notes else "."),
            shapes=[list(s) for s in shapes],
        )
        dtypes = sorted({r["dtype"] for r in replies if r["dtype"]})
        odd = [d for d in dtypes if d not in ("float32", "float64")]
        if odd:
            check.add(
                "dtype",
                "Action dtype",
                Status.warning,
                f"Your actions arrive as {', '.join(odd)}; the station converts them to "
                "float64, but float32 or float64 is what it expects (float16 loses "
                "millimetres at arm's length; integers are probably a bug).",
                dtypes=dtypes,
            )
        else:
            check.add(
                "dtype",
                "Action dtype",
                Status.passed,
                f"Actions arrive as {', '.join(dtypes)}.",
                dtypes=dtypes,
            )
        check.judge_chunk_length(chunks)
        if space is not None:
            check.judge_values(chunks, space)
        if check.info is not None:
            judge_units(check, chunks, check.info)
