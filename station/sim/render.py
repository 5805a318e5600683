"""Rendering the simulated cell's two cameras from world snapshots.

Pinhole projection of the scene's primitives (table, bins, items, arm links,
fingers) drawn with Pillow's C rasteriser in painter's order. The exterior
camera stands on the left or right of the table (the spatial
configuration) and caches everything static; the wrist camera rides on the
gripper, looking down past the fingers. Plain geometry and flat colours:
enough to see what happened, and cheap enough to run at 15–30 fps beside
the simulator.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from proctor.domain import Side
from station import keys
from station.sim.world import Bin, Layout, Snapshot

FLOOR = (58, 58, 62)
TABLE = (168, 160, 146)
BIN_FLOOR = {"source": (92, 120, 150), "target": (96, 150, 104)}
BIN_WALL = {"source": (60, 86, 120), "target": (60, 118, 70)}
ARM = (225, 225, 228)
ARM_EDGE = (120, 120, 126)
FINGERS = (40, 40, 44)
_CODE_LOST = keys.ItemState.lost.code
_CODE_HELD = keys.ItemState.held.code


@dataclass(frozen=True)
class Pinhole:
    """A camera at ``origin`` with rotation rows (right, down, forward)."""

    origin: np.ndarray
    rot: np.ndarray  # (3, 3): rows are the camera's x (right), y (down), z (forward)
    width: int
    height: int
    focal: float

    @classmethod
    def look_at(
        cls,
        origin: np.ndarray,
        target: np.ndarray,
        up: np.ndarray,
        width: int,
        height: int,
        hfov_deg: float,
    ) -> Pinhole:
        fwd = target - origin
        fwd = fwd / np.linalg.norm(fwd)
        right = _cross(fwd, up)
        right = right / math.sqrt(float(right @ right))
        down = _cross(fwd, right)
        focal = (width / 2) / math.tan(math.radians(hfov_deg) / 2)
        return cls(np.asarray(origin, float), np.stack([right, down, fwd]), width, height, focal)

    def to_camera(self, points: np.ndarray) -> np.ndarray:
        return (np.asarray(points, float) - self.origin) @ self.rot.T

    def pixels(self, cam: np.ndarray) -> np.ndarray:
        z = np.maximum(cam[:, 2], 1e-3)
        u = self.width / 2 + self.focal * cam[:, 0] / z
        v = self.height / 2 + self.focal * cam[:, 1] / z
        return np.stack([u, v], axis=1)

    def polygon(
        self, draw: ImageDraw.ImageDraw, points: np.ndarray, fill: object, near: float = 0.02
    ) -> None:
        """Fill a planar polygon, clipped against the near plane."""
        cam = self.to_camera(points)
        if (cam[:, 2] < near).any():
            cam = _clip_near(cam, near)
            if len(cam) < 3:
                return
        px = self.pixels(cam)
        draw.polygon([(float(u), float(v)) for u, v in px], fill=fill)

    def segment(
        self, draw: ImageDraw.ImageDraw, a: np.ndarray, b: np.ndarray, radius: float, fill: object
    ) -> None:
        cam = self.to_camera(np.stack([a, b]))
        if (cam[:, 2] < 0.02).any():
            return
        px = self.pixels(cam)
        w = max(1, round(self.focal * 2 * radius / float(cam[:, 2].mean())))
        draw.line([tuple(px[0]), tuple(px[1])], fill=fill, width=w)


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # np.cross costs ~20 µs for two 3-vectors; this is a tenth of that
    return np.array(
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    )


def _clip_near(cam: np.ndarray, near: float) -> np.ndarray:
    """Sutherland–Hodgman against z = near."""
    out = []
    n = len(cam)
    for i in range(n):
        a, b = cam[i], cam[(i + 1) % n]
        ina, inb = a[2] >= near, b[2] >= near
        if ina:
            out.append(a)
        if ina != inb:
            s = (near - a[2]) / (b[2] - a[2])
            out.append(a + s * (b - a))
    return np.array(out) if out else np.empty((0, 3))


def _bin_floor(b: Bin) -> np.ndarray:
    x0, x1, y0, y1 = b.cx - b.half_x, b.cx + b.half_x, b.cy - b.half_y, b.cy + b.half_y
    return np.array([[x0, y0, 0.001], [x1, y0, 0.001], [x1, y1, 0.001], [x0, y1, 0.001]])


def _bin_walls(b: Bin) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each wall as (inner face quad, outward normal)."""
    x0, x1, y0, y1, h = b.cx - b.half_x, b.cx + b.half_x, b.cy - b.half_y, b.cy + b.half_y, b.height
    walls = [
        (np.array([[x0, y0, 0], [x1, y0, 0], [x1, y0, h], [x0, y0, h]]), np.array([0, -1, 0])),
        (np.array([[x0, y1, 0], [x1, y1, 0], [x1, y1, h], [x0, y1, h]]), np.array([0, 1, 0])),
        (np.array([[x0, y0, 0], [x0, y1, 0], [x0, y1, h], [x0, y0, h]]), np.array([-1, 0, 0])),
        (np.array([[x1, y0, 0], [x1, y1, 0], [x1, y1, h], [x1, y0, h]]), np.array([1, 0, 0])),
    ]
    return walls


def _bins(layout: Layout) -> list[tuple[str, Bin]]:
    return [("source", layout.source), ("target", layout.target)]


@lru_cache(maxsize=16)
def exterior_camera(camera_side: Side, width: int, height: int) -> Pinhole:
    """On a tripod across the table, to the robot's left or right, looking at the bins."""
    y = 0.62 if camera_side == Side.left else -0.62
    return Pinhole.look_at(
        np.array([1.35, y, 0.95]),
        np.array([0.40, 0.0, 0.12]),
        np.array([0.0, 0.0, 1.0]),
        width,
        height,
        hfov_deg=64,
    )


@dataclass(frozen=True)
class _Overlay:
    """The near walls of the exterior view: colour and alpha, cropped to their box."""

    box: tuple[int, int, int, int]
    color: Image.Image
    mask: Image.Image


@lru_cache(maxsize=16)
def _exterior_layers(
    layout: Layout, width: int, height: int
) -> tuple[Image.Image, _Overlay | None]:
    """Static background and the near-wall overlay, per configuration and size."""
    cam = exterior_camera(layout.camera_side, width, height)
    img = Image.new("RGB", (width, height), FLOOR)
    draw = ImageDraw.Draw(img)
    tx, ty = layout.table_x, layout.table_y
    table = np.array(
        [[tx[0] - 0.3, ty[0], 0], [tx[1], ty[0], 0], [tx[1], ty[1], 0], [tx[0] - 0.3, ty[1], 0]]
    )
    cam.polygon(draw, table, TABLE)
    ring = np.linspace(0, 2 * math.pi, 12, endpoint=False)
    base = np.stack([np.cos(ring) * 0.1, np.sin(ring) * 0.1, np.zeros(12)], axis=1)
    cam.polygon(draw, base, (90, 90, 96))
    near_color = Image.new("RGB", (width, height), (0, 0, 0))
    near_mask = Image.new("L", (width, height), 0)
    dc, dm = ImageDraw.Draw(near_color), ImageDraw.Draw(near_mask)
    for name, b in _bins(layout):
        cam.polygon(draw, _bin_floor(b), BIN_FLOOR[name])
        for quad, normal in _bin_walls(b):
            centre = quad.mean(axis=0)
            if float(np.dot(cam.origin - centre, normal)) > 0:
                # we see its outer face: it hides what is behind it
                cam.polygon(dc, quad, BIN_WALL[name])
                cam.polygon(dm, quad, 170)
            else:  # we see its inner face
                cam.polygon(draw, quad, BIN_WALL[name])
    box = near_mask.getbbox()
    if box is None:
        return img, None
    return img, _Overlay(box, near_color.crop(box), near_mask.crop(box))


_RING = np.linspace(0, 2 * math.pi, 10, endpoint=False)
_RING_COS, _RING_SIN = np.cos(_RING), np.sin(_RING)


def _item_outlines(snap: Snapshot) -> np.ndarray:
    """(N, 10, 3): each item's top outline (an ellipse of its length × width)."""
    spec, items = snap.spec, snap.items
    lx = _RING_COS * spec.length / 2
    ly = _RING_SIN * spec.width / 2
    c = np.cos(items[:, 3])[:, None]
    s = np.sin(items[:, 3])[:, None]
    out = np.empty((len(items), len(_RING), 3))
    out[:, :, 0] = items[:, 0:1] + c * lx - s * ly
    out[:, :, 1] = items[:, 1:2] + s * lx + c * ly
    out[:, :, 2] = items[:, 2:3] + spec.height / 2
    return out


def _finger_points(snap: Snapshot) -> np.ndarray:
    """(2, 4, 3): each finger pad as a quad (root and tip, ± half its width)."""
    tool = snap.tool
    tcp, x_axis, y_axis, z_axis = tool[:3, 3], tool[:3, 0], tool[:3, 1], tool[:3, 2]
    opening = 0.085 * (1.0 - snap.gripper) / 2 + 0.006
    out = np.empty((2, 4, 3))
    for k, side in enumerate((-1.0, 1.0)):
        tip = tcp + side * opening * y_axis + 0.012 * z_axis
        root = tip - 0.055 * z_axis
        half = 0.011 * x_axis
        out[k] = [root - half, root + half, tip + half, tip - half]
    return out


def _draw_projected_items(
    draw: ImageDraw.ImageDraw, snap: Snapshot, px: np.ndarray, depth: np.ndarray, held: bool
) -> None:
    """Items by their projected outlines ``px`` (N, 10, 2), far ones first."""
    spec = snap.spec
    edge = tuple(max(0, c - 60) for c in spec.color)
    codes = snap.items[:, 4].astype(int)
    for i in np.argsort(-depth.mean(axis=1)):
        if codes[i] == _CODE_LOST or (codes[i] == _CODE_HELD) != held:
            continue
        if depth[i].min() < 0.02:
            continue
        draw.polygon(px[i].ravel().tolist(), fill=spec.color, outline=edge)


def _line_width(cam: Pinhole, radius: float, depth: float) -> int:
    return max(1, round(cam.focal * 2 * radius / max(depth, 0.02)))


_LINKS = ((0, 1, 0.06), (1, 3, 0.055), (3, 4, 0.05), (4, 5, 0.045), (5, 6, 0.04))


# per rendering thread: (what was drawn, background + resting items + near walls)
_RESTING_LAYER: dict[int, tuple[tuple[object, ...], Image.Image]] = {}


def render_exterior(snap: Snapshot, width: int, height: int) -> np.ndarray:
    background, overlay = _exterior_layers(snap.layout, width, height)
    cam = exterior_camera(snap.layout.camera_side, width, height)
    n = len(snap.items)
    outlines = _item_outlines(snap).reshape(-1, 3)
    fingers = _finger_points(snap).reshape(-1, 3)
    tool = snap.tool
    body = np.stack([tool[:3, 3] - 0.06 * tool[:3, 2], tool[:3, 3] - 0.13 * tool[:3, 2]])
    points = np.concatenate([outlines, snap.origins, np.zeros((1, 3)), fingers, body])
    cam_pts = cam.to_camera(points)
    px = cam.pixels(cam_pts)
    depth = cam_pts[:, 2]
    m = n * len(_RING)
    item_px = px[:m].reshape(n, len(_RING), 2)
    item_depth = depth[:m].reshape(n, len(_RING))
    arm_px, arm_depth = px[m : m + 9], depth[m : m + 9]
    finger_px = px[m + 9 : m + 17].reshape(2, 4, 2)
    body_px, body_depth = px[m + 17 :], depth[m + 17 :]

    # the resting items change only when one is picked or lands: keep that layer
    resting = snap.items[snap.items[:, 4] != _CODE_HELD]
    key = (snap.layout, snap.spec.name, width, height, resting.tobytes())
    cached = _RESTING_LAYER.get(threading.get_ident())
    if cached is not None and cached[0] == key:
        img = cached[1].copy()
    else:
        img = background.copy()
        draw = ImageDraw.Draw(img)
        _draw_projected_items(draw, snap, item_px, item_depth, held=False)
        if overlay is not None:
            img.paste(overlay.color, overlay.box, overlay.mask)
        if len(_RESTING_LAYER) > 32:  # threads come and go with runners
            _RESTING_LAYER.clear()
        _RESTING_LAYER[threading.get_ident()] = (key, img.copy())
    draw = ImageDraw.Draw(img)
    # the base column, then the links
    draw.line(
        [*arm_px[8], *arm_px[0]], fill=ARM_EDGE, width=_line_width(cam, 0.07, float(arm_depth[0]))
    )
    for a, b, r in _LINKS:
        w = _line_width(cam, r, float(arm_depth[a] + arm_depth[b]) / 2)
        draw.line([*arm_px[a], *arm_px[b]], fill=ARM, width=w)
    draw.line(
        [*body_px[0], *body_px[1]],
        fill=FINGERS,
        width=_line_width(cam, 0.035, float(body_depth.mean())),
    )
    for k in range(2):
        draw.polygon(finger_px[k].ravel().tolist(), fill=FINGERS)
    _draw_projected_items(draw, snap, item_px, item_depth, held=True)
    return np.asarray(img)


def wrist_camera(snap: Snapshot, width: int, height: int) -> Pinhole:
    tool = snap.tool
    tcp, x_axis, z_axis = tool[:3, 3], tool[:3, 0], tool[:3, 2]
    origin = tcp - 0.14 * z_axis - 0.07 * x_axis
    return Pinhole.look_at(origin, tcp + 0.08 * z_axis, -x_axis, width, height, hfov_deg=80)


@lru_cache(maxsize=16)
def _bin_geometry(layout: Layout) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """All bin polygons stacked (floors, then walls), and (colour key, vertex count) for each."""
    polys: list[np.ndarray] = []
    spans: list[tuple[str, int]] = []
    for name, b in _bins(layout):
        polys.append(_bin_floor(b))
        spans.append((f"floor:{name}", 4))
    for name, b in _bins(layout):
        for quad, _ in _bin_walls(b):
            polys.append(quad)
            spans.append((f"wall:{name}", 4))
    return np.concatenate(polys), spans


def render_wrist(snap: Snapshot, width: int, height: int) -> np.ndarray:
    cam = wrist_camera(snap, width, height)
    bins, spans = _bin_geometry(snap.layout)
    n = len(snap.items)
    outlines = _item_outlines(snap).reshape(-1, 3)
    fingers = _finger_points(snap).reshape(-1, 3)
    points = np.concatenate([bins, outlines, fingers])
    cam_pts = cam.to_camera(points)
    px = cam.pixels(cam_pts)
    depth = cam_pts[:, 2]

    img = Image.new("RGB", (width, height), TABLE)
    draw = ImageDraw.Draw(img)
    colors = {
        **{f"floor:{k}": v for k, v in BIN_FLOOR.items()},
        **{f"wall:{k}": v for k, v in BIN_WALL.items()},
    }

    def bin_polys(prefix: str) -> None:
        i = 0
        for key, count in spans:
            if key.startswith(prefix):
                if depth[i : i + count].min() >= 0.02:
                    draw.polygon(px[i : i + count].ravel().tolist(), fill=colors[key])
                else:
                    cam.polygon(draw, bins[i : i + count], colors[key])
            i += count

    bin_polys("floor:")
    m0 = len(bins)
    m1 = m0 + n * len(_RING)
    item_px = px[m0:m1].reshape(n, len(_RING), 2)
    item_depth = depth[m0:m1].reshape(n, len(_RING))
    _draw_projected_items(draw, snap, item_px, item_depth, held=False)
    bin_polys("wall:")
    _draw_projected_items(draw, snap, item_px, item_depth, held=True)
    finger_px, finger_depth = px[m1:].reshape(2, 4, 2), depth[m1:].reshape(2, 4)
    for k in range(2):
        if finger_depth[k].min() >= 0.02:
            draw.polygon(finger_px[k].ravel().tolist(), fill=FINGERS)
    return np.asarray(img)


RENDERERS = {keys.CAMERA_EXTERIOR: render_exterior, keys.CAMERA_WRIST: render_wrist}
