"""The detector's and classifier's thresholds: one TOML file.

``proctor/annotator/thresholds.toml`` holds the values calibrated on the simulated
cell's ground truth (``proctor calibrate`` regenerates it); a
site may point ``load_thresholds`` at its own copy. Every field has a
physical meaning, given next to it in the file. The file's ``[cell]`` table
describes where the bins stand (the station's fixture, not a tuning knob);
it is only the fallback for recordings without a ``layout`` in their
manifest (the station records one per episode: ``proctor.annotator.pipeline.layout_for``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from proctor.core.errors import ConfigError

DEFAULT_PATH = Path(__file__).with_name("thresholds.toml")
FORMAT = "proctor.annotator.thresholds/1"


@dataclass(frozen=True)
class DetectorThresholds:
    # gripper target (0 open … 1 closed) above which the fingers are told to close
    target_closed: float = 0.5
    # finger positions: above `band_low` and below `closed_band` the fingers can
    # be stopped on an item; at or above `closed_band` they closed on nothing
    band_low: float = 0.3
    closed_band: float = 0.97
    # a plateau: the position moved less than `plateau_tol` over `plateau_window_s`
    plateau_tol: float = 0.004
    plateau_window_s: float = 0.05
    # an item counts as held only after this long on the plateau (or flagged)
    min_hold_s: float = 0.2
    # the item leaves the fingers once they opened this far below the plateau
    release_open: float = 0.03
    # after a release command the fingers must open within this window
    settle_s: float = 0.6
    # a rise of the fingers above the plateau this large, with no release
    # command, is the item slipping out (the fingers close on nothing)
    slump_rise: float = 0.005
    # added to a detected time: what the crossing lags behind the true event
    release_lag_s: float = 0.0
    slump_lag_s: float = 0.0


@dataclass(frozen=True)
class ClassifierThresholds:
    # a predicted landing point within this distance of a bin's rim is a coin toss
    rim_margin: float = 0.01
    # the item's height below the tool centre point, m (subtracted from the fall)
    item_drop_offset: float = 0.0
    # use the ballistic landing point (tool velocity at release) rather than
    # the point under the tool to decide the zone
    use_landing: bool = True


@dataclass(frozen=True)
class Bin:
    cx: float
    cy: float
    half_x: float
    half_y: float

    def signed_distance(self, x: float, y: float) -> float:
        """Distance from (x, y) to the rim: positive inside, negative outside."""
        dx = self.half_x - abs(x - self.cx)
        dy = self.half_y - abs(y - self.cy)
        if dx >= 0 and dy >= 0:
            return min(dx, dy)
        return -float((max(-dx, 0.0) ** 2 + max(-dy, 0.0) ** 2) ** 0.5)


@dataclass(frozen=True)
class CellLayout:
    """The two bins in the robot base frame (m)."""

    source: Bin
    target: Bin
    rim_height: float


@dataclass(frozen=True)
class CellGeometry:
    """Where the bins stand, by the episode's tote side (+y is the robot's left)."""

    bin_centre_x: float = 0.50
    bin_offset_y: float = 0.23
    bin_half_x: float = 0.15
    bin_half_y: float = 0.12
    rim_height: float = 0.08

    def layout(self, tote_side: str) -> CellLayout:
        if tote_side not in ("left", "right"):
            raise ConfigError(f"tote_side: must be 'left' or 'right', got {tote_side!r}")
        y = self.bin_offset_y if tote_side == "left" else -self.bin_offset_y
        hx, hy = self.bin_half_x, self.bin_half_y
        return CellLayout(
            source=Bin(self.bin_centre_x, -y, hx, hy),
            target=Bin(self.bin_centre_x, y, hx, hy),
            rim_height=self.rim_height,
        )


@dataclass(frozen=True)
class Thresholds:
    detector: DetectorThresholds = DetectorThresholds()
    classifier: ClassifierThresholds = ClassifierThresholds()
    cell: CellGeometry = CellGeometry()
    version: str = "uncalibrated"  # recorded with every candidate
    calibration: dict[str, Any] = dataclasses.field(default_factory=dict)


def _section(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{name}: must be true or false, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}.{name}: must be a number, got {value!r}")
        elif value < 0 and not name.endswith("_lag_s"):
            raise ConfigError(f"{where}.{name}: must be 0 or more, got {value!r}")
        values[name] = value if isinstance(default, bool) else float(value)
    return cls(**values)


def parse_thresholds(data: dict[str, Any], where: str = "thresholds") -> Thresholds:
    fmt = data.get("format")
    if fmt != FORMAT:
        raise ConfigError(f"{where}: format must be {FORMAT!r}, got {fmt!r}")
    extra = sorted(
        set(data) - {"format", "version", "detector", "classifier", "cell", "calibration"}
    )
    if extra:
        raise ConfigError(f"{where}: unknown table(s) {', '.join(extra)}")
    version = data.get("version")
    if not isinstance(version, str) or not version or len(version) > 32:
        raise ConfigError(f"{where}.version: must be a short non-empty string, got {version!r}")
    detector = _section(DetectorThresholds, data.get("detector", {}), f"{where}.detector")
    if not 0 < detector.band_low < detector.closed_band <= 1:
        raise ConfigError(
            f"{where}.detector: need 0 < band_low < closed_band ≤ 1, got "
            f"{detector.band_low} and {detector.closed_band}"
        )
    if not 0 < detector.target_closed < 1:
        raise ConfigError(f"{where}.detector.target_closed: must lie in (0, 1)")
    calibration = data.get("calibration", {})
    if not isinstance(calibration, dict):
        raise ConfigError(f"{where}.calibration: must be a table")
    return Thresholds(
        detector=detector,
        classifier=_section(
            ClassifierThresholds, data.get("classifier", {}), f"{where}.classifier"
        ),
        cell=_section(CellGeometry, data.get("cell", {}), f"{where}.cell"),
        version=version,
        calibration=calibration,
    )


def load_thresholds(path: Path | None = None) -> Thresholds:
    """The thresholds file (default: the calibrated one shipped with the code)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"thresholds file {path}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"thresholds file {path}: invalid TOML: {exc}") from None
    return parse_thresholds(data, where=str(path))
