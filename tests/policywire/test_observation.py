"""What the policy sees: the station's image resize against openpi's own
(``openpi_client.image_tools.resize_with_pad`` from PyPI, run in its own
environment), and the per-frame resize cache.

The documented tolerance (proctor/policywire/observation.py): shrinking by less
than 2× is openpi's result bit for bit; shrinking by 2× or more may differ,
over the picture (padding excluded), by at most 24 grey levels, under one
level on average, at ≥ 42 dB PSNR — with the padding, hence the geometry,
identical."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import matplotlib.cbook
import numpy as np
import pytest
from PIL import Image

from proctor.core.clock import VirtualClock
from proctor.core.domain import EndpointDialect
from proctor.policywire.observation import (
    ImageResizer,
    build_observation,
    fitted_size,
    resize_with_pad,
)
from proctor.policywire.wire.proprio import Proprio
from proctor.policywire.wire.spec import ActionSpace, ServerInfo
from proctor.station.sim.render import render_exterior, render_wrist
from proctor.station.sim.world import SimWorld
from tests.policy_servers import ROOT

OPENPI_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"
TARGET = (224, 224)

OPENPI_RESIZE = r"""
import sys
import numpy as np
from openpi_client import image_tools

src = np.load(sys.argv[1])
h, w = int(sys.argv[3]), int(sys.argv[4])
np.savez(sys.argv[2], **{k: image_tools.resize_with_pad(src[k], h, w) for k in src.files})
"""


def _pictures(width: int, height: int) -> dict[str, np.ndarray]:
    """Camera-sized pictures: both rendered views of the simulated cell mid-episode
    and a photograph (matplotlib's sample of Grace Hopper, scaled to the size)."""
    world = SimWorld(VirtualClock())
    world.reset_scene("spoons", 8, "left", "right", 1)
    snap = world.snapshot(0)
    photo = Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg")).convert("RGB")
    return {
        "exterior": render_exterior(snap, width, height),
        "wrist": render_wrist(snap, width, height),
        "photo": np.asarray(photo.resize((width, height), Image.Resampling.LANCZOS)),
    }


def _openpi(images: dict[str, np.ndarray], tmp: Path) -> dict[str, np.ndarray]:
    if not OPENPI_PYTHON.exists():
        pytest.fail(f"{OPENPI_PYTHON} is missing: `./run test` creates it")
    src, dst = tmp / "src.npz", tmp / "dst.npz"
    np.savez(src, **images)
    subprocess.run(
        [str(OPENPI_PYTHON), "-c", OPENPI_RESIZE, str(src), str(dst), *map(str, TARGET)],
        check=True,
        timeout=60,
    )
    with np.load(dst) as out:
        return {k: out[k] for k in out.files}


@pytest.mark.parametrize(("width", "height"), [(320, 240), (224, 224), (200, 150)])
def test_shrinking_by_less_than_two_is_openpis_resize_bit_for_bit(
    width: int, height: int, tmp_path: Path
) -> None:
    pictures = _pictures(width, height)
    theirs = _openpi(pictures, tmp_path)
    for name, image in pictures.items():
        ours = resize_with_pad(image, *TARGET)
        assert ours.shape == (*TARGET, 3) and ours.dtype == np.uint8
        np.testing.assert_array_equal(ours, theirs[name], err_msg=name)


@pytest.mark.parametrize(("width", "height"), [(640, 480), (1280, 720), (848, 480)])
def test_larger_frames_stay_within_the_documented_tolerance(
    width: int, height: int, tmp_path: Path
) -> None:
    pictures = _pictures(width, height)
    theirs = _openpi(pictures, tmp_path)
    nh, nw = fitted_size(height, width, *TARGET)
    top, left = (TARGET[0] - nh) // 2, (TARGET[1] - nw) // 2
    picture = np.zeros(TARGET, dtype=bool)
    picture[top : top + nh, left : left + nw] = True
    for name, image in pictures.items():
        ours = resize_with_pad(image, *TARGET)
        ref = theirs[name]
        assert ours.shape == ref.shape == (*TARGET, 3)
        # the same geometry: black exactly where openpi's padding is
        assert not ours[~picture].any() and not ref[~picture].any()
        diff = np.abs(ours[picture].astype(float) - ref[picture].astype(float))
        psnr = 10 * np.log10(255**2 / float(np.mean(diff**2)))
        print(
            f"{width}×{height} {name}: max {diff.max():.0f}, mean {diff.mean():.3f}, {psnr:.1f} dB"
        )
        assert diff.max() <= 24, name
        assert diff.mean() < 1.0, name
        assert psnr >= 42.0, name
        if name != "photo":  # flat-shaded renders: closer still
            assert psnr >= 50.0, name


def test_the_method_is_not_openpis_exact_one_beyond_two_times() -> None:
    """The tolerance test above could pass vacuously if both paths were the same:
    on white noise (the worst case) the two-step resize differs measurably."""
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    fast = resize_with_pad(noise, *TARGET).astype(float)
    exact = resize_with_pad(noise, *TARGET, reducing_gap=None).astype(float)
    assert np.abs(fast - exact).mean() > 2.0


def _info() -> ServerInfo:
    return ServerInfo(EndpointDialect.openpi, ActionSpace.joint_velocity, TARGET, 1, True, False)


def test_each_frame_is_resized_once() -> None:
    rng = np.random.default_rng(1)
    frames = [
        {
            "exterior": rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
        }
        for _ in range(2)
    ]
    proprio = Proprio(
        q=np.zeros(7), dq=np.zeros(7), ee_pose=np.array([0.4, 0, 0.4, 0, 0, 0, 1.0]), gripper=0.0
    )
    resizer = ImageResizer(TARGET)

    def observe(i: int, key: int) -> dict:
        return build_observation(
            _info(),
            proprio=proprio,
            images=frames[i],
            prompt="p",
            resizer=resizer,
            frame_keys={"exterior": key, "wrist": key},
        )

    first = observe(0, 10)
    assert resizer.resized == 2
    again = observe(0, 10)  # the same frames: nothing resized, the same arrays
    assert resizer.resized == 2
    for key in ("observation/exterior_image_1_left", "observation/wrist_image_left"):
        assert again[key] is first[key]
        assert not again[key].flags.writeable
    fresh = observe(1, 11)  # new frames: resized, and what openpi's method gives within tolerance
    assert resizer.resized == 4
    np.testing.assert_array_equal(
        fresh["observation/wrist_image_left"], resize_with_pad(frames[1]["wrist"], *TARGET)
    )
    # without keys (or without a resizer) nothing is cached
    build_observation(_info(), proprio=proprio, images=frames[0], prompt="p", resizer=resizer)
    assert resizer.resized == 6


def test_a_frame_resized_ahead_is_not_resized_again() -> None:
    """The camera's thread resizes a frame as it arrives (``prepare``); the
    query that follows, or one racing it, takes that result."""
    rng = np.random.default_rng(2)
    images = {
        "exterior": rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
        "wrist": rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
    }
    keys = {"exterior": (7, 0.5), "wrist": (7, 0.5)}
    for race in (False, True):
        resizer = ImageResizer(TARGET)
        threads = [
            threading.Thread(target=resizer.prepare, args=(name, keys[name], image))
            for name, image in images.items()
        ]
        for t in threads:
            t.start()
        if not race:
            for t in threads:
                t.join()
        sized = resizer(images, keys)
        for t in threads:
            t.join()
        # each frame resized exactly once, whoever did it
        assert resizer.resized == 2
        for name, image in images.items():
            np.testing.assert_array_equal(sized[name], resize_with_pad(image, *TARGET))
        if not race:
            assert resizer.ahead == 2
        # asking again returns the very arrays prepared
        again = resizer(images, keys)
        assert all(again[n] is sized[n] for n in images)
