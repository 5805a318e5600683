"""The conformance finding on action units: which convention the station will
read a server's velocity actions in, and whether the replies contradict it.

What magnitudes can tell, and what they cannot: DROID's normalised actions
never leave [-1, 1] (``droid/robot_env.py``, ``RobotEnv.step`` asserts it;
openpi's DROID client clips to it), so velocities beyond 1 cannot be DROID's
units (a failure when the server declared them). The other way round is only
a hint: rad/s below 1 are as plausible as DROID's units, but actions that
reach exactly ±1 and never beyond are what a clipped, normalised policy
emits (a warning). Anything else is reported as read, with what to declare
if the policy was trained on DROID data.

Where the endpoint selects the units (its registration's ``action_units``, a
checkpoint's policy.toml ``[policy] action_units``), the advice is to change
that selection; a selection that differs from what the metadata declares is
its own failure (``judge_conflict``): the station runs neither until they agree.
"""

from __future__ import annotations

import numpy as np

from proctor.policywire.conformance.state import CheckState, Status
from proctor.policywire.wire import units
from proctor.policywire.wire.spec import ActionSpace, ServerInfo, UnitsConflict

CHECK = "action_units"
TITLE = "Action units"
CONFLICT_CHECK = "action_units_conflict"
CONFLICT_TITLE = "Action units: endpoint and metadata"
# where a submitter selects the units for the station
_WHERE = "the endpoint's action_units, or action_units in policy.toml's [policy]"
# a value this close to ±1 counts as saturated (float32 round-off)
_SATURATED = 1e-4

_VELOCITY = (ActionSpace.joint_velocity, ActionSpace.cartesian_velocity)
_SI_UNITS = {
    ActionSpace.joint_velocity: "rad/s",
    ActionSpace.cartesian_velocity: "m/s and rad/s",
}


def _choose(check: CheckState, name: str) -> str:
    """How to make the station read the actions in ``name`` units."""
    selected = check.options.action_units
    if selected is not None:
        return (
            f"select {units.METADATA_KEY} = '{name}' instead of '{selected}' ({_WHERE}: "
            "register the endpoint again, or upload the checkpoint again)"
        )
    return f"declare {units.METADATA_KEY}: '{name}' in your metadata (or select it: {_WHERE})"


def judge_conflict(check: CheckState, conflict: UnitsConflict) -> None:
    """The failure for a selection the metadata contradicts."""
    key = units.METADATA_KEY
    check.add(
        CONFLICT_CHECK,
        CONFLICT_TITLE,
        Status.failed,
        f"Your server's metadata declares {key}: '{conflict.declared}', but the endpoint "
        f"selects '{conflict.selected}' ({_WHERE}). The station runs neither until they "
        f"agree: either select '{conflict.declared}' or nothing for the "
        "endpoint (register it again, or upload the checkpoint again), or make your server "
        f"declare {key}: '{conflict.selected}' or nothing. The rest of this check reads "
        f"your actions as your metadata declares them, in '{conflict.declared}' units.",
        selected=conflict.selected,
        declared=conflict.declared,
    )


def judge_units(check: CheckState, chunks: list[np.ndarray], info: ServerInfo) -> None:
    """The finding for one run of the observations' replies (velocity spaces only)."""
    space = info.action_space
    if space not in _VELOCITY or not chunks:
        return
    conv = units.get(info.action_units)
    arm = np.abs(np.concatenate(chunks, axis=0)[:, :-1])
    peak = float(arm.max())
    reads = f"The station reads your {space.value} actions as {conv.velocity_text[space.value]}"
    key = units.METADATA_KEY
    if conv.name == "droid" and peak > 1.0 + _SATURATED:
        check.add(
            CHECK,
            TITLE,
            Status.failed,
            f"{reads}, but your actions reach {peak:.3g}. DROID's normalised actions lie in "
            "[-1, 1] (DROID's RobotEnv.step refuses others; the station clips them, as "
            "openpi's DROID client does), so these look like "
            f"{_SI_UNITS[space]}. If they are, {_choose(check, 'si')}; "
            "if they are DROID's units, keep them within [-1, 1].",
            action_units=conv.name,
            peak=peak,
        )
    elif conv.name == "si" and peak <= 1.0 + _SATURATED and peak >= 1.0 - _SATURATED:
        check.add(
            CHECK,
            TITLE,
            Status.warning,
            f"{reads}, but they never leave [-1, 1] and reach exactly ±1, as DROID's "
            "clipped, normalised actions do. If your policy was trained on DROID data, "
            f"{_choose(check, 'droid')}: read as {_SI_UNITS[space]} it "
            "moves several times slower than trained (in DROID's units 1.0 is "
            f"{units.DROID_MAX_JOINT_DELTA:g} rad or {units.DROID_MAX_LIN_DELTA:g} m per "
            f"15 Hz step). If they are {_SI_UNITS[space]}, {_choose(check, 'si')} and "
            "this warning remains: the magnitudes cannot tell.",
            action_units=conv.name,
            peak=peak,
        )
    else:
        other = "droid" if conv.name == "si" else "si"
        check.add(
            CHECK,
            TITLE,
            Status.passed,
            f"{reads} ({key}: '{conv.name}'). If that is not how your policy was trained, "
            f"{_choose(check, other)}.",
            action_units=conv.name,
            peak=peak,
        )
