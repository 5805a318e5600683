"""The simulated cell's cameras: frames rendered from world snapshots.

The world takes a snapshot at the physics step that crosses each frame time
and queues it; ``read`` renders it (on the reader's thread, off the control
loop). On a virtual clock the world waits for a slow reader instead of
dropping frames; on a real-time clock a reader that falls behind loses
frames, visible as gaps in ``Frame.index``, like a real camera.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from proctor.station.drivers.camera.base import CAMERAS, Camera, CameraConfig, CameraStalled, Frame
from proctor.station.sim.render import RENDERERS
from proctor.station.sim.world import CameraSink, SimWorld, Snapshot


@dataclass(frozen=True)
class SimCameraConfig(CameraConfig):
    driver: ClassVar[str] = "sim"
    # frames buffered between the simulator and the reader
    buffer_frames: int = 8


@CAMERAS.register("sim")
class SimCamera(Camera[SimCameraConfig]):
    def __init__(self, world: SimWorld, config: SimCameraConfig) -> None:
        if config.name not in RENDERERS:
            raise ValueError(f"simulated camera '{config.name}': known views {sorted(RENDERERS)}")
        self.world = world
        self.config = config
        self._render = RENDERERS[config.name]
        self._sink: CameraSink | None = None
        self._last: tuple[Snapshot, np.ndarray] | None = None

    def connect(self) -> None:
        if self._sink is None:
            sink = CameraSink(
                self.config.name, self.config.fps, self.world.virtual, self.config.buffer_frames
            )
            with self.world.lock:
                # the first frame shows the cell as it is now
                sink.offer(self.world.snapshot(0))
                sink.next_index = 1
                sink.next_t = self.world.t + sink.period
                self.world.add_sink(sink)
            self._sink = sink

    def disconnect(self) -> None:
        if self._sink is not None:
            self.world.remove_sink(self._sink)
            self._sink = None

    @property
    def is_connected(self) -> bool:
        return self._sink is not None

    def frames_produced(self) -> int:
        """Snapshots the world has taken for this camera so far (frame indices 0..n-1)."""
        return self._sink.next_index if self._sink is not None else 0

    @property
    def dropped(self) -> int:
        return self._sink.dropped if self._sink is not None else 0

    def read(self, timeout_s: float = 1.0) -> Frame:
        sink = self._sink
        if sink is None:
            raise CameraStalled(f"camera {self.config.name}: not connected")
        if not self.world.virtual and sink.frames.empty():
            # real time: nothing else may be moving the world (idle daemon), so
            # wait for the next frame time and advance it ourselves
            clock = self.world.clock
            clock.sleep_until(min(sink.next_t or clock.now(), clock.now() + timeout_s))
            self.world.sync()
        try:
            snap = sink.frames.get(timeout=timeout_s)
        except queue.Empty:
            raise CameraStalled(
                f"camera {self.config.name}: no frame for {timeout_s:g} s"
            ) from None
        # a still scene renders to the same picture: reuse it (the frame keeps its own time)
        last = self._last
        if last is not None and _same_scene(last[0], snap):
            image = last[1]
        else:
            image = self._render(snap, self.config.width, self.config.height)
            image.setflags(write=False)
            self._last = (snap, image)
        return Frame(t=snap.t, index=snap.index, image=image)


def _same_scene(a: Snapshot, b: Snapshot) -> bool:
    return (
        a.layout is b.layout
        and a.spec is b.spec
        and a.gripper == b.gripper
        and np.array_equal(a.tool, b.tool)
        and np.array_equal(a.items, b.items)
        and np.array_equal(a.origins, b.origins)
    )
