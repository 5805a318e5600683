"""What the station will send a server, and how it will play the replies: the
finding that lets a submitter compare, before a campaign, the station's
requests with what their server reads.

The request is built by the station's own code (``build_observation`` and the
dialect's session framing) from a recorded observation, so the keys, shapes
and dtypes listed are the ones a campaign sends, not a description of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from proctor.policywire.conformance import dialects as dialect_checks
from proctor.policywire.conformance.observations import observations_for
from proctor.policywire.conformance.state import COLUMNS, CheckState, Status
from proctor.policywire.handshake import dialect_of
from proctor.policywire.wire import keys, units
from proctor.policywire.wire.spec import ServerInfo

TITLE = "What the station will send"


def value_text(value: Any) -> str:
    """A request value as the report lists it: dtype and shape, or its kind."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {tuple(int(n) for n in value.shape)}"
    if isinstance(value, str):
        return "text"
    return type(value).__name__


def request_layout(check: CheckState, info: ServerInfo) -> dict[str, str]:
    """Key → value text of one request as the station frames it (no sim-only keys)."""
    obs = observations_for(info, replace(check.options, sim_keys=False))[0]
    try:
        framed = dialect_of(info).session(info).request(dict(obs), "session-id")
    except NotImplementedError:  # a dialect whose session only its handshake makes
        framed = obs
    return {str(k): value_text(v) for k, v in sorted(framed.items(), key=lambda kv: str(kv[0]))}


def _images_text(info: ServerInfo) -> str:
    cams = dialect_of(info).image_keys(info)
    if not cams:
        return "no images"
    if info.image_size is None:
        size = "at the cameras' own size"
    elif info.pad_images:
        size = f"fitted into {info.image_size[0]}×{info.image_size[1]} (H×W) and padded black"
    else:
        size = f"shrunk to fit inside {info.image_size[0]}×{info.image_size[1]} (H×W)"
    listed = ", ".join(f"{key} ({cam} camera)" for key, cam in cams.items())
    text = f"images {listed}, uint8 RGB, {size}"
    if dialect_of(info).numbers_exterior_cameras and info.n_external_cameras:
        first = info.exterior_first_index
        text += (
            f"; exterior cameras numbered from {first} (the endpoint's exterior_numbering: "
            "openpi's DROID policies read from 1, RoboArena's test script and DreamZero from 0)"
        )
    return text


def _actions_text(check: CheckState, info: ServerInfo) -> str:
    space = info.action_space or check.expect.action_space
    if space is None:
        return "actions in the space each reply's commands name"
    # a velocity row's meaning depends on the server's action units (SI or DROID's)
    said = units.get(info.action_units).velocity_text.get(space.value)
    if said is None:
        return f"actions read as {space.value}: {COLUMNS[space]}"
    source = ", selected for the endpoint" if check.options.action_units else ""
    return (
        f"actions read as {space.value} in {info.action_units} units "
        f"({units.METADATA_KEY}{source}): {said}; the last column the gripper"
    )


def _playback_text(check: CheckState, info: ServerInfo) -> str:
    o = check.options
    start = (
        "from the row due when the reply arrives (rows are timed from the request)"
        if dialect_of(info).chunk_timed_from_call
        else "from the first row"
    )
    return (
        f"each reply's rows are played one per control step at {o.control_hz:g} Hz {start}, "
        f"at most {o.open_loop_steps} rows before the next request"
    )


def station_sends(check: CheckState, info: ServerInfo) -> None:
    """The finding listing the request, the images, the action units and the playback."""
    layout = request_layout(check, info)
    sim = (
        sorted(
            str(k)
            for k in observations_for(info, check.options)[0]
            if str(k).startswith(keys.SIM_PREFIX)
        )
        if check.options.sim_keys
        else []
    )
    wire_text = dialect_checks.get(dialect_of(info).name).wire_text
    message = (
        f"With your server the station speaks the {wire_text}. Each request "
        f"carries {', '.join(layout)}; {_images_text(info)}. It reads "
        f"{_actions_text(check, info)}; {_playback_text(check, info)}."
    )
    if sim:
        message += " On the simulated cell it adds the privileged keys " + ", ".join(sim) + "."
    check.add(
        "station_sends",
        TITLE,
        Status.passed,
        message,
        request=layout,
        image_size=list(info.image_size) if info.image_size else None,
        exterior_first_index=(
            info.exterior_first_index if dialect_of(info).numbers_exterior_cameras else None
        ),
        action_space=str(info.action_space or check.expect.action_space or "") or None,
        action_units=info.action_units,
        control_hz=check.options.control_hz,
        open_loop_steps=check.options.open_loop_steps,
    )
