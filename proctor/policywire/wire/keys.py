"""Every name the station sends to a policy server, defined once: the
observation keys of each wire (openpi DROID, RoboArena, Positronic v1) and the
simulated cell's privileged keys. The recording's own column names are
``proctor.core.recording.keys``."""

from __future__ import annotations

from enum import StrEnum

# ---------------------------------------------------------------------------
# Policy wire protocol: observation keys (openpi DROID names, RoboArena dialect)
# ---------------------------------------------------------------------------

OBS_EXTERIOR_IMAGE = "observation/exterior_image_1_left"  # openpi DROID
OBS_WRIST_IMAGE = "observation/wrist_image_left"
OBS_JOINT_POSITION = "observation/joint_position"  # (7,)
OBS_CARTESIAN_POSITION = "observation/cartesian_position"  # (6,) xyz + extrinsic xyz Euler
OBS_GRIPPER_POSITION = "observation/gripper_position"  # (1,)
OBS_PROMPT = "prompt"
ROBOARENA_ENDPOINT = "endpoint"  # "infer" | "reset"
ROBOARENA_SESSION_ID = "session_id"


# Where the numbering of exterior cameras starts. The policies served on these
# wires read from 1: openpi's DROID policies (``openpi/policies/droid_policy.py``
# reads ``observation/exterior_image_1_left``), the DROID dataset's
# ``exterior_image_1_left``/``_2_left``, third-party RoboArena clients. RoboArena's
# own test script and vLLM-Omni's DreamZero (``exterior_image_0_left`` and
# ``_1_left``) read from 0, so an endpoint may choose either.
EXTERIOR_FIRST_INDEX = 1
EXTERIOR_NUMBERINGS = (0, 1)


def exterior_image(index: int, eye: str = "left") -> str:
    """The observation key of exterior camera ``index`` (numbered as the endpoint chose)."""
    return f"observation/exterior_image_{index}_{eye}"


REPLY_ACTIONS = "actions"  # (H, D) action chunk in the reply

# The Positronic v1 wire (Positronic-Robotics/positronic, ``positronic/offboard``):
# its own observation names, and the channels of each action in a reply's ``result``
POSITRONIC_JOINTS = "robot_state.q"  # (7,) rad
POSITRONIC_JOINT_VELOCITY = "robot_state.dq"  # (7,) rad/s
POSITRONIC_EE_POSE = "robot_state.ee_pose"  # (7,) [x, y, z, qw, qx, qy, qz]: scalar FIRST
POSITRONIC_GRIP = "grip"  # (1,) gripper closure, 0 open … 1 closed
POSITRONIC_TASK = "task"  # the language instruction
POSITRONIC_EXTERIOR_IMAGE = "image.exterior"
POSITRONIC_WRIST_IMAGE = "image.wrist"
POSITRONIC_ROBOT_COMMAND = "robot_command"  # a command: cartesian_pos | joint_pos | …
POSITRONIC_TARGET_GRIP = "target_grip"  # float in [0, 1]
POSITRONIC_TIMESTAMP = "timestamp"  # s after the call the action is due

# Privileged observation keys, sent ONLY by the simulated cell (profile ``sim``)
# so that scripted demo policies know where things are. A real station never
# sends them; a policy that needs them cannot run on hardware.
SIM_PREFIX = "sim/"
SIM_ITEMS = "sim/items"  # (N, 4) float: x, y, z, ItemState code per item
SIM_SOURCE_BIN = "sim/source_bin"  # (4,) inner rectangle: centre x, centre y, half x, half y
SIM_TARGET_BIN = "sim/target_bin"  # (4,) same for the target bin
SIM_BIN_HEIGHT = "sim/bin_height"  # (1,) wall height, m
SIM_SEED = "sim/seed"  # (1,) the episode's sim seed (lets a scripted policy be reproducible)
SIM_TIME = "sim/t"  # (1,) seconds since the episode started, station clock


class ItemState(StrEnum):
    """Where a simulated item is; its code (index) is what ``sim/items`` carries."""

    source = "source"  # in the source bin, pickable
    held = "held"  # between the fingers
    placed = "placed"  # in the target bin
    dropped = "dropped"  # on the table inside the workspace, pickable again
    lost = "lost"  # outside the workspace, unrecoverable

    @property
    def code(self) -> int:
        return _ITEM_CODES[self]


_ITEM_CODES = {s: i for i, s in enumerate(ItemState)}
ITEM_STATE_BY_CODE = {i: s for s, i in _ITEM_CODES.items()}
