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

from proctor.core.domain import Side
from proctor.core.recording import keys
from proctor.policywire.wire import keys as wire_keys
from proctor.station.sim.world import Bin, Layout, Snapshot

FLOOR = (58, 58, 62)
TABLE = (168, 160, 146)
BIN_FLOOR = {"source": (92, 120, 150), "target": (96, 150, 104)}
BIN_WALL = {"source": (60, 86, 120), "target": (60, 118, 70)}
ARM = (225, 225, 228)
ARM_EDGE = (120, 120, 126)
FINGERS = (40, 40, 44)
_CODE_LOST = wire_keys.ItemState.lost.code
_CODE_HELD = wire_keys.ItemState.held.code


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


@lru_cache(maxsize=64)
def _ring(length: float, width: float) -> tuple[np.ndarray, np.ndarray]:
    return _RING_COS * length / 2, _RING_SIN * width / 2


def _item_outlines(snap: Snapshot) -> np.ndarray:
    """(N, 10, 3): each item's top outline (an ellipse of its length × width)."""
    spec, items = snap.spec, snap.items
    lx, ly = _ring(spec.length, spec.width)
    c = np.cos(items[:, 3])[:, None]
    s = np.sin(items[:, 3])[:, None]
    out = np.empty((len(items), len(_RING), 3))
    out[:, :, 0] = items[:, 0:1] + c * lx - s * ly
    out[:, :, 1] = items[:, 1:2] + s * lx + c * ly
    out[:, :, 2] = items[:, 2:3] + spec.height / 2
    return out


# a finger pad in the tool frame: 22 mm wide (x), from 43 mm above the TCP to 12 mm
# past it (z), at ± the opening (y); the y column is filled per frame
_PAD = np.array(
    [[-0.011, 0.0, -0.043], [0.011, 0.0, -0.043], [0.011, 0.0, 0.012], [-0.011, 0.0, 0.012]]
)


def _finger_points(snap: Snapshot) -> np.ndarray:
    """(2, 4, 3): each finger pad as a quad (root and tip, ± half its width)."""
    tool = snap.tool
    opening = 0.085 * (1.0 - snap.gripper) / 2 + 0.006
    local = np.concatenate([_PAD, _PAD])
    local[:4, 1] = -opening
    local[4:, 1] = opening
    return (local @ tool[:3, :3].T + tool[:3, 3]).reshape(2, 4, 3)


@lru_cache(maxsize=64)
def _edge_color(color: tuple[int, int, int]) -> tuple[int, ...]:
    return tuple(max(0, c - 60) for c in color)


@dataclass(frozen=True)
class _ItemPolygons:
    """The items' projected outlines, far ones first, split by whether they are held."""

    resting: list[list[float]]
    held: list[list[float]]

    @classmethod
    def of(cls, snap: Snapshot, px: np.ndarray, depth: np.ndarray) -> _ItemPolygons:
        codes = snap.items[:, 4]
        # lost items are gone; an outline reaching behind the camera is not drawn
        shown = (codes != _CODE_LOST) & (depth.min(axis=1) >= 0.02)
        is_held = codes == _CODE_HELD
        rows = px.reshape(len(px), 2 * px.shape[1]).tolist()
        resting: list[list[float]] = []
        held: list[list[float]] = []
        for i in np.argsort(-depth.mean(axis=1)).tolist():
            if shown[i]:
                (held if is_held[i] else resting).append(rows[i])
        return cls(resting, held)


def _draw_items(draw: ImageDraw.ImageDraw, snap: Snapshot, polygons: list[list[float]]) -> None:
    color = snap.spec.color
    edge = _edge_color(tuple(color))
    for xy in polygons:
        draw.polygon(xy, fill=color, outline=edge)


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
    # the arm's nine points (joints, TCP, base), the fingers' two quads and the body's
    # two ends, as plain floats: Pillow takes lists, and numpy scalars are slow here
    arm_px, arm_depth = px[m : m + 9].tolist(), depth[m : m + 9].tolist()
    finger_px = px[m + 9 : m + 17].reshape(2, 8).tolist()
    body_px, body_depth = px[m + 17 :].tolist(), depth[m + 17 :].tolist()

    # the resting items change only when one is picked or lands: keep that layer
    resting = snap.items[snap.items[:, 4] != _CODE_HELD]
    key = (snap.layout, snap.spec.name, width, height, resting.tobytes())
    cached = _RESTING_LAYER.get(threading.get_ident())
    items = _ItemPolygons.of(snap, item_px, item_depth)
    if cached is not None and cached[0] == key:
        img = cached[1].copy()
    else:
        img = background.copy()
        draw = ImageDraw.Draw(img)
        _draw_items(draw, snap, items.resting)
        if overlay is not None:
            img.paste(overlay.color, overlay.box, overlay.mask)
        if len(_RESTING_LAYER) > 32:  # threads come and go with runners
            _RESTING_LAYER.clear()
        _RESTING_LAYER[threading.get_ident()] = (key, img.copy())
    draw = ImageDraw.Draw(img)
    # the base column, then the links
    draw.line(arm_px[8] + arm_px[0], fill=ARM_EDGE, width=_line_width(cam, 0.07, arm_depth[0]))
    for a, b, r in _LINKS:
        w = _line_width(cam, r, (arm_depth[a] + arm_depth[b]) / 2)
        draw.line(arm_px[a] + arm_px[b], fill=ARM, width=w)
    draw.line(
        body_px[0] + body_px[1],
        fill=FINGERS,
        width=_line_width(cam, 0.035, (body_depth[0] + body_depth[1]) / 2),
    )
    for quad in finger_px:
        draw.polygon(quad, fill=FINGERS)
    _draw_items(draw, snap, items.held)
    return np.asarray(img)


# The wrist camera rides on the tool: 14 cm behind the TCP and 7 cm to the side
# (−x), looking at a point 8 cm past the fingertips with −x up. In the tool frame
# that is one fixed rotation; the world rotation is it times the tool's.
_WRIST_ORIGIN = np.array([-0.07, 0.0, -0.14])
_WRIST_HFOV_DEG = 80.0


def _wrist_rotation() -> np.ndarray:
    fwd = np.array([0.0, 0.0, 0.08]) - _WRIST_ORIGIN
    fwd = fwd / np.linalg.norm(fwd)
    right = _cross(fwd, np.array([-1.0, 0.0, 0.0]))
    right = right / np.linalg.norm(right)
    return np.stack([right, _cross(fwd, right), fwd])  # rows in the tool frame


_WRIST_ROT = _wrist_rotation()


@lru_cache(maxsize=16)
def _focal(width: int, hfov_deg: float) -> float:
    return (width / 2) / math.tan(math.radians(hfov_deg) / 2)


def wrist_camera(snap: Snapshot, width: int, height: int) -> Pinhole:
    r = snap.tool[:3, :3]
    origin = snap.tool[:3, 3] + r @ _WRIST_ORIGIN
    return Pinhole(origin, _WRIST_ROT @ r.T, width, height, _focal(width, _WRIST_HFOV_DEG))


@dataclass(frozen=True)
class _BinPolygons:
    """Every bin polygon stacked (floors, then walls), each as (first row, colour)."""

    points: np.ndarray  # (4 × polygons, 3)
    floors: tuple[tuple[int, tuple[int, int, int]], ...]
    walls: tuple[tuple[int, tuple[int, int, int]], ...]


@lru_cache(maxsize=16)
def _bin_geometry(layout: Layout) -> _BinPolygons:
    polys: list[np.ndarray] = []
    floors: list[tuple[int, tuple[int, int, int]]] = []
    walls: list[tuple[int, tuple[int, int, int]]] = []
    for name, b in _bins(layout):
        floors.append((4 * len(polys), BIN_FLOOR[name]))
        polys.append(_bin_floor(b))
    for name, b in _bins(layout):
        for quad, _ in _bin_walls(b):
            walls.append((4 * len(polys), BIN_WALL[name]))
            polys.append(quad)
    return _BinPolygons(np.concatenate(polys), tuple(floors), tuple(walls))


def render_wrist(snap: Snapshot, width: int, height: int) -> np.ndarray:
    cam = wrist_camera(snap, width, height)
    bins = _bin_geometry(snap.layout)
    n = len(snap.items)
    outlines = _item_outlines(snap).reshape(-1, 3)
    fingers = _finger_points(snap).reshape(-1, 3)
    points = np.concatenate([bins.points, outlines, fingers])
    cam_pts = cam.to_camera(points)
    px = cam.pixels(cam_pts)
    depth = cam_pts[:, 2]
    m0 = len(bins.points)
    m1 = m0 + n * len(_RING)
    # the bins' and fingers' quads: pixel corners, and whether all four are in front
    quad_px = np.concatenate([px[:m0], px[m1:]]).reshape(-1, 8).tolist()
    in_front = np.concatenate([depth[:m0], depth[m1:]]).reshape(-1, 4).min(axis=1) >= 0.02
    in_front = in_front.tolist()
    fingers_at = m0 // 4

    img = Image.new("RGB", (width, height), TABLE)
    draw = ImageDraw.Draw(img)

    def bin_polys(polys: tuple[tuple[int, tuple[int, int, int]], ...]) -> None:
        for i, color in polys:
            if in_front[i // 4]:
                draw.polygon(quad_px[i // 4], fill=color)
            else:
                cam.polygon(draw, bins.points[i : i + 4], color)

    bin_polys(bins.floors)
    items = _ItemPolygons.of(
        snap, px[m0:m1].reshape(n, len(_RING), 2), depth[m0:m1].reshape(n, len(_RING))
    )
    _draw_items(draw, snap, items.resting)
    bin_polys(bins.walls)
    _draw_items(draw, snap, items.held)
    for k in (fingers_at, fingers_at + 1):
        if in_front[k]:
            draw.polygon(quad_px[k], fill=FINGERS)
    return np.asarray(img)


RENDERERS = {keys.CAMERA_EXTERIOR: render_exterior, keys.CAMERA_WRIST: render_wrist}
