"""The wire format and the protocol's rules, without a network."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from proctor.core.domain import EndpointDialect
from proctor.policywire.handshake import parse_metadata, public_info
from proctor.policywire.wire import codec
from proctor.policywire.wire.spec import ActionSpace, ProtocolError, extract_chunk
from proctor.station.control.commands import to_commands
from proctor.station.drivers.arm.base import ArmCommandKind


def test_arrays_scalars_and_strings_round_trip() -> None:
    obs = {
        "observation/exterior_image_1_left": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
        "observation/joint_position": np.linspace(-1, 1, 7),
        "observation/gripper_position": np.array([0.25], dtype=np.float32),
        "prompt": "put the spoons in the bin",
        "n": np.int64(7),
        "nested": {"list": [1, 2.5, "x"], "shape": (2, 3)},
    }
    back = codec.unpackb(codec.packb(obs))
    for key in ("observation/exterior_image_1_left", "observation/joint_position"):
        assert back[key].dtype == obs[key].dtype and back[key].shape == obs[key].shape
        np.testing.assert_array_equal(back[key], obs[key])
    assert back["prompt"] == obs["prompt"]
    assert back["n"] == 7 and isinstance(back["n"], np.int64)
    assert back["nested"] == {"list": [1, 2.5, "x"], "shape": [2, 3]}


def test_array_keys_are_written_as_bytes_like_openpi() -> None:
    raw = msgpack.unpackb(codec.packb({"a": np.zeros(2)}), raw=False)
    assert b"__ndarray__" in raw["a"] and b"dtype" in raw["a"]


def test_str_keyed_arrays_from_other_implementations_are_read() -> None:
    data = np.array([1.0, 2.0])
    message = msgpack.packb(
        {"x": {"__ndarray__": True, "data": data.tobytes(), "dtype": "<f8", "shape": [2]}}
    )
    np.testing.assert_array_equal(codec.unpackb(message)["x"], data)


@pytest.mark.parametrize("dtype", [object, "V8", np.complex128])
def test_refuses_pickle_prone_dtypes_on_the_way_out(dtype: object) -> None:
    with pytest.raises(codec.CodecError):
        codec.packb({"a": np.zeros(2, dtype=dtype)})


def test_refuses_object_arrays_and_bad_sizes_on_the_way_in() -> None:
    evil = msgpack.packb(
        {b"__ndarray__": True, b"data": b"\x80\x04N.", b"dtype": "|O", b"shape": [1]}
    )
    with pytest.raises(codec.CodecError, match="refusing"):
        codec.unpackb(evil)
    short = msgpack.packb(
        {b"__ndarray__": True, b"data": b"\x00" * 8, b"dtype": "<f8", b"shape": [2]}
    )
    with pytest.raises(codec.CodecError, match="length does not match its shape"):
        codec.unpackb(short)
    with pytest.raises(codec.CodecError, match="not a msgpack message"):
        codec.unpackb(b"\xc1")


def test_openpi_metadata_gets_droid_defaults() -> None:
    info = parse_metadata({}, dialect=None, default_image_size=(224, 224))
    assert info.dialect == EndpointDialect.openpi
    assert info.action_space == ActionSpace.joint_velocity
    assert info.image_size == (224, 224)
    info = parse_metadata(
        {"action_space": "cartesian_position", "name": "x"}, dialect=None, default_image_size=(1, 1)
    )
    assert info.dialect == EndpointDialect.openpi and info.action_space.width == 7
    # nothing the server says about itself is kept
    assert "name" not in public_info(info)


def test_roboarena_metadata_is_detected_and_checked() -> None:
    meta = {
        "image_resolution": (180, 320),
        "needs_wrist_camera": True,
        "n_external_cameras": 1,
        "needs_stereo_camera": False,
        "needs_session_id": True,
        "action_space": "joint_position",
    }
    info = parse_metadata(meta, dialect=None, default_image_size=(224, 224))
    assert info.dialect == EndpointDialect.roboarena
    assert info.image_size == (180, 320) and info.needs_session_id
    with pytest.raises(ProtocolError, match="needs more exterior cameras than this station's 1"):
        parse_metadata({**meta, "n_external_cameras": 2}, dialect=None, default_image_size=(1, 1))
    with pytest.raises(ProtocolError, match="action_space: a str of length 6 is not one of"):
        parse_metadata({**meta, "action_space": "eef_9d"}, dialect=None, default_image_size=(1, 1))
    with pytest.raises(ProtocolError, match="stereo"):
        parse_metadata(
            {**meta, "needs_stereo_camera": True}, dialect=None, default_image_size=(1, 1)
        )


def test_chunks_are_validated() -> None:
    space = ActionSpace.joint_position
    good = np.zeros((10, 8), dtype=np.float32)
    assert extract_chunk({"actions": good}, space).shape == (10, 8)
    assert extract_chunk(good, space).dtype == np.float64  # RoboArena's bare array
    assert extract_chunk({"actions": np.zeros(8)}, space).shape == (1, 8)
    with pytest.raises(ProtocolError, match=r"shape \(10, 5\); joint_position needs \(H, 8\)"):
        extract_chunk({"actions": np.zeros((10, 5))}, space)
    with pytest.raises(ProtocolError, match="no 'actions'"):
        extract_chunk({"action": good}, space)
    bad = good.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ProtocolError, match="NaN"):
        extract_chunk({"actions": bad}, space)
    with pytest.raises(ProtocolError, match="must be an array"):
        extract_chunk({"actions": [[0.0] * 8]}, space)


def test_cartesian_actions_become_pose_commands() -> None:
    row = np.array([0.5, -0.1, 0.2, np.pi, 0.0, 0.0, 1.7])
    cmd = to_commands(row, ActionSpace.cartesian_position)
    assert cmd.arm.kind == ArmCommandKind.cartesian_pose
    np.testing.assert_allclose(cmd.arm.target[:3], row[:3])
    # roll = π: the fingers point down, quaternion (1, 0, 0, 0) up to sign
    np.testing.assert_allclose(np.abs(cmd.arm.target[3:]), [1, 0, 0, 0], atol=1e-9)
    assert cmd.gripper.position == 1.0 and cmd.gripper_requested == 1.0  # clipped


def test_the_conformance_checks_joint_limits_are_the_arms() -> None:
    """The protocol layer cannot read the arm's driver config, so its advice on
    joint targets carries the FR3's limits itself: the same numbers."""
    from proctor.policywire.conformance.exchange import FR3_Q_MAX, FR3_Q_MIN
    from proctor.station.drivers.arm.base import ArmConfig

    assert (ArmConfig().q_min, ArmConfig().q_max) == (FR3_Q_MIN, FR3_Q_MAX)
