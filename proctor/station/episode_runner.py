"""The episode runner: arm → run → finish → await the operator's log → close.

State machine (``RunnerState``): idle → armed → running → finishing →
awaiting_log → (closed) idle, and homing (from idle or awaiting_log, back to
where it came from) when the operator homes the arm. The runner never
decides success: it stops on the time budget (``ran_out_of_time``), an
operator stop, a safety stop (the button, an arm reflex or a gripper fault:
``safety``), a policy or station failure (``system``), or — on the simulated
cell only — when the scene says every item is handled (standing in for the
operator who ends a finished episode); it *proposes* that outcome and the
operator's log decides.

The control loop schedules two clocks' worth of work on the cell's clock:
telemetry samples at ``telemetry_hz`` and action steps at ``control_hz``.
An action chunk is executed open-loop for ``open_loop_steps`` steps, then
the policy is asked again. On a real-time clock the request runs on the
policy worker's thread and the loop keeps sampling (and can stop the arm)
while it waits; on a virtual clock time stands still while the policy
thinks. Either way a reply later than ``policy_timeout_s`` (wall clock)
stops the arm at once and ends the episode ``system``. The loop and the
finishing are in ``proctor.station.control``, a part for each job; stopping the arm
and the stop a request proposes are the ``StopLatch``'s
(``proctor.station.control.stop_latch``), which the runner owns and hands to
the loop, and homing (``home``) stays here: one place each.

Stops and homing: a safety stop acts in every state, homing included,
before any bookkeeping — it counts itself, sets the stop event and
stops the arm, whose driver latches ``halted`` (``send``/``home`` refuse until
``resume``). Only the operator's start, recover and home resume the arm, each
re-checking afterwards that no safety stop came in meanwhile. Homing is never
automatic: not after an episode, not on recover, not on shutdown; the operator
homes with the cell confirmed clear, the gripper opened only if they say so,
and a run is armed only with the arm at home.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import sessionmaker

from proctor.core import episode_record
from proctor.core.artifacts import ArtifactStore
from proctor.core.clock import MonotonicClock
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import Outcome
from proctor.core.errors import FieldError, ProctorError
from proctor.core.recording import keys
from proctor.core.work import Work
from proctor.policywire.client import (
    PolicyClient,
    PolicyError,
    PolicyProtocolError,
    PolicyWorker,
)
from proctor.policywire.handshake import cameras
from proctor.policywire.observation import ImageResizer, build_observation
from proctor.station import episodes
from proctor.station.camerahub import CameraHub
from proctor.station.cell import HARDWARE_PROFILES, Cell
from proctor.station.config import StationConfig
from proctor.station.control.attribution import Origin, attribute_fault
from proctor.station.control.episode import EpisodeLog, EpisodePlan
from proctor.station.control.finishing import EpisodeFinish, EpisodeSummary
from proctor.station.control.loop import ControlLoop
from proctor.station.control.observe import proprio
from proctor.station.control.sampling import TelemetrySampler, TelemetryTicks
from proctor.station.control.stop_latch import StopKind, StopLatch
from proctor.station.drivers.arm.base import ArmFault, ArmHalted, ArmState
from proctor.station.drivers.camera.base import CameraStalled, Frame
from proctor.station.drivers.gripper.base import GripperCommand, GripperFault
from proctor.station.logs import EpisodeFaultLines
from proctor.station.recorder import Recorder, VideoSettings

log = logging.getLogger(__name__)


class RunnerState(StrEnum):
    idle = "idle"
    armed = "armed"
    running = "running"
    finishing = "finishing"
    awaiting_log = "awaiting_log"
    homing = "homing"  # the operator's homing, from idle or awaiting_log


class RunnerBusy(ProctorError):
    exit_code = 2
    http_status = 409


# how long closing the station waits for a running episode to finish (recording
# closed and uploaded); deploy/systemd/proctor-station.service's TimeoutStopSec
# allows for it
CLOSE_WAIT_S = 30.0


class PolicyUnreachable(ProctorError):
    """The policy failed its pre-flight (connect + metadata): the work was not started."""

    http_status = 503


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
        # the armed (then running, then finished) episode's plan, and its log beside it
        self.active: EpisodePlan | None = None
        self.episode_log = EpisodeLog()
        self.last: EpisodeSummary | None = None
        self.wall = MonotonicClock()
        self._thread: threading.Thread | None = None
        # the stop event, stopping the arm and the ending a stop requests; the
        # control loop is handed it
        self.stops = StopLatch(cell)
        self.arm_error: str | None = None  # an arm left in error needs an operator's recover
        # safety stops so far: start, recover and home resume the arm only if no
        # safety stop came in between their check and their resume
        self._safety_stops = 0
        # the cause of an arm fault outside an episode (homing): always the station's
        self.arm_fault: dict[str, Any] | None = None
        with session_scope(sessions) as s:
            self.station_id = episodes.ensure_station(s, name=config.name, profile=cell.profile).id

    # -- lifecycle ------------------------------------------------------------
    def open(self) -> None:
        """Connect the cell and start the cameras (call once). A camera that
        is absent does not keep the station from starting: the hub keeps
        trying it and arming is refused, naming it, until it is there (the
        arm and the gripper stay required)."""
        log.info("station %s (%s): connecting the cell", self.config.name, self.cell.profile)
        # a hardware cell's fingers never sweep at start with nobody watching
        self.cell.connect(
            cameras_required=False, activate_gripper=self.cell.profile not in HARDWARE_PROFILES
        )
        if self._own_hub:
            self.hub.start(absent=self.cell.absent_cameras)
        self._needs_recovery_at_start()

    def _needs_recovery_at_start(self) -> None:
        """An arm already in reflex or error (a reflex the last session left, a
        user stop released without recovery) starts the station needing the
        operator's recovery: nothing is armed until then (pre-flight only warns)."""
        state = self._arm_state()
        if state is not None and state.error is not None:
            self.arm_error = f"needs recovery: {state.error}"
            log.warning("the arm needs recovery before the first run: %s", state.error)

    def close(self) -> None:
        with self._lock:
            if self.active is not None and self.state == RunnerState.running:
                self.request_stop(StopKind.operator, "station shutting down")
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_S)
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
        self.check_ready()
        cfg = self.config
        if self.cell.scene is not None:
            self.cell.scene.prepare(work)
        client = PolicyClient(
            work.policy_url,
            dialect=work.dialect,
            exterior_numbering=work.exterior_numbering,
            action_units=work.action_units,
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
        missing = [name for name in cameras(info) if name not in self.cell.cameras]
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
                # the ledger stays on the station host, where anyone with a shell
                # reads it: how the policy spoke (dialect, action space, image size,
                # cameras, session flag) would tell the arms apart, so the event says
                # only that it answered. The episode's manifest keeps the wire for
                # the analysis (docs/architecture.md, "Blinding is structural").
                episodes.add_event(
                    s, episode=episode, kind="policy_connected", message="policy answered"
                )
                prompt = work.prompt or obj.prompt or f"put the {obj.name} into the target bin"
                uid, episode_id = episode.uid, episode.id
        except BaseException:
            client.close()
            raise
        with self._lock:
            # a new episode: no stop requested for it yet (a stop pressed while it
            # is armed stays set, and start refuses it)
            self.stops.reset()
            self.active = EpisodePlan(
                work,
                uid,
                episode_id,
                client,
                PolicyWorker(client),
                prompt,
                resizer=ImageResizer(info.image_size, pad=info.pad_images),
                cameras=frozenset(cameras(info)),
            )
            self.episode_log = EpisodeLog(ticks=TelemetryTicks(cfg.telemetry_hz))
        log.info("armed run %s as episode %s (%s)", work.run_code, uid, work.object_name)
        self._set_state(RunnerState.armed)
        return uid

    def _object_type(self, s: ProctorSession, work: Work) -> Any:
        spec = None
        if self.cell.profile == "sim":
            from proctor.station.sim.objects import OBJECTS

            spec = OBJECTS.get(work.object_name)
        return episodes.ensure_object_type(
            s,
            name=work.object_name,
            display_name=spec.display_name if spec else "",
            tags=list(spec.tags) if spec else [],
            prompt=spec.prompt if spec else "",
        )

    def check_ready(self) -> None:
        """Raise ``RunnerBusy`` unless a run may be armed now: the station idle,
        the arm out of error and standing at home (a run starts from a known pose)."""
        with self._lock:
            if self.state not in (RunnerState.idle,):
                raise RunnerBusy(f"station is {self.state.value}; finish that first")
            if self.arm_error is not None:
                raise RunnerBusy(f"the arm is in error ({self.arm_error}); recover it first")
        camera_problem = self.hub.arming_problem()
        if camera_problem is not None:
            raise RunnerBusy(camera_problem)
        try:
            inactive = self.cell.gripper.needs_activation()
        except GripperFault as exc:
            raise RunnerBusy(f"cannot read the gripper: {exc}") from None
        if inactive:
            raise RunnerBusy(
                "the gripper is not activated: activate it first (Activate gripper, "
                "hands clear: its fingers sweep open and closed)"
            )
        try:
            there = self.cell.arm.at_home()
        except ArmFault as exc:
            raise RunnerBusy(f"cannot read the arm: {exc}") from None
        if not there:
            raise RunnerBusy(
                "the arm is not at home: home it first (Home, confirming the cell is clear)"
            )

    def _resume_arm(self, stops_seen: int) -> bool:
        """Clear the arm's halt latch for an operator's action, unless a safety
        stop came in since ``stops_seen`` was read (then the arm is stopped
        again: the stop may have landed before the resume erased it)."""
        self.cell.arm.resume()
        self.cell.gripper.resume()
        if self._safety_stops != stops_seen:
            self.stops.stop_arm()
            self._halt_gripper_now()
            return False
        return True

    def home(self, *, cell_clear: bool, open_gripper: bool = False) -> None:
        """The operator's homing, with their confirmation that the cell is clear
        (nobody inside, nothing in the arm's way): lift, traverse, joints (the
        arm driver's ``home``); the gripper opens only if ``open_gripper``."""
        if not cell_clear:
            raise FieldError(
                "cell_clear", "homing moves the arm across the cell: confirm the cell is clear"
            )
        with self._lock:
            if self.state not in (RunnerState.idle, RunnerState.awaiting_log):
                raise RunnerBusy(f"station is {self.state.value}; cannot home now")
            if self.arm_error is not None:
                raise RunnerBusy(f"the arm is in error ({self.arm_error}); recover it first")
            back_to = self.state
            seen = self._safety_stops
            self.state = RunnerState.homing
        self._on_change()
        try:
            if not self._resume_arm(seen):
                raise RunnerBusy("a safety stop came in: not homing")
            log.info("homing the arm (operator confirmed the cell clear)")
            started = self.wall.now()
            self.cell.arm.home()
            log.info("arm homed in %.1f s", self.wall.now() - started)
            if open_gripper:
                self._open_gripper()
        except ArmHalted:
            raise RunnerBusy("homing was stopped by a safety stop") from None
        except ArmFault as exc:
            self.arm_error = f"homing failed: {exc}"
            self._note_station_fault(exc)
            raise RunnerBusy(f"homing failed: {exc}") from None
        except GripperFault as exc:
            raise RunnerBusy(f"homed, but the gripper did not open: {exc}") from None
        finally:
            self._set_state(back_to)

    def _open_gripper(self) -> None:
        """Open the gripper, on the operator's word. A gripper in fault (or never
        activated) is activated first — its fingers sweep — which recover no
        longer does: the operator's confirmation to open it covers that."""
        gripper = self.cell.gripper
        g = gripper.read_state()
        if g.fault is not None or not g.activated:
            log.info("activating the gripper before opening it (%s)", g.fault or "not activated")
            gripper.activate()
        gripper.send(GripperCommand(position=0.0))

    def _note_station_fault(self, exc: ArmFault) -> None:
        """A fault during the station's own motion: the station's, never a policy's."""
        attribution = attribute_fault(exc, self.cell.arm, Origin.station)
        self.arm_fault = attribution.record()
        log.warning("arm fault while homing, cause %s: %s", attribution.cause.value, exc)

    def recover(self) -> None:
        """The operator's explicit recovery after a safety stop or fault: it
        clears the controller's error and the halt latch, and moves nothing —
        the arm stays where it stopped, the gripper as it is (the operator
        homes the arm, and opens or activates the gripper, deliberately:
        ``activate_gripper`` is its own action)."""
        with self._lock:
            if self.state in (RunnerState.running, RunnerState.finishing, RunnerState.homing):
                raise RunnerBusy(f"cannot recover while the station is {self.state.value}")
            seen = self._safety_stops
        log.info("operator recovery: clearing the arm's error (%s)", self.arm_error)
        self.cell.arm.recover()
        if not self._resume_arm(seen):
            raise RunnerBusy("a safety stop came in during the recovery: recover again")
        log.info("operator recovery: arm recovered (nothing moved)")
        self.arm_error = None
        self.arm_fault = None
        self._on_change()

    def activate_gripper(self) -> None:
        """The operator's explicit gripper (re)activation, hands clear: it resets
        a major fault, and the fingers sweep fully open and closed."""
        with self._lock:
            if self.state in (RunnerState.armed, RunnerState.running, RunnerState.finishing):
                raise RunnerBusy(f"cannot activate the gripper: station is {self.state.value}")
        try:
            self.cell.gripper.activate()
        except GripperFault as exc:
            raise RunnerBusy(f"gripper activation failed: {exc}") from None
        self._on_change()

    def disarm(self) -> None:
        """Give up an armed episode before it started (closed as ``operator_stop``)."""
        with self._lock:
            plan = self.active
            if self.state != RunnerState.armed or plan is None:
                raise RunnerBusy(f"station is {self.state.value}, not armed")
        plan.worker.close()
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, plan.episode_id)
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
        log.info("episode %s disarmed before it started", plan.uid)
        self._set_state(RunnerState.awaiting_log)

    # -- run ----------------------------------------------------------------------
    def start(self, *, background: bool = True) -> None:
        with self._lock:
            plan = self.active
            if self.state != RunnerState.armed or plan is None:
                raise RunnerBusy(f"station is {self.state.value}, not armed")
            if self.stops.kind is not None:
                raise RunnerBusy(
                    f"this run was stopped while armed ({self.stops.reason}): give it up "
                    "(Give up this run) and log it"
                )
            if self.arm_error is not None:
                raise RunnerBusy(f"the arm is in error ({self.arm_error}); recover it first")
            seen = self._safety_stops
            self.state = RunnerState.running
        if not self._resume_arm(seen):
            with self._lock:
                self.state = RunnerState.armed
            raise RunnerBusy("a safety stop came in while starting: not started")
        log.info("episode %s started", plan.uid)
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
        """Operator stop or safety stop, from any thread. A safety stop acts in
        every state, homing included, before any bookkeeping: it is counted
        (for start/recover/home, see ``_resume_arm``), the control loop's stop
        event is set, and the arm is halted here and now (its driver latches),
        then the gripper (its fingers stop where they are, keeping what they
        hold, and take no command until an operator's start, homing or
        recovery). Only then is it recorded: on the
        episode when one is armed or running, and as the arm's error, which
        an operator's recover clears. An operator stop ends an armed or
        running episode, and is refused otherwise."""
        safety = kind == StopKind.safety
        if safety:
            self._safety_stops += 1
            self.stops.set()
            self.stops.stop_arm()
            # the arm first (it is the faster hazard), then the fingers: a
            # command already posted would otherwise still close them
            self._halt_gripper_now()
        text = reason or ("safety stop pressed" if safety else "operator stop")
        with self._lock:
            plan = self.active
            episode = plan is not None and self.state in (RunnerState.running, RunnerState.armed)
            if safety:
                where = "" if episode else f" while {self.state.value}"
                self.arm_error = self.arm_error or f"{text}{where}"
            elif not episode:
                raise RunnerBusy(f"nothing to stop: station is {self.state.value}")
            if plan is not None and episode:
                self.stops.record(kind, text)
        log.info("%s stop requested: %s", kind.value, text)
        if episode:
            self.stops.set()

    def _arm_state(self) -> ArmState | None:
        try:
            return self.cell.arm.read_state()
        except ArmFault:
            return None

    def _arm_faulted(self) -> bool:
        """Whether the arm reports an error (or cannot be read at all)."""
        try:
            return self.cell.arm.read_state().error is not None
        except ArmFault:
            return True

    def _halt_gripper_now(self) -> None:
        """A safety stop's other half (hardware review #7): the fingers stop
        where they are and take no command until an operator's action resumes
        them (``_resume_arm``)."""
        try:
            self.cell.gripper.halt()
        except Exception:
            log.critical("FAILED TO HALT THE GRIPPER", exc_info=True)

    def _run_safely(self) -> None:
        plan, episode = self.active, self.episode_log
        assert plan is not None
        clock = self.cell.clock
        episode.fault_lines = EpisodeFaultLines(
            lambda: 0.0 if math.isnan(episode.t0) else clock.now() - episode.t0
        )
        try:
            with episode.fault_lines:
                self._run(plan, episode)
        except BaseException:
            log.critical("episode %s crashed", plan.uid, exc_info=True)
            self.stops.stop_arm()
            raise
        finally:
            plan.worker.close()

    def _run(self, plan: EpisodePlan, episode: EpisodeLog) -> None:
        cfg, cell = self.config, self.cell
        clock = cell.clock
        spool = self.spool_root / plan.uid
        t0 = clock.now()
        episode.t0 = t0
        episode.next_query_t = t0  # the first query, at the start
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
                "episode_uid": plan.uid,
                "run_code": plan.work.run_code,
                "profile": cell.profile,
                # so that a recording recovered after a crash keeps its layout
                "layout": cell.layout(plan.work.tote_side, plan.work.camera_side),
                "cameras": {n: vars(v) for n, v in videos.items()},
                "telemetry_hz": cfg.telemetry_hz,
            },
        )
        self.hub.set_sink(self._frame_sink(plan, episode, recorder))
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, plan.episode_id)
            assert ep is not None
            episodes.mark_running(s, episode=ep, clock_start_s=t0)
        try:
            plan.client.reset(cfg.policy_timeout_s)
            proposed, reason = self._control_loop(plan, episode, recorder)
        except PolicyError as exc:
            self.stops.stop_arm()
            proposed, reason = Outcome.system, str(exc)
            if isinstance(exc, PolicyProtocolError):
                # the policy's own doing, not the station's: the scheduler charges a
                # policy for these once it has had its free ones (proctor.scheduler.claims)
                episode.fault = episode_record.FAULT_POLICY_PROTOCOL
        except Exception as exc:  # a station failure mid-episode: stop, record, report
            log.error("episode %s: station failure", plan.uid, exc_info=True)
            self.stops.stop_arm()
            proposed, reason = Outcome.system, f"station failure: {type(exc).__name__}: {exc}"
        t_end = clock.now()
        self._set_state(RunnerState.finishing)
        self._record_tail(episode, recorder, t_end)
        if cell.is_virtual:
            # every frame the simulator has taken so far reaches the recorder
            for name, period in self.camera_periods.items():
                try:
                    self.hub.frame_for(name, clock.now(), period, timeout_s=5.0)
                except CameraStalled:
                    log.warning("camera %s: last frames did not arrive", name)
        self.hub.set_sink(None)
        self._finish(plan, episode, recorder, proposed, reason, t_end)

    def _frame_sink(
        self, plan: EpisodePlan, episode: EpisodeLog, recorder: Recorder
    ) -> Callable[[str, Frame], None]:
        """Every frame to the recorder; a frame the next query will likely use
        is also resized for the policy, here on the camera's thread, so the
        query finds it done. On a virtual clock that is exactly the last frame
        taken at or before the query's time; on a real-time clock, any taken
        within 1.5 frame periods before it (frames come late and jitter)."""
        reach = 1.0 - 1e-9 if self.cell.is_virtual else 1.5
        window = {name: reach * period for name, period in self.camera_periods.items()}
        resizer = plan.resizer

        def sink(name: str, frame: Frame) -> None:
            recorder.add_frame(name, frame)
            if name in plan.cameras and frame.t > episode.next_query_t - window[name]:
                try:
                    resizer.prepare(name, (frame.index, frame.t), frame.image)
                except Exception:  # the query resizes it itself; the camera keeps reading
                    log.warning("camera %s: resizing ahead failed", name, exc_info=True)

        return sink

    # -- the control loop ---------------------------------------------------------
    def _control_loop(
        self, plan: EpisodePlan, episode: EpisodeLog, recorder: Recorder
    ) -> tuple[Outcome, str]:
        periods = self.camera_periods
        return ControlLoop(
            self.cell,
            self.config,
            plan,
            episode,
            recorder,
            stops=self.stops,
            observe=lambda t: self._observation(plan, t, periods),
            wall=self.wall,
            camera_age=self.hub.wall_age,
        ).run()

    def _observation(
        self, plan: EpisodePlan, t: float, periods: dict[str, float]
    ) -> dict[str, Any]:
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
        info = plan.client.info
        assert info is not None
        return build_observation(
            info,
            proprio=proprio(a, g),
            images=images,
            prompt=plan.prompt,
            privileged=cell.scene.privileged_observation() if cell.scene is not None else None,
            resizer=plan.resizer,
            frame_keys=frame_keys,
        )

    def _record_tail(self, episode: EpisodeLog, recorder: Recorder, t_end: float) -> None:
        """Half a second of the stopped cell, so the last release's settling is on record."""
        cell = self.cell
        clock = cell.clock
        dt = 1.0 / self.config.telemetry_hz
        sampler = TelemetrySampler(recorder, prev_t=t_end)
        k = 1
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
            sampler.sample(
                a,
                g,
                keys.TelemetryPhase.stopped,
                latency=episode.latencies[-1] if episode.latencies else math.nan,
                calls=len(episode.latencies),
            )

    # -- finish -------------------------------------------------------------------
    def _finish(
        self,
        plan: EpisodePlan,
        episode: EpisodeLog,
        recorder: Recorder,
        proposed: Outcome,
        reason: str,
        t_end: float,
    ) -> None:
        summary = EpisodeFinish(
            self.cell, self.config, self.sessions, self.store, plan, episode
        ).run(recorder, proposed, reason, t_end)
        self.last = summary
        log.info(
            "episode %s ended after %.1f s: proposed %s (%s)",
            plan.uid,
            summary.duration_s,
            summary.proposed.value,
            summary.reason,
        )
        if summary.proposed == Outcome.safety or self._arm_faulted():
            # a safety stop, or an arm fault of any cause (a station-caused one
            # ends the episode as `system` but latches the arm all the same),
            # needs the operator's recover; nothing homes on its own (the
            # operator homes with the cell confirmed clear)
            self.arm_error = summary.reason
        self._set_state(RunnerState.awaiting_log)

    # -- the operator's log ----------------------------------------------------------
    def submit_log(
        self,
        log_entry: episode_record.OperatorLog,
        *,
        operator_id: int | None = None,
        operator_label: str | None = None,
    ) -> tuple[Work, str, Outcome]:
        return self.close_with(
            lambda s, uid: episodes.submit_log(
                s,
                uid=uid,
                log=log_entry,
                operator_id=operator_id,
                operator_label=operator_label,
            )
        )

    def close_with(
        self, write_log: Callable[[ProctorSession, str], episodes.Episode]
    ) -> tuple[Work, str, Outcome]:
        """Close the episode awaiting its log with ``write_log(session, uid)``
        (``episodes.submit_log``, or the labelled ground-truth helper in demos)."""
        with self._lock:
            plan = self.active
            if self.state != RunnerState.awaiting_log or plan is None:
                raise RunnerBusy(f"station is {self.state.value}, not awaiting a log")
        with session_scope(self.sessions) as s:
            episode = write_log(s, plan.uid)
            outcome = episode.outcome
        assert outcome is not None
        log.info("episode %s closed by the operator's log: %s", plan.uid, outcome.value)
        with self._lock:
            self.active = None
            self.state = RunnerState.idle
        self._on_change()
        return plan.work, plan.uid, outcome

    # -- what the console may see -------------------------------------------------------
    def _robot(self) -> tuple[str | None, bool | None]:
        """The robot's own mode (user stop engaged, reflex, guiding, idle…) and
        whether it stands at home; None when the arm cannot be read (not
        connected, link lost)."""
        arm = self.cell.arm
        try:
            state = arm.read_state()
        except ArmFault:
            return None, None
        return (None if state.mode is None else state.mode.value), arm.at_home(state)

    def status(self) -> dict[str, Any]:
        mode, at_home = self._robot()  # read outside the runner's lock: the arm has its own
        with self._lock:
            plan = self.active
            out: dict[str, Any] = {
                "state": self.state.value,
                "station": self.config.name,
                "profile": self.cell.profile,
                "arm_error": self.arm_error,
                "robot_mode": mode,
                "at_home": at_home,
                "arm_fault": self.arm_fault,
            }
            if plan is not None:
                out["work"] = plan.work.public_view()
                out["episode"] = plan.uid
                t0 = self.episode_log.t0
                if self.state == RunnerState.running and not math.isnan(t0):
                    elapsed = self.cell.clock.now() - t0
                    out["elapsed_s"] = round(elapsed, 3)
                    out["remaining_s"] = round(max(0.0, plan.work.budget_s - elapsed), 3)
            last = self.last
            if self.state == RunnerState.awaiting_log and last and plan and last.uid == plan.uid:
                out["proposed_outcome"] = last.proposed.value
                out["reason"] = last.reason
        return out
