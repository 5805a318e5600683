"""The commissioned cell: what ``proctor station commission`` measured on
the real (or twin) cell, stored in one JSON file that the station config
names (``commissioned = "/etc/proctor/cell-a.cell.json"``).

What it holds, all in the robot base frame (metres, +y the robot's left):

* the table plane, fitted through points touched with the TCP;
* the two tote rectangles (inner rim, by side), their rim height and wall;
* the workspace box the tool may move in, and the home pose (joints);
* the TCP (flange → tool centre point) and the payload on the flange
  (everything mounted: gripper, coupling, wrist camera), which the arm driver
  configures through franky at connect and pre-flight checks against the
  robot's own state; optionally the pivot check of the typed TCP (the
  fingertip centre held on one point from ≥ 4 orientations; ``TcpPivot``);
* the 2F-85's fully-closed position reading (``gripper_closed_counts``),
  measured by closing the empty gripper, which the profiles hand to the
  gripper's ``closed_counts``;
* per camera: its serial and a reference image of the cell as commissioned
  (pre-flight compares today's framing with it). Camera extrinsics are not
  measured (no fiducial detector yet): ``pose`` stays null unless entered.

Loading validates everything and names the bad field: no silent clipping of a
home pose or a box. The episode manifest's ``layout`` comes from here for the
real and twin cells (``layout``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from proctor.core.domain import Side
from proctor.core.errors import ConfigError
from proctor.core.geometry import matrix_to_quat, quat_to_matrix

COMMISSIONED_FORMAT = "proctor.commissioned_cell/1"
LAYOUT_FORMAT = "proctor.cell_layout/1"
# a table that tilts more than this is a mis-touched point, not a table
MAX_TABLE_TILT_DEG = 5.0
# touched points further than this from the fitted plane: a point was not on the table
MAX_PLANE_RESIDUAL_M = 0.005


def _floats(where: str, value: Any, size: int) -> tuple[float, ...]:
    try:
        numbers = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {size} numbers, got {value!r}") from None
    if len(numbers) != size or not all(math.isfinite(v) for v in numbers):
        raise ConfigError(f"{where}: expected {size} finite numbers, got {value!r}")
    return numbers


def _positive(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{where}: expected a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TablePlane:
    """``normal · p = offset`` with a unit normal pointing up, fitted through
    the touched points (kept, so a later reader can refit)."""

    points: tuple[tuple[float, float, float], ...]
    normal: tuple[float, float, float]
    offset: float

    @classmethod
    def fit(cls, points: list[tuple[float, float, float]] | np.ndarray) -> TablePlane:
        p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        if len(p) < 3:
            raise ConfigError(f"table.points: touch at least 3 points, got {len(p)}")
        centre = p.mean(axis=0)
        # the plane's normal is the direction of least spread (smallest singular vector)
        _, s, vt = np.linalg.svd(p - centre)
        if s[1] < 1e-3:
            raise ConfigError("table.points: the points lie on a line; touch a triangle")
        normal = vt[2] if vt[2][2] >= 0 else -vt[2]
        plane = cls(
            points=tuple((float(a), float(b), float(c)) for a, b, c in p),
            normal=(float(normal[0]), float(normal[1]), float(normal[2])),
            offset=float(normal @ centre),
        )
        plane.check()
        return plane

    def check(self) -> None:
        n = np.asarray(self.normal)
        if abs(float(np.linalg.norm(n)) - 1.0) > 1e-6:
            raise ConfigError(f"table.normal: must be a unit vector, got {list(self.normal)}")
        tilt = math.degrees(math.acos(min(1.0, max(-1.0, float(n[2])))))
        if tilt > MAX_TABLE_TILT_DEG:
            raise ConfigError(
                f"table: the fitted plane tilts {tilt:.1f}° (limit {MAX_TABLE_TILT_DEG:g}°): "
                "a point was not on the table"
            )
        worst = max((abs(self.distance(pt)) for pt in self.points), default=0.0)
        if worst > MAX_PLANE_RESIDUAL_M:
            raise ConfigError(
                f"table.points: a point lies {1000 * worst:.1f} mm off the fitted plane "
                f"(limit {1000 * MAX_PLANE_RESIDUAL_M:g} mm): touch again"
            )

    def distance(self, point: Any) -> float:
        """Signed height of ``point`` above the table (m)."""
        return float(np.asarray(self.normal) @ np.asarray(point, dtype=np.float64) - self.offset)

    def z_at(self, x: float, y: float) -> float:
        nx, ny, nz = self.normal
        return (self.offset - nx * x - ny * y) / nz


@dataclass(frozen=True)
class Tote:
    """A tote's inner rim rectangle (axis-aligned), rim height above the
    table and wall thickness."""

    cx: float
    cy: float
    half_x: float
    half_y: float
    height: float = 0.08
    wall: float = 0.008

    def box(self) -> list[float]:
        return [round(v, 6) for v in (self.cx, self.cy, self.half_x, self.half_y)]

    def overlaps(self, other: Tote) -> bool:
        return (
            abs(self.cx - other.cx) < self.half_x + other.half_x
            and abs(self.cy - other.cy) < self.half_y + other.half_y
        )


@dataclass(frozen=True)
class Tcp:
    """Flange → tool centre point: translation (m) and unit quaternion
    ``[x, y, z, w]`` (the station's convention)."""

    xyz: tuple[float, float, float]
    quaternion: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)

    def matrix(self) -> np.ndarray:
        m = np.eye(4)
        m[:3, :3] = quat_to_matrix(np.asarray(self.quaternion))
        m[:3, 3] = self.xyz
        return m

    def as_tuple(self) -> tuple[float, ...]:
        return (*self.xyz, *self.quaternion)


# the pivot check: at least this many orientations; the solved TCP may differ
# from the typed one by at most this much; the touched point may wander by at
# most this much (RMS) between orientations; and the orientations must spread
# enough for the solution to be determined (the smallest singular value of
# the stacked [R_i, −I] per orientation: 0.15 is about ±17° of tilt about
# two axes; orientations about one axis only leave the TCP's component along
# it undetermined, and give 0)
PIVOT_MIN_POSES = 4
PIVOT_MAX_TCP_ERROR_M = 0.005
PIVOT_MAX_RESIDUAL_M = 0.002
PIVOT_MIN_SPREAD = 0.15


@dataclass(frozen=True)
class TcpPivot:
    """The TCP solved from flange poses (``[x, y, z, qx, qy, qz, qw]``, base
    frame) taken with the fingertip centre held on one fixed point: for each
    pose ``R_i p + t_i = c``, with ``p`` the TCP in the flange frame and ``c``
    the point in the base frame, solved by least squares."""

    poses: tuple[tuple[float, ...], ...]
    tcp_xyz: tuple[float, float, float]
    point: tuple[float, float, float]
    residual_m: float  # RMS distance of R_i p + t_i from c

    @classmethod
    def solve(cls, flange_poses: list[tuple[float, ...]] | np.ndarray) -> TcpPivot:
        poses = np.asarray(flange_poses, dtype=np.float64).reshape(-1, 7)
        if len(poses) < PIVOT_MIN_POSES:
            raise ConfigError(
                f"tcp_pivot.poses: touch the point from at least {PIVOT_MIN_POSES} "
                f"orientations, got {len(poses)}"
            )
        rotations = [quat_to_matrix(q[3:]) for q in poses]
        a = np.vstack([np.hstack([r, -np.eye(3)]) for r in rotations])
        b = -poses[:, :3].reshape(-1)
        spread = float(np.linalg.svd(a, compute_uv=False)[-1]) / math.sqrt(len(poses))
        if spread < PIVOT_MIN_SPREAD:
            raise ConfigError(
                f"tcp_pivot.poses: the orientations are too alike to determine the TCP "
                f"(spread {spread:.3f}, need {PIVOT_MIN_SPREAD}; ill-conditioned): tilt the "
                "tool at least 20° about two different axes"
            )
        x, *_ = np.linalg.lstsq(a, b, rcond=None)
        tcp, point = x[:3], x[3:]
        misses = [r @ tcp + t - point for r, t in zip(rotations, poses[:, :3], strict=True)]
        residual = float(np.sqrt(np.mean([m @ m for m in misses])))
        return cls(
            poses=tuple(tuple(float(v) for v in pose) for pose in poses),
            tcp_xyz=(float(tcp[0]), float(tcp[1]), float(tcp[2])),
            point=(float(point[0]), float(point[1]), float(point[2])),
            residual_m=residual,
        )

    def check(self, typed: Tcp) -> None:
        """Refuse a pivot that did not hold still, or a typed TCP it disagrees with."""
        mm = ", ".join(f"{1000 * v:.1f}" for v in self.tcp_xyz)
        if self.residual_m > PIVOT_MAX_RESIDUAL_M:
            raise ConfigError(
                f"tcp_pivot: the fingertip moved off the point between orientations "
                f"(residual {1000 * self.residual_m:.1f} mm, limit "
                f"{1000 * PIVOT_MAX_RESIDUAL_M:g} mm): touch again"
            )
        error = float(np.linalg.norm(np.asarray(self.tcp_xyz) - np.asarray(typed.xyz)))
        if error > PIVOT_MAX_TCP_ERROR_M:
            typed_mm = ", ".join(f"{1000 * v:.1f}" for v in typed.xyz)
            raise ConfigError(
                f"tcp: the pivot check measures the TCP at [{mm}] mm, the typed --tcp is "
                f"[{typed_mm}] mm: {1000 * error:.1f} mm apart (limit "
                f"{1000 * PIVOT_MAX_TCP_ERROR_M:g} mm; residual {1000 * self.residual_m:.1f} "
                "mm): fix the typed TCP or touch again"
            )


def flange_pose(ee_pose: np.ndarray, tcp: Tcp) -> tuple[float, ...]:
    """The flange's pose ``O_T_F`` from the reported end effector ``O_T_EE``
    and the TCP the arm is configured with (``F_T_EE``): O_T_EE · F_T_EE⁻¹."""
    o_t_ee = np.eye(4)
    o_t_ee[:3, :3] = quat_to_matrix(np.asarray(ee_pose[3:], dtype=np.float64))
    o_t_ee[:3, 3] = ee_pose[:3]
    o_t_f = o_t_ee @ np.linalg.inv(tcp.matrix())
    return (*(float(v) for v in o_t_f[:3, 3]), *(float(v) for v in matrix_to_quat(o_t_f[:3, :3])))


@dataclass(frozen=True)
class Payload:
    """Everything on the flange: mass (kg), centre of mass in the flange
    frame (m), inertia about the centre of mass (kg·m², 3×3 column-major)."""

    mass: float
    com: tuple[float, float, float] = (0.0, 0.0, 0.0)
    inertia: tuple[float, ...] = (0.001, 0.0, 0.0, 0.0, 0.001, 0.0, 0.0, 0.0, 0.001)


@dataclass(frozen=True)
class CameraReference:
    serial: str | None
    # file name of the reference image, next to the commissioned-cell file
    image: str | None
    # camera → robot base, [x, y, z, qx, qy, qz, qw], where it was measured
    pose: tuple[float, ...] | None = None


# homing's clearance above the highest tote rim, beyond the longest item (m)
HOME_CLEARANCE_MARGIN_M = 0.05


@dataclass(frozen=True)
class CommissionedCell:
    table: TablePlane
    totes: dict[str, Tote]  # by side: "left" (+y) and "right"
    workspace_min: tuple[float, float, float]
    workspace_max: tuple[float, float, float]
    home_q: tuple[float, ...]
    tcp: Tcp
    payload: Payload
    cameras: dict[str, CameraReference] = field(default_factory=dict)
    # the pivot check of the typed TCP, when it was run
    tcp_pivot: TcpPivot | None = None
    # the 2F-85's gPO with the empty gripper closed (0–255), when measured
    gripper_closed_counts: int | None = None
    commissioned_at: str = ""
    note: str = ""
    # the file it was read from: reference images are found beside it
    path: Path | None = field(default=None, compare=False)

    def table_top_under_box(self) -> float:
        """The table's highest point under the workspace box (m, base frame):
        the envelope's floor. A plane's maximum over a rectangle is at one of
        its corners, so holding the fingertips above this keeps them above
        the tilted table everywhere in the box (conservative by the tilt
        times the box's size: 1 mm for a 0.1° tilt over 0.6 m)."""
        lo, hi = self.workspace_min, self.workspace_max
        return max(self.table.z_at(x, y) for x in (lo[0], hi[0]) for y in (lo[1], hi[1]))

    def envelope_limits(self) -> dict[str, Any]:
        """What the envelope holds every command to on this cell: the box and
        the table as measured (``[envelope]`` may only narrow them)."""
        return {
            "workspace_min": self.workspace_min,
            "workspace_max": self.workspace_max,
            "table_z": self.table_top_under_box(),
        }

    def home_clearance_z(self, longest_item_m: float) -> float:
        """How high homing lifts the tool before it crosses the cell (m, base
        frame): the highest tote rim, a margin, and the longest item the
        fingers may still hold hanging below the tool point."""
        rims = max(self.table.z_at(t.cx, t.cy) + t.height for t in self.totes.values())
        return rims + HOME_CLEARANCE_MARGIN_M + longest_item_m

    def check(self, q_min: tuple[float, ...], q_max: tuple[float, ...]) -> None:
        """Refuse a cell that cannot be right, naming the field."""
        self.table.check()
        if set(self.totes) != {Side.left.value, Side.right.value}:
            raise ConfigError(f"totes: need a left and a right tote, got {sorted(self.totes)}")
        left, right = self.totes[Side.left.value], self.totes[Side.right.value]
        if not left.cy > right.cy:
            raise ConfigError(
                "totes: the left tote must be at larger y than the right one "
                "(+y is the robot's left)"
            )
        if left.overlaps(right):
            raise ConfigError("totes: the left and right totes overlap")
        lo, hi = np.asarray(self.workspace_min), np.asarray(self.workspace_max)
        bad = [axis for axis, a, b in zip("xyz", lo, hi, strict=True) if not a < b]
        if bad:
            raise ConfigError(
                f"workspace: workspace_min must be below workspace_max on every axis (not on "
                f"{', '.join(bad)}): {list(self.workspace_min)} vs {list(self.workspace_max)}"
            )
        floor = max(self.table.z_at(x, y) for x in (lo[0], hi[0]) for y in (lo[1], hi[1]))
        if lo[2] < floor:
            raise ConfigError(
                f"workspace_min: z {lo[2]:.3f} m is below the table ({floor:.3f} m under the box)"
            )
        check_joint_vector("home_q", self.home_q, q_min, q_max)
        _floats("tcp.xyz", self.tcp.xyz, 3)
        quat = np.asarray(_floats("tcp.quaternion", self.tcp.quaternion, 4))
        if abs(float(np.linalg.norm(quat)) - 1.0) > 1e-3:
            raise ConfigError(f"tcp.quaternion: must be a unit quaternion, got {quat.tolist()}")
        _positive("payload.mass", self.payload.mass)
        _floats("payload.com", self.payload.com, 3)
        _floats("payload.inertia", self.payload.inertia, 9)
        if self.tcp_pivot is not None:
            self.tcp_pivot.check(self.tcp)
        counts = self.gripper_closed_counts
        if counts is not None and (
            isinstance(counts, bool) or not isinstance(counts, int) or not 0 < counts <= 255
        ):
            raise ConfigError(f"gripper_closed_counts: expected 1–255, got {counts!r}")

    def layout(self, tote_side: Side | str, camera_side: Side | str) -> dict[str, Any]:
        """The manifest's ``layout`` (``proctor.cell_layout/1``) for one
        spatial configuration: the target tote is on ``tote_side``."""
        side = Side(tote_side)
        other = Side.right if side == Side.left else Side.left
        target, source = self.totes[side.value], self.totes[other.value]
        lo, hi = self.workspace_min, self.workspace_max
        return {
            "format": LAYOUT_FORMAT,
            "frame": "robot base, m",
            "tote_side": side.value,
            "camera_side": Side(camera_side).value,
            "source_bin": source.box(),
            "target_bin": target.box(),
            "bin_height": max(source.height, target.height),
            "bin_wall": max(source.wall, target.wall),
            "table": {"x": [lo[0], hi[0]], "y": [lo[1], hi[1]]},
            "workspace": {"x": [lo[0], hi[0]], "y": [lo[1], hi[1]]},
            "table_z": round(self.table.z_at(0.5 * (lo[0] + hi[0]), 0.5 * (lo[1] + hi[1])), 6),
            "source": "commissioned",
        }

    def reference_image(self, camera: str) -> Path | None:
        ref = self.cameras.get(camera)
        if ref is None or not ref.image or self.path is None:
            return None
        return self.path.parent / ref.image

    # -- the file ------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("path")
        return {"format": COMMISSIONED_FORMAT, **data}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)


def check_joint_vector(
    where: str, q: tuple[float, ...], q_min: tuple[float, ...], q_max: tuple[float, ...]
) -> None:
    """``q`` inside ``[q_min, q_max]``, joint by joint; a ConfigError names the joint."""
    values = _floats(where, q, len(q_min))
    for i, (v, lo, hi) in enumerate(zip(values, q_min, q_max, strict=True)):
        if not lo <= v <= hi:
            raise ConfigError(
                f"{where}: joint {i + 1} at {v:.3f} rad is outside its limits "
                f"[{lo:.3f}, {hi:.3f}] (nothing is clipped: fix the value)"
            )


def _from_json(data: Any, where: str) -> CommissionedCell:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    fmt = data.get("format")
    if fmt != COMMISSIONED_FORMAT:
        raise ConfigError(f"{where}: format must be {COMMISSIONED_FORMAT!r}, got {fmt!r}")
    try:
        table = data["table"]
        plane = TablePlane(
            points=tuple(_floats("table.points", p, 3) for p in table["points"]),  # type: ignore[misc]
            normal=_floats("table.normal", table["normal"], 3),  # type: ignore[arg-type]
            offset=float(table["offset"]),
        )
        totes = {
            str(side): Tote(**{k: float(v) for k, v in tote.items()})
            for side, tote in data["totes"].items()
        }
        tcp = Tcp(
            xyz=_floats("tcp.xyz", data["tcp"]["xyz"], 3),  # type: ignore[arg-type]
            quaternion=_floats("tcp.quaternion", data["tcp"]["quaternion"], 4),  # type: ignore[arg-type]
        )
        p = data["payload"]
        payload = Payload(
            mass=_positive("payload.mass", p["mass"]),
            com=_floats("payload.com", p["com"], 3),  # type: ignore[arg-type]
            inertia=_floats("payload.inertia", p["inertia"], 9),
        )
        cameras = {
            str(name): CameraReference(
                serial=None if c.get("serial") is None else str(c["serial"]),
                image=None if c.get("image") is None else str(c["image"]),
                pose=None if c.get("pose") is None else _floats(f"cameras.{name}", c["pose"], 7),
            )
            for name, c in data.get("cameras", {}).items()
        }
        pivot = data.get("tcp_pivot")
        tcp_pivot = None
        if pivot is not None:
            tcp_pivot = TcpPivot(
                poses=tuple(_floats("tcp_pivot.poses", q, 7) for q in pivot["poses"]),
                tcp_xyz=_floats("tcp_pivot.tcp_xyz", pivot["tcp_xyz"], 3),  # type: ignore[arg-type]
                point=_floats("tcp_pivot.point", pivot["point"], 3),  # type: ignore[arg-type]
                residual_m=float(pivot["residual_m"]),
            )
        counts = data.get("gripper_closed_counts")
        if counts is not None and (isinstance(counts, bool) or not isinstance(counts, int)):
            raise ConfigError(
                f"{where}: gripper_closed_counts: expected an integer, got {counts!r}"
            )
        return CommissionedCell(
            table=plane,
            totes=totes,
            workspace_min=_floats("workspace_min", data["workspace_min"], 3),  # type: ignore[arg-type]
            workspace_max=_floats("workspace_max", data["workspace_max"], 3),  # type: ignore[arg-type]
            home_q=_floats("home_q", data["home_q"], 7),
            tcp=tcp,
            payload=payload,
            cameras=cameras,
            tcp_pivot=tcp_pivot,
            gripper_closed_counts=counts,
            commissioned_at=str(data.get("commissioned_at", "")),
            note=str(data.get("note", "")),
        )
    except KeyError as exc:
        raise ConfigError(f"{where}: missing {exc.args[0]!r}") from None
    except (TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{where}: malformed ({exc})") from None


def load_commissioned(
    path: Path, q_min: tuple[float, ...], q_max: tuple[float, ...]
) -> CommissionedCell:
    """Read and check a commissioned-cell file; every problem is one
    ConfigError naming the file and the field."""
    where = f"commissioned cell {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found (run `proctor station commission`)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: invalid JSON: {exc}") from None
    cell = _from_json(data, where)
    try:
        cell.check(q_min, q_max)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return CommissionedCell(**{**cell.__dict__, "path": Path(path)})


__all__ = [
    "COMMISSIONED_FORMAT",
    "CameraReference",
    "CommissionedCell",
    "Payload",
    "TablePlane",
    "Tcp",
    "TcpPivot",
    "Tote",
    "check_joint_vector",
    "flange_pose",
    "load_commissioned",
]
