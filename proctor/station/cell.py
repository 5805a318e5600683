"""The cell: what a station profile builds and the episode runner drives.

A ``Cell`` bundles one arm, one gripper, the cameras (by name: ``exterior``,
``wrist``) and the clock every one of them stamps its samples with. A
simulated cell also carries a ``Scene``: the hooks only a simulator can offer
(lay out a work's items, privileged ``sim/…`` observations, ground truth).
Real and twin cells have no scene: the operator sets out the items.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from proctor.core.clock import Clock, VirtualClock
from proctor.station.drivers.arm.base import Arm
from proctor.station.drivers.camera.base import Camera
from proctor.station.drivers.gripper.base import Gripper

if TYPE_CHECKING:
    from proctor.core.work import Work
    from proctor.station.commissioning.cell_file import CommissionedCell

log = logging.getLogger(__name__)


class Scene(Protocol):
    """What only a simulated cell can do."""

    def prepare(self, work: Work) -> None:
        """Lay out ``work.items`` items of ``work.object_name`` in the source
        bin, the totes and camera per ``work``'s configuration, seeded by
        ``work.sim_seed``; clears the ground-truth log."""
        ...

    def start_episode(self, t_start: float) -> None:
        """Mark the episode's start time (ground truth is relative to it)."""
        ...

    def privileged_observation(self) -> dict[str, Any]:
        """The ``sim/…`` observation keys (``proctor.policywire.wire.keys``), sim only."""
        ...

    def still(self, camera: str, width: int, height: int) -> Any:
        """The cell as it stands now, rendered for ``camera`` (H×W×3 uint8): the
        reference photo of a freshly laid-out scene (the console shows it)."""
        ...

    def all_handled(self) -> bool:
        """Nothing left to do: no item in the source bin, held, or dropped on the table.
        Stands in for the operator who ends a finished episode on the real station."""
        ...

    def ground_truth(self) -> dict[str, Any]:
        """The cell's true event log (placements, drops, losses, safety contacts)."""
        ...


# the profiles whose devices are physical and shared (the simulated cell's
# are the daemon's own objects, and its fingers hurt nobody)
HARDWARE_PROFILES = frozenset({"real", "twin"})


@dataclass
class Cell:
    profile: str
    clock: Clock
    arm: Arm
    gripper: Gripper
    cameras: dict[str, Camera]
    scene: Scene | None = None
    # what commissioning measured (real and twin cells; proctor.station.commissioning.cell_file)
    commissioned: CommissionedCell | None = None
    # the profile's envelope limits (``EnvelopeSettings`` fields) under the station
    # config's ``[envelope]``: the simulated cell has its own geometry and speed
    envelope_defaults: dict[str, Any] = field(default_factory=dict)
    # extra teardown, run last (e.g. the twin profile's protocol simulators)
    closers: list[Callable[[], None]] = field(default_factory=list)
    _connected: bool = False
    # cameras that did not connect when the daemon opened the cell (name: why);
    # the camera hub keeps trying them (``connect(cameras_required=False)``)
    absent_cameras: dict[str, str] = field(default_factory=dict)

    def layout(self, tote_side: Any, camera_side: Any) -> dict[str, Any] | None:
        """The commissioned layout for this spatial configuration (the
        manifest's ``layout``); None for a cell that was not commissioned."""
        if self.commissioned is None:
            return None
        return self.commissioned.layout(tote_side, camera_side)

    @property
    def is_virtual(self) -> bool:
        """A virtual clock: time moves only when the control loop moves it."""
        return isinstance(self.clock, VirtualClock)

    def connect(self, *, cameras_required: bool = True, activate_gripper: bool = True) -> None:
        """Connect every device and activate the gripper if it needs it (a
        gripper that is already active keeps its grip: activation sweeps the
        fingers); undo on failure.

        With ``activate_gripper=False`` (a hardware daemon's start: systemd
        starts it at boot and after a crash, with nobody at the cell) a
        gripper that needs activation is left as it is, for the operator's
        explicit Activate (hardware review #12); no run is armed until then.

        With ``cameras_required=False`` (the daemon's start) a camera that does
        not connect is no failure: it is left disconnected and listed in
        ``absent_cameras``, for the camera hub to connect when it appears (a
        daemon that failed instead would restart-loop under systemd over an
        unplugged cable). The arm and the gripper are always required."""
        self.absent_cameras = {}
        try:
            self.arm.connect()
            log.info("arm connected (%s)", type(self.arm).__name__)
            self.gripper.connect()
            if not activate_gripper:
                if self.gripper.needs_activation():
                    log.warning(
                        "the gripper is not activated: the operator activates it "
                        "(console: Activate gripper, hands clear)"
                    )
            elif self.gripper.ensure_activated():
                log.info("gripper activated (it was not, or was in a major fault)")
            log.info("gripper connected (%s)", type(self.gripper).__name__)
            for name, camera in self.cameras.items():
                self._connect_camera(name, camera, required=cameras_required)
        except BaseException:
            self.close()
            raise
        self._connected = True

    def _connect_camera(self, name: str, camera: Camera, *, required: bool) -> None:
        try:
            camera.connect()
        except Exception as exc:  # CameraUnavailable and the SDKs' own errors
            if required:
                raise
            why = f"{type(exc).__name__}: {exc}"
            self.absent_cameras[name] = why
            log.warning("camera %s is absent (%s); starting without it", name, why)
            return
        log.info("camera %s connected", name)

    def close(self) -> None:
        """Stop the arm, then disconnect everything. A failure to stop is logged loudly."""
        try:
            if self.arm.is_connected:
                try:
                    self.arm.stop()
                except Exception:
                    log.critical("FAILED TO STOP THE ARM while closing the cell", exc_info=True)
        finally:
            for name, disconnect in [
                *[(f"camera {n}", c.disconnect) for n, c in self.cameras.items()],
                ("gripper", self.gripper.disconnect),
                ("arm", self.arm.disconnect),
                *[(f"closer {i}", c) for i, c in enumerate(self.closers)],
            ]:
                try:
                    disconnect()
                except Exception:
                    log.error("closing the cell: %s failed", name, exc_info=True)
            self._connected = False

    def __enter__(self) -> Cell:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
