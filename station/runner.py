"""The episode runner: arm → run → finish → await the operator's log → close.

State machine (``RunnerState``): idle → armed → running → finishing →
awaiting_log → (closed) idle. The runner never decides success: it stops on
the time budget (``ran_out_of_time``), an operator stop, a safety stop (the
button, an arm reflex or a gripper fault: ``safety``), a policy or station
failure (``system``), or — on the simulated cell only — when the scene says
every item is handled (standing in for the operator who ends a finished
episode); it *proposes* that outcome and the operator's log decides.

The control loop schedules two clocks' worth of work on the cell's clock:
telemetry samples at ``telemetry_hz`` and action steps at ``control_hz``.
An action chunk is executed open-loop for ``open_loop_steps`` steps, then
the policy is asked again. On a real-time clock the request runs on the
policy worker's thread and the loop keeps sampling (and can stop the arm)
while it waits; on a virtual clock time stands still while the policy
thinks. Either way a reply later than ``policy_timeout_s`` (wall clock)
stops the arm at once and ends the episode ``system``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import sessionmaker

from proctor.artifacts import ArtifactStore
from proctor.db import session_scope
from proctor.db.engine import ProctorSession
from proctor.domain import EndpointDialect, Outcome
from proctor.errors import ProctorError
from station import episodes, keys
from station.archive import archive_recording
from station.camerahub import CameraHub
from station.cell import Cell
from station.clock import MonotonicClock
from station.config import StationConfig
from station.drivers.arm.base import ArmCommand, ArmFault, ArmState
from station.drivers.camera.base import CameraStalled, Frame
from station.drivers.gripper.base import GripperCommand, GripperFault, GripperState
from station.policy.client import (
    PolicyClient,
    PolicyError,
    PolicyProtocolError,
    PolicyWorker,
    Reply,
)
from station.policy.observation import ImageResizer, build_observation
from station.policy.positronic import first_due_row
from station.policy.spec import ActionSpace, StepCommands, to_commands
from station.recorder import Recorder, VideoSettings
from station.work import Work

log = logging.getLogger(__name__)


class RunnerState(StrEnum):
    idle = "idle"
    armed = "armed"
    running = "running"
    finishing = "finishing"
    awaiting_log = "awaiting_log"


class StopKind(StrEnum):
    operator = "operator"
    safety = "safety"


class RunnerBusy(ProctorError):
    exit_code = 2
    http_status = 409


class PolicyUnreachable(ProctorError):
    """The policy failed its pre-flight (connect + metadata): the work was not started."""

    http_status = 503


@dataclass
class EpisodeSummary:
    uid: str
    run_code: str
    proposed: Outcome
    reason: str
    duration_s: float
    telemetry_rows: int
    telemetry_rate_hz: float
    frames: dict[str, int]
    dropped_frames: dict[str, int]
    policy_calls: int
    latency_p50_s: float | None
    latency_p99_s: float | None
    spool: Path | None
    artifacts: dict[str, str] = field(default_factory=dict)  # name → sha256
    notes: list[str] = field(default_factory=list)
    # telemetry ticks the loop could not sample (late wake-ups + no newer arm state)
    telemetry_missed_ticks: int = 0


@dataclass
class TelemetryTicks:
    """How well the control loop kept the telemetry schedule. On a real-time
    clock a loop that wakes late passes the ticks it missed over (never
    back-fills them: every sample carries the time the arm's state was
    taken), and they are counted here and reported in the manifest."""

    hz: float
    due: int = 0  # ticks at which the loop read the arm
    late: int = 0  # ticks passed over because the loop woke after them
    stale: int = 0  # ticks at which the arm had no newer state (nothing recorded)
    max_gap_s: float = 0.0  # longest interval between consecutive samples (their own times)
    max_lag_s: float = 0.0  # latest a sample was read after its tick (real time)

    @property
    def missed(self) -> int:
        return self.late + self.stale

    @property
    def scheduled(self) -> int:
        return self.due + self.late

    def gap(self, dt: float) -> None:
        self.max_gap_s = max(self.max_gap_s, dt)

    def lag(self, dt: float) -> None:
        self.max_lag_s = max(self.max_lag_s, dt)

    def report(self) -> dict[str, Any]:
        return {
            "hz": self.hz,
            "scheduled": self.scheduled,
            "missed": self.missed,
            "missed_late": self.late,
            "missed_no_new_state": self.stale,
            "max_gap_s": round(self.max_gap_s, 4),
            "max_lag_s": round(self.max_lag_s, 4),
        }


@dataclass
class _Active:
    work: Work
    uid: str
    episode_id: int
    client: PolicyClient
    worker: PolicyWorker
    prompt: str
    t0: float = math.nan
    stop_kind: StopKind | None = None
    stop_reason: str = ""
    latencies: list[float] = field(default_factory=list)
    end_details: dict[str, Any] = field(default_factory=dict)
    resizer: ImageResizer = field(default_factory=lambda: ImageResizer(None))
    cameras: frozenset[str] = frozenset()  # the cameras the policy is sent
    # station time of the next query, when known: frames taken shortly before it are
    # resized for the policy on the camera's thread as they arrive
    next_query_t: float = math.inf
    ticks: TelemetryTicks = field(default_factory=lambda: TelemetryTicks(0.0))
    fault: str | None = None  # the class of a system ending, when it is known


_NAN7 = np.full(keys.ACTION_WIDTH, np.nan)


class EpisodeRunner:
    def __init__(
        self,
        cell: Cell,
        *,
        config: StationConfig,
        sessions: sessionmaker[ProctorSession],
        store: ArtifactStore,
        spool_root: Path,
        hub: CameraHub | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.cell = cell
        self.config = config
        self.sessions = sessions
        self.store = store
        self.spool_root = Path(spool_root)
        self.hub = hub or CameraHub(cell.cameras, cell.clock, cell.is_virtual)
        self._own_hub = hub is None
        self._on_change = on_change or (lambda: None)
        self._lock = threading.RLock()
        self.state = RunnerState.idle
        self.active: _Active | None = None
        self.last: EpisodeSummary | None = None
        self.wall = MonotonicClock()
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self.arm_error: str | None = None  # an arm left in error needs an operator's recover
        with session_scope(sessions) as s:
            self.station_id = episodes.ensure_station(s, name=config.name, profile=cell.profile).id

    # -- lifecycle ------------------------------------------------------------
    def open(self) -> None:
        """Connect the cell and start the cameras (call once)."""
        self.cell.connect()
        if self._own_hub:
            self.hub.start()

    def close(self) -> None:
        with self._lock:
            if self.active is not None and self.state == RunnerState.running:
                self.request_stop(StopKind.operator, "station shutting down")
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            if self.state == RunnerState.armed and self.active is not None:
                # never started: the row stays armed and recovery marks it interrupted
                self.active.worker.close()
        if self._own_hub:
            self.hub.stop()
        self.cell.close()

    def _set_state(self, state: RunnerState) -> None:
        with self._lock:
            self.state = state
        self._on_change()

    @property
    def camera_periods(self) -> dict[str, float]:
        return {n: 1.0 / c.config.fps for n, c in self.cell.cameras.items()}

    # -- arm --------------------------------------------------------------------
    def arm(self, work: Work) -> str:
        """Prepare the cell for ``work``, check the policy answers, create the episode.

        Raises ``PolicyUnreachable`` (nothing created) when the policy's
        endpoint fails its pre-flight, so the work source can reschedule it."""
        with self._lock:
            if self.state not in (RunnerState.idle,):
                raise RunnerBusy(f"station is {self.state.value}; finish that first")
            if self.arm_error is not None:
                raise RunnerBusy(f"the arm is in error ({self.arm_error}); recover it first")
        cfg = self.config
        if self.cell.scene is not None:
            self.cell.scene.prepare(work)
        self._home()
        client = PolicyClient(
            work.policy_url,
            dialect=work.dialect,
            headers=work.policy_headers,
            connect_timeout_s=cfg.policy_connect_timeout_s,
            default_image_size=cfg.policy_image_size,
            max_message_bytes=cfg.policy_max_message_bytes,
            control_hz=cfg.control_hz,
        )
        try:
            info = client.connect()
        except PolicyError as exc:
            raise PolicyUnreachable(f"run {work.run_code}: {exc}") from None
        needed = []
        if info.dialect == EndpointDialect.openpi or info.n_external_cameras > 0:
            needed.append(keys.CAMERA_EXTERIOR)
        if info.dialect == EndpointDialect.openpi or info.needs_wrist_camera:
            needed.append(keys.CAMERA_WRIST)
        missing = [name for name in needed if name not in self.cell.cameras]
        if missing:
            client.close()
            raise PolicyUnreachable(
                f"run {work.run_code}: the policy needs the {' and '.join(missing)} camera(s), "
                "which this cell does not have"
            )
        try:
            with session_scope(self.sessions) as s:
                station = s.get(episodes.Station, self.station_id)
                assert station is not None
                obj = self._object_type(s, work)
                episode = episodes.create_episode(s, work=work, station=station, object_type=obj)
                episodes.add_event(
                    s,
                    episode=episode,
                    kind="policy_connected",
                    message=f"policy answered ({info.dialect.value}, {info.action_space_text})",
                    details=info.public(),
                )
                prompt = work.prompt or obj.prompt or f"put the {obj.name} into the target bin"
                uid, episode_id = episode.uid, episode.id
        except BaseException:
            client.close()
            raise
        with self._lock:
            self.active = _Active(
                work,
                uid,
                episode_id,
                client,
                PolicyWorker(client),
                prompt,
                resizer=ImageResizer(info.image_size, pad=info.pad_images),
                cameras=frozenset(needed),
                ticks=TelemetryTicks(cfg.telemetry_hz),
            )
        self._set_state(RunnerState.armed)
        return uid

    def _object_type(self, s: ProctorSession, work: Work) -> Any:
        spec = None
        if self.cell.profile == "sim":
            from station.sim.objects import OBJECTS

            spec = OBJECTS.get(work.object_name)
        return episodes.ensure_object_type(
            s,
            name=work.object_name,
            display_name=spec.display_name if spec else "",
            tags=list(spec.tags) if spec else [],
            prompt=spec.prompt if spec else "",
        )

    def _home(self) -> None:
        try:
            self.cell.arm.home()
            self.cell.gripper.send(GripperCommand(position=0.0))
        except (ArmFault, GripperFault) as exc:
            self.arm_error = str(exc)
            raise RunnerBusy(f"homing failed: {exc}") from None

    def recover(self) -> None:
        """The operator's explicit recovery after a safety stop or fault."""
        with self._lock:
            if self.state in (RunnerState.running, RunnerState.finishing):
                raise RunnerBusy("cannot recover while an episode runs")
        self.cell.arm.recover()
        self.cell.gripper.activate()
        self.arm_error = None
        self._home()
        self._on_change()

    def disarm(self) -> None:
        """Give up an armed episode before it started (closed as ``operator_stop``)."""
        with self._lock:
            act = self.active
            if self.state != RunnerState.armed or act is None:
                raise RunnerBusy(f"station is {self.state.value}, not armed")
        act.worker.close()
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, act.episode_id)
            assert ep is not None
            clock_now = self.cell.clock.now()
            ep.clock_start_s = clock_now
            episodes.mark_finishing(
                s,
                episode=ep,
                clock_end_s=clock_now,
                proposed=Outcome.operator_stop,
                reason="disarmed before it started",
            )
            episodes.mark_awaiting_log(s, episode=ep)
        self._set_state(RunnerState.awaiting_log)

    # -- run ----------------------------------------------------------------------
    def start(self, *, background: bool = True) -> None:
        with self._lock:
            if self.state != RunnerState.armed or self.active is None:
                raise RunnerBusy(f"station is {self.state.value}, not armed")
            self._stop_event.clear()
            self.state = RunnerState.running
        self._on_change()
        if background:
            self._thread = threading.Thread(target=self._run_safely, name="episode", daemon=True)
            self._thread.start()
        else:
            self._run_safely()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run_headless(self, work: Work) -> EpisodeSummary:
        """Arm, run to the end on this thread, and return the summary; the
        episode is left awaiting its log (close it with ``submit_log`` or, in a
        demo, ``close_with`` and the labelled ground-truth helper)."""
        uid = self.arm(work)
        self.start(background=False)
        last = self.last
        if last is None or last.uid != uid:
            raise ProctorError(f"episode {uid}: the runner stopped without a result")
        return last

    def request_stop(self, kind: StopKind, reason: str = "") -> None:
        """Operator stop or safety stop, from any thread. A safety stop halts the
        arm here and now (the gripper keeps what it holds)."""
        with self._lock:
            act = self.active
            if act is None or self.state not in (RunnerState.running, RunnerState.armed):
                raise RunnerBusy(f"nothing to stop: station is {self.state.value}")
            if act.stop_kind is None or kind == StopKind.safety:
                act.stop_kind = kind
                act.stop_reason = reason or (
                    "safety stop pressed" if kind == StopKind.safety else "operator stop"
                )
        if kind == StopKind.safety:
            self._stop_arm_now()
        self._stop_event.set()

    def _arm_error_text(self) -> str | None:
        try:
            return self.cell.arm.read_state().error
        except ArmFault:
            return None

    def _stop_arm_now(self) -> None:
        try:
            self.cell.arm.stop()
        except Exception:
            log.critical("FAILED TO STOP THE ARM", exc_info=True)

    def _run_safely(self) -> None:
        act = self.active
        assert act is not None
        try:
            self._run(act)
        except BaseException:
            log.critical("episode %s crashed", act.uid, exc_info=True)
            self._stop_arm_now()
            raise
        finally:
            act.worker.close()

    def _run(self, act: _Active) -> None:
        cfg, cell = self.config, self.cell
        clock = cell.clock
        spool = self.spool_root / act.uid
        t0 = clock.now()
        act.t0 = t0
        act.next_query_t = t0  # the first query, at the start
        if cell.scene is not None:
            cell.scene.start_episode(t0)
        videos = {
            name: VideoSettings(c.config.width, c.config.height, c.config.fps)
            for name, c in cell.cameras.items()
        }
        recorder = Recorder(
            spool,
            t0=t0,
            cameras=videos,
            telemetry_hz=cfg.telemetry_hz,
            segment_s=cfg.segment_s,
            virtual_clock=cell.is_virtual,
            state={
                "episode_uid": act.uid,
                "run_code": act.work.run_code,
                "profile": cell.profile,
                "cameras": {n: vars(v) for n, v in videos.items()},
                "telemetry_hz": cfg.telemetry_hz,
            },
        )
        self.hub.set_sink(self._frame_sink(act, recorder))
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, act.episode_id)
            assert ep is not None
            episodes.mark_running(s, episode=ep, clock_start_s=t0)
        try:
            act.client.reset(cfg.policy_timeout_s)
            proposed, reason = self._control_loop(act, recorder)
        except PolicyError as exc:
            self._stop_arm_now()
            proposed, reason = Outcome.system, str(exc)
            if isinstance(exc, PolicyProtocolError):
                # the policy's own doing, not the station's: the scheduler charges a
                # policy for these once it has had its free ones (scheduler.claims)
                act.fault = episodes.FAULT_POLICY_PROTOCOL
        except Exception as exc:  # a station failure mid-episode: stop, record, report
            log.error("episode %s: station failure", act.uid, exc_info=True)
            self._stop_arm_now()
            proposed, reason = Outcome.system, f"station failure: {type(exc).__name__}: {exc}"
        t_end = clock.now()
        self._set_state(RunnerState.finishing)
        self._record_tail(act, recorder, t_end)
        if cell.is_virtual:
            # every frame the simulator has taken so far reaches the recorder
            for name, period in self.camera_periods.items():
                try:
                    self.hub.frame_for(name, clock.now(), period, timeout_s=5.0)
                except CameraStalled:
                    log.warning("camera %s: last frames did not arrive", name)
        self.hub.set_sink(None)
        self._finish(act, recorder, proposed, reason, t_end)

    def _frame_sink(self, act: _Active, recorder: Recorder) -> Callable[[str, Frame], None]:
        """Every frame to the recorder; a frame the next query will likely use
        is also resized for the policy, here on the camera's thread, so the
        query finds it done. On a virtual clock that is exactly the last frame
        taken at or before the query's time; on a real-time clock, any taken
        within 1.5 frame periods before it (frames come late and jitter)."""
        reach = 1.0 - 1e-9 if self.cell.is_virtual else 1.5
        window = {name: reach * period for name, period in self.camera_periods.items()}
        resizer = act.resizer

        def sink(name: str, frame: Frame) -> None:
            recorder.add_frame(name, frame)
            if name in act.cameras and frame.t > act.next_query_t - window[name]:
                try:
                    resizer.prepare(name, (frame.index, frame.t), frame.image)
                except Exception:  # the query resizes it itself; the camera keeps reading
                    log.warning("camera %s: resizing ahead failed", name, exc_info=True)

        return sink

    # -- the control loop ---------------------------------------------------------
    def _control_loop(self, act: _Active, recorder: Recorder) -> tuple[Outcome, str]:
        cfg, cell = self.config, self.cell
        clock = cell.clock
        arm, gripper, scene = cell.arm, cell.gripper, cell.scene
        t0 = act.t0
        end = t0 + act.work.budget_s
        dt_tel = 1.0 / cfg.telemetry_hz
        dt_act = 1.0 / cfg.control_hz
        k_tel_end = math.floor(act.work.budget_s / dt_tel + 1e-9)  # the last tick in the budget
        # None until a Positronic server's first reply names it; its commands are
        # positions (cartesian_pos, joint_pos), never velocities
        space = act.client.action_space
        periods = self.camera_periods
        timeout = cfg.policy_timeout_s
        k_tel = k_act = 0
        chunk: np.ndarray | None = None
        chunk_i = 0
        span = 0  # steps of the chunk run open-loop
        step = -1
        pending: concurrent.futures.Future[Reply] | None = None
        pending_wall = 0.0
        pending_clock = 0.0
        current: StepCommands | None = None
        sent_arm: ArmCommand | None = None
        sent_grip = math.nan
        latency = math.nan
        calls = 0
        prev_ee: np.ndarray | None = None
        prev_t = t0
        floats = np.empty(len(keys.TELEMETRY_FLOAT_COLUMNS))
        n_act = cfg.open_loop_steps
        ticks = act.ticks
        velocity_space = space in (ActionSpace.joint_velocity, ActionSpace.cartesian_velocity)
        chunk_space = space
        info = act.client.info
        positronic_wire = info is not None and info.dialect == EndpointDialect.positronic_v1
        # velocity chunks are asked for ahead (a position chunk planned from an older
        # state would pull the arm back to where it was: those are asked for at the end)
        lookahead = cfg.policy_lookahead_steps if velocity_space else 0
        halted = False  # a zero velocity was sent and nothing since

        def ask(t: float) -> concurrent.futures.Future[Reply]:
            nonlocal pending_wall, pending_clock
            act.next_query_t = math.inf  # known again when the reply's chunk starts
            obs = self._observation(act, t, periods)
            future = act.worker.submit(obs, timeout)
            pending_wall, pending_clock = self.wall.now(), clock.now()
            return future

        def halt() -> None:
            # a velocity command must not outlive its chunk: the arm waits at rest
            nonlocal sent_arm, halted
            if velocity_space and sent_arm is not None and not halted:
                assert space is not None
                sent_arm = arm.send(ArmCommand(space.arm_kind, np.zeros(len(sent_arm.target))))
                halted = True

        while True:
            t_tel = t0 + k_tel * dt_tel
            t_act = t0 + k_act * dt_act
            t_next = min(t_tel, t_act)
            if t_next > end + 1e-9:
                clock.sleep_until(end)
                return Outcome.ran_out_of_time, (
                    f"time budget of {act.work.budget_s:g} s "
                    f"({act.work.items} items × {act.work.per_item_cap_s:g} s) used up"
                )
            clock.sleep_until(t_next)
            if not cell.is_virtual:
                # behind schedule (a stall): resume from now rather than catch up in a
                # burst; the ticks passed over are counted, never back-filled
                now = clock.now()
                behind = min(math.floor((now - t0) / dt_tel), k_tel_end + 1) - k_tel
                if behind > 0:
                    k_tel += behind
                    ticks.late += behind
                k_act = max(k_act, math.floor((now - t0) / dt_act))
            if self._stop_event.is_set():
                kind = act.stop_kind
                if kind == StopKind.safety:
                    return Outcome.safety, act.stop_reason
                self._stop_arm_now()
                return Outcome.operator_stop, act.stop_reason

            # -- an action step
            if t_act <= t_next + 1e-9:
                k_act += 1
                if chunk is None or chunk_i >= span:
                    chunk = None
                    if pending is None:
                        halt()
                        pending = ask(t_act)
                    elif not cell.is_virtual and not pending.done():
                        halt()  # the reply asked for ahead is late
                    reply: Reply | None = None
                    if cell.is_virtual:
                        # simulated time stands still while the policy thinks
                        reply = self._await(pending, pending_wall + timeout + 1.0, timeout)
                        if reply is None:  # stop requested while waiting
                            continue
                    elif pending.done():
                        reply = pending.result()  # raises the PolicyError, if any
                    if reply is not None:
                        pending = None
                        chunk, chunk_space = reply.actions, reply.space
                        # Positronic times its waypoints from the call: on a real-time
                        # clock those already past are skipped, as its chunk player does
                        chunk_i = (
                            first_due_row(t_act - pending_clock, cfg.control_hz, len(chunk))
                            if positronic_wire and not cell.is_virtual
                            else 0
                        )
                        span = min(chunk_i + n_act, len(chunk))
                        act.next_query_t = t_act + max(0, span - chunk_i - lookahead) * dt_act
                        latency, calls = reply.latency_s, calls + 1
                        act.latencies.append(latency)
                if chunk is not None:
                    assert chunk_space is not None
                    current = to_commands(chunk[chunk_i], chunk_space)
                    chunk_i += 1
                    step += 1
                    try:
                        sent_arm = arm.send(current.arm)
                        sent_grip = gripper.send(current.gripper).position
                    except ArmFault as exc:
                        self._stop_arm_now()
                        # the controller's own error text, when it has one, says more
                        error = self._arm_error_text()
                        return Outcome.safety, f"arm fault: {error or exc}"
                    except GripperFault as exc:
                        self._stop_arm_now()
                        return Outcome.safety, f"gripper fault: {exc}"
                    halted = False
                    if pending is None and span - chunk_i < lookahead:
                        # the next chunk is asked for while this one's last steps run
                        pending = ask(t_act)
                if scene is not None and scene.all_handled():
                    self._stop_arm_now()
                    return (
                        Outcome.success,
                        "all items handled (the simulated cell's operator ends it)",
                    )

            # a request in flight on a real-time clock: enforce its deadline every tick
            # (on a virtual clock the reply is awaited at the chunk's end, deterministically)
            if cell.is_virtual or pending is None:
                pass
            elif not pending.done():
                waited = self.wall.now() - pending_wall
                if waited > timeout:
                    self._stop_arm_now()
                    act.end_details.update(
                        t_request_s=pending_clock - t0,
                        t_stop_s=clock.now() - t0,
                        waited_wall_s=round(waited, 4),
                    )
                    pending.cancel()
                    return Outcome.system, f"policy did not answer within {timeout:g} s"
            elif pending.exception() is not None:
                self._stop_arm_now()
                act.end_details.update(t_request_s=pending_clock - t0, t_stop_s=clock.now() - t0)
                raise pending.exception()  # type: ignore[misc]

            # -- a telemetry sample
            if t_tel <= t_next + 1e-9:
                k_tel += 1
                ticks.due += 1
                a = arm.read_state()
                g = gripper.read_state()
                if a.t <= prev_t and prev_ee is not None:
                    # the arm has no newer state than the last sample: never record a duplicate
                    ticks.stale += 1
                    continue
                if a.error is not None:
                    self._stop_arm_now()
                    return Outcome.safety, f"arm fault: {a.error}"
                if g.fault is not None:
                    self._stop_arm_now()
                    return Outcome.safety, f"gripper fault: {g.fault}"
                phase = (
                    keys.TelemetryPhase.running
                    if chunk is not None
                    else keys.TelemetryPhase.awaiting_policy
                )
                if prev_ee is not None:
                    ticks.gap(a.t - prev_t)
                if not cell.is_virtual:
                    ticks.lag(clock.now() - t_tel)
                prev_ee, prev_t = self._sample(
                    recorder,
                    a,
                    g,
                    phase,
                    current,
                    sent_arm,
                    sent_grip,
                    step,
                    latency,
                    calls,
                    prev_ee,
                    prev_t,
                    floats,
                )
                if not cell.is_virtual:
                    for name in cell.cameras:
                        if self.hub.wall_age(name) > 1.0:
                            self._stop_arm_now()
                            return Outcome.system, f"camera {name} stopped delivering frames"

    def _await(
        self, pending: concurrent.futures.Future[Reply], deadline_wall: float, timeout: float
    ) -> Reply | None:
        while True:
            try:
                return pending.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if self._stop_event.is_set():
                    return None
                if self.wall.now() > deadline_wall:
                    self._stop_arm_now()
                    raise PolicyError(f"policy did not answer within {timeout:g} s") from None

    def _observation(self, act: _Active, t: float, periods: dict[str, float]) -> dict[str, Any]:
        cell = self.cell
        a = cell.arm.read_state()
        g = cell.gripper.read_state()
        images: dict[str, np.ndarray] = {}
        frame_keys: dict[str, tuple[int, float]] = {}
        # on a real clock a camera 2 s late is a fault; on a virtual clock time stands
        # still while the simulator renders, and a loaded machine may take longer
        wait_s = 15.0 if cell.is_virtual else 2.0
        for name, period in periods.items():
            try:
                frame = self.hub.frame_for(name, t, period, timeout_s=wait_s)
            except CameraStalled as exc:
                raise RuntimeError(str(exc)) from None
            images[name] = frame.image
            frame_keys[name] = (frame.index, frame.t)
        info = act.client.info
        assert info is not None
        return build_observation(
            info,
            arm=a,
            gripper=g,
            images=images,
            prompt=act.prompt,
            privileged=cell.scene.privileged_observation() if cell.scene is not None else None,
            resizer=act.resizer,
            frame_keys=frame_keys,
        )

    @staticmethod
    def _sample(
        recorder: Recorder,
        a: ArmState,
        g: GripperState,
        phase: keys.TelemetryPhase,
        current: StepCommands | None,
        sent_arm: ArmCommand | None,
        sent_grip: float,
        step: int,
        latency: float,
        calls: int,
        prev_ee: np.ndarray | None,
        prev_t: float,
        floats: np.ndarray,
    ) -> tuple[np.ndarray, float]:
        ee = a.ee_pose
        if prev_ee is not None and a.t > prev_t:
            d = ee[:3] - prev_ee[:3]
            speed = math.sqrt(float(d @ d)) / (a.t - prev_t)
        else:
            speed = 0.0
        floats[0:7] = a.q
        floats[7:14] = a.dq
        floats[14:21] = ee
        floats[21] = speed
        if current is not None and sent_arm is not None:
            floats[22:29] = _NAN7
            floats[22 : 22 + len(current.requested)] = current.requested
            floats[29:36] = _NAN7
            floats[29 : 29 + len(sent_arm.target)] = sent_arm.target
            floats[36] = current.gripper_requested
            kind = sent_arm.kind.value
        else:
            floats[22:36] = np.nan
            floats[36] = np.nan
            kind = ""
        floats[37] = g.target
        floats[38] = g.position
        floats[39] = latency
        recorder.telemetry.append(a.t, phase, kind, step, floats, g.object_detected, calls)
        return ee, a.t

    def _record_tail(self, act: _Active, recorder: Recorder, t_end: float) -> None:
        """Half a second of the stopped cell, so the last release's settling is on record."""
        cell = self.cell
        clock = cell.clock
        dt = 1.0 / self.config.telemetry_hz
        floats = np.empty(len(keys.TELEMETRY_FLOAT_COLUMNS))
        k = 1
        prev: np.ndarray | None = None
        prev_t = t_end
        last_t = recorder.telemetry.last_t if recorder.telemetry.last_t is not None else t_end
        while True:
            t = last_t + k * dt
            if t > t_end + 0.5:
                break
            k += 1
            clock.sleep_until(t)
            try:
                a = cell.arm.read_state()
                g = cell.gripper.read_state()
            except (ArmFault, GripperFault):
                break
            if a.t <= (recorder.telemetry.last_t or -math.inf):
                continue
            prev, prev_t = self._sample(
                recorder,
                a,
                g,
                keys.TelemetryPhase.stopped,
                None,
                None,
                math.nan,
                -1,
                act.latencies[-1] if act.latencies else math.nan,
                len(act.latencies),
                prev,
                prev_t,
                floats,
            )

    # -- finish -------------------------------------------------------------------
    def _finish(
        self, act: _Active, recorder: Recorder, proposed: Outcome, reason: str, t_end: float
    ) -> None:
        notes: list[str] = []
        try:
            result = recorder.close()
        except RuntimeError as exc:
            notes.append(str(exc))
            proposed, reason = Outcome.system, f"recording failed: {exc}"
            result = recorder.close()
        for name, cam in result.cameras.items():
            if cam.error:
                notes.append(f"camera {name}: {cam.error}")
                if proposed != Outcome.safety:
                    proposed, reason = Outcome.system, f"recording camera {name} failed"
        ticks = act.ticks
        if ticks.missed:
            notes.append(
                f"telemetry: {ticks.missed} of {ticks.scheduled} ticks at {ticks.hz:g} Hz "
                f"not sampled ({ticks.late} passed over by a late loop, {ticks.stale} "
                f"without a newer arm state); longest gap {ticks.max_gap_s * 1000:.0f} ms"
            )
        lat = np.array(act.latencies) if act.latencies else None
        details = {
            **act.end_details,
            "policy_calls": len(act.latencies),
            "latency_p50_s": float(np.percentile(lat, 50)) if lat is not None else None,
            "latency_p99_s": float(np.percentile(lat, 99)) if lat is not None else None,
            "dropped_frames": {n: c.dropped for n, c in result.cameras.items()},
            "device_frame_gaps": {n: c.device_gaps for n, c in result.cameras.items()},
            "telemetry_ticks": ticks.report(),
        }
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, act.episode_id)
            assert ep is not None
            episodes.mark_finishing(
                s, episode=ep, clock_end_s=t_end, proposed=proposed, reason=reason, details=details
            )
            if proposed in (Outcome.safety,):
                episodes.add_event(
                    s, episode=ep, kind="safety_stop", t_s=t_end - act.t0, message=reason
                )
            elif proposed == Outcome.system:
                episodes.add_event(
                    s,
                    episode=ep,
                    kind="system_fault",
                    t_s=t_end - act.t0,
                    message=reason,
                    details={"fault": act.fault} if act.fault else None,
                )
            elif proposed == Outcome.operator_stop:
                episodes.add_event(
                    s, episode=ep, kind="operator_stop", t_s=t_end - act.t0, message=reason
                )
        ground_truth = self.cell.scene.ground_truth() if self.cell.scene is not None else None
        archived = archive_recording(
            sessions=self.sessions,
            store=self.store,
            episode_id=act.episode_id,
            spool=result.folder,
            cameras=list(self.cell.cameras),
            camera_settings={
                n: {"width": c.config.width, "height": c.config.height, "fps": c.config.fps}
                for n, c in self.cell.cameras.items()
            },
            recording=result,
            ground_truth=ground_truth,
            extra_manifest={
                "proposed_outcome": proposed.value,
                "reason": episodes.bounded(reason),
                "profile": self.cell.profile,
                "clock": "virtual" if self.cell.is_virtual else "monotonic",
                "control_hz": self.config.control_hz,
                "telemetry_hz": self.config.telemetry_hz,
                "open_loop_steps": self.config.open_loop_steps,
                "policy_lookahead_steps": self.config.policy_lookahead_steps,
                # the control loop's telemetry schedule: ticks it missed are counted here
                "telemetry_ticks": ticks.report(),
                "policy": {
                    **(act.client.info.public() if act.client.info else {}),
                    "calls": details["policy_calls"],
                    "latency_p50_s": details["latency_p50_s"],
                    "latency_p99_s": details["latency_p99_s"],
                    # camera frames resized to the policy's image size, and of those how
                    # many on the camera's thread before the query asked
                    "images_resized": act.resizer.resized,
                    "images_resized_ahead": act.resizer.ahead,
                },
            },
            interrupted=False,
        )
        notes.extend(archived.notes)
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, act.episode_id)
            assert ep is not None
            episodes.mark_awaiting_log(s, episode=ep)
        shutil.rmtree(result.folder, ignore_errors=True)
        duration = t_end - act.t0
        rate = (
            (result.telemetry_rows - 1) / (result.telemetry_last_t - result.telemetry_first_t)
            if result.telemetry_rows > 1
            and result.telemetry_last_t
            and result.telemetry_first_t is not None
            and result.telemetry_last_t > result.telemetry_first_t
            else 0.0
        )
        self.last = EpisodeSummary(
            uid=act.uid,
            run_code=act.work.run_code,
            proposed=proposed,
            reason=reason,
            duration_s=duration,
            telemetry_rows=result.telemetry_rows,
            telemetry_rate_hz=rate,
            frames={n: c.frames for n, c in result.cameras.items()},
            dropped_frames={n: c.dropped for n, c in result.cameras.items()},
            policy_calls=len(act.latencies),
            latency_p50_s=details["latency_p50_s"],
            latency_p99_s=details["latency_p99_s"],
            spool=None,
            artifacts=archived.shas,
            notes=notes,
            telemetry_missed_ticks=ticks.missed,
        )
        # home for the next episode unless a safety stop or fault needs the operator first
        if proposed not in (Outcome.safety,):
            try:
                self._home()
            except RunnerBusy as exc:
                notes.append(str(exc))
        else:
            self.arm_error = reason
        self._set_state(RunnerState.awaiting_log)

    # -- the operator's log ----------------------------------------------------------
    def submit_log(
        self, log_entry: episodes.OperatorLog, *, operator_id: int | None = None
    ) -> tuple[Work, str, Outcome]:
        return self.close_with(
            lambda s, uid: episodes.submit_log(s, uid=uid, log=log_entry, operator_id=operator_id)
        )

    def close_with(
        self, write_log: Callable[[ProctorSession, str], episodes.Episode]
    ) -> tuple[Work, str, Outcome]:
        """Close the episode awaiting its log with ``write_log(session, uid)``
        (``episodes.submit_log``, or the labelled ground-truth helper in demos)."""
        with self._lock:
            act = self.active
            if self.state != RunnerState.awaiting_log or act is None:
                raise RunnerBusy(f"station is {self.state.value}, not awaiting a log")
        with session_scope(self.sessions) as s:
            episode = write_log(s, act.uid)
            outcome = episode.outcome
        assert outcome is not None
        with self._lock:
            self.active = None
            self.state = RunnerState.idle
        self._on_change()
        return act.work, act.uid, outcome

    # -- what the console may see -------------------------------------------------------
    def status(self) -> dict[str, Any]:
        with self._lock:
            act = self.active
            out: dict[str, Any] = {
                "state": self.state.value,
                "station": self.config.name,
                "profile": self.cell.profile,
                "arm_error": self.arm_error,
            }
            if act is not None:
                out["work"] = act.work.public_view()
                out["episode"] = act.uid
                if self.state == RunnerState.running and not math.isnan(act.t0):
                    elapsed = self.cell.clock.now() - act.t0
                    out["elapsed_s"] = round(elapsed, 3)
                    out["remaining_s"] = round(max(0.0, act.work.budget_s - elapsed), 3)
            last = self.last
            if self.state == RunnerState.awaiting_log and last and act and last.uid == act.uid:
                out["proposed_outcome"] = last.proposed.value
                out["reason"] = last.reason
        return out
