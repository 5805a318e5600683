"""The control loop: pace → stop check → action step → deadline → sample.

Each step returns how the episode ends, or None to go on. The loop proposes
an outcome; it never decides one (the operator's log does)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from proctor.core import episode_record
from proctor.core.clock import Clock
from proctor.core.domain import Outcome
from proctor.core.recording import keys
from proctor.policywire.wire import units
from proctor.station.cell import Cell
from proctor.station.config import StationConfig
from proctor.station.control.attribution import Attribution, Cause, attribute_fault, attribute_state
from proctor.station.control.call_log import CallLog
from proctor.station.control.episode import EpisodeLog, EpisodePlan
from proctor.station.control.playback import ChunkPlayer
from proctor.station.control.policy_calls import PolicyCalls, Waited
from proctor.station.control.sampling import TelemetrySampler
from proctor.station.control.schedule import Schedule, Tick
from proctor.station.control.stop_latch import StopLatch
from proctor.station.drivers.arm.base import ArmFault, ArmHalted, ArmState
from proctor.station.drivers.gripper.base import GripperFault, GripperHalted, GripperState
from proctor.station.envelope import Envelope, EnvelopeStop, envelope_settings
from proctor.station.recorder import Recorder

log = logging.getLogger(__name__)

Ending = tuple[Outcome, str]

# on a real-time clock a camera whose last frame is older than this has stalled
CAMERA_STALL_S = 1.0


class ControlLoop:
    """One episode's control loop, from its start to its ending.

    It is handed ports, not its owner: the cell and the station's settings,
    the episode's frozen ``plan`` and the ``episode`` log it writes into, the
    recorder, the ``stops`` latch (stopping the arm, the ending a stop
    requests), ``observe(t)`` (the policy's observation at station time
    ``t``), the ``wall`` clock the policy's deadlines run on, and
    ``camera_age(name)`` (wall seconds since a camera's last frame)."""

    def __init__(
        self,
        cell: Cell,
        config: StationConfig,
        plan: EpisodePlan,
        episode: EpisodeLog,
        recorder: Recorder,
        *,
        stops: StopLatch,
        observe: Callable[[float], dict[str, Any]],
        wall: Clock,
        camera_age: Callable[[str], float],
    ) -> None:
        cfg = config
        self.cell, self.plan, self.episode = cell, plan, episode
        self.stops = stops
        self._observation = observe
        self._camera_age = camera_age
        self.clock = cell.clock
        self.real_time = not cell.is_virtual
        self.schedule = Schedule(
            episode.t0, plan.work.budget_s, cfg.telemetry_hz, cfg.control_hz, episode.ticks
        )
        # None until a Positronic server's first reply names it; its commands are
        # positions (cartesian_pos, joint_pos), never velocities
        space = plan.client.action_space
        episode.envelope = Envelope.for_arm(
            envelope_settings(cfg, cell.envelope_defaults), cell.arm, control_hz=cfg.control_hz
        )
        self.envelope = episode.envelope
        self.player = ChunkPlayer(
            cell,
            space=space,
            open_loop_steps=cfg.open_loop_steps,
            control_hz=cfg.control_hz,
            real_time=self.real_time,
            grip=cfg.gripper.for_object(plan.work.object_name),
            envelope=episode.envelope,
            action_units=units.get(plan.client.info.action_units) if plan.client.info else None,
        )
        self.calls = PolicyCalls(
            plan.worker,
            self._observe,
            clock=self.clock,
            wall=wall,
            real_time=self.real_time,
            timeout_s=cfg.policy_timeout_s,
            lookahead_steps=cfg.policy_lookahead_steps if self.player.halt_kind is not None else 0,
            stop_requested=stops.is_set,
            stop_arm=stops.stop_arm,
            latencies=episode.latencies,
        )
        self.sampler = TelemetrySampler(recorder, prev_t=episode.t0)
        episode.call_log = CallLog(episode.t0, cfg.control_hz, plan.work.latency_budget)
        self.call_log = episode.call_log

    def run(self) -> Ending:
        while True:
            tick = self._pace()
            if tick is None:
                return self._out_of_time()
            ending = self._tick(tick)
            if ending is not None:
                return ending

    def _tick(self, tick: Tick) -> Ending | None:
        ending = self.stops.requested_ending()
        if ending is not None:
            return ending
        if tick.action_due:
            step = self._action_step(tick.t_act)
            if step is Waited.interrupted:
                return None  # a stop was requested while the policy thought: the next tick ends it
            if step is not None:
                return step
        ending = self.calls.check_deadline(self.episode.t0, self.episode.end_details)
        if ending is not None:
            return ending
        return self._sample(tick) if tick.telemetry_due else None

    # -- pace ---------------------------------------------------------------------
    def _pace(self) -> Tick | None:
        """Sleep until the next tick; None when it lies past the time budget."""
        tick = self.schedule.next()
        if self.schedule.past_end(tick):
            self.clock.sleep_until(self.schedule.end)
            return None
        self.clock.sleep_until(tick.t)
        if self.real_time:
            self.schedule.resume_at(self.clock.now())
        return tick

    def _out_of_time(self) -> Ending:
        work = self.plan.work
        return Outcome.ran_out_of_time, (
            f"time budget of {work.budget_s:g} s "
            f"({work.items} items × {work.per_item_cap_s:g} s) used up"
        )

    # -- an action step -----------------------------------------------------------
    def _action_step(self, t: float) -> Ending | Waited | None:
        self.schedule.action_taken()
        player, calls = self.player, self.calls
        if player.exhausted:
            player.drop()
            self.call_log.needed(t)
            reply = calls.next_chunk(t, player.halt)
            if reply is Waited.interrupted:
                return reply
            if reply is not None:
                player.load(reply, t, calls.asked_at)
                self.call_log.replied(reply, asked_at=calls.asked_at, t=t, first_row=player.row)
                if self.call_log.exceeded:
                    return self._over_latency_budget(t)
                ahead = max(0, player.rows_left - calls.lookahead)
                self.episode.next_query_t = t + ahead * self.schedule.dt_act
        if player.playing:
            ending = self._play()
            if ending is not None:
                return ending
            if calls.wants_ahead(player.rows_left):
                calls.ask(t)  # the next chunk is asked for while this one's last rows run
        scene = self.cell.scene
        if scene is not None and scene.all_handled():
            self.stops.stop_arm()
            return Outcome.success, "all items handled (the simulated cell's operator ends it)"
        return None

    def _over_latency_budget(self, t: float) -> Ending:
        """The policy's replies were late past the campaign's tolerance: the arm
        stops and the episode ends charged to the policy, a scored failure
        (``safety``: its unfinished operation is a ghost, docs/methods.md §1),
        never to the station."""
        self.stops.stop_arm()
        log_ = self.call_log
        self.episode.end_details[keys.LATENCY_BUDGET_EXCEEDED] = {
            "t_s": round(t - self.episode.t0, 4),
            "over_budget": log_.over_budget,
            "budget_ms": log_.budget.budget_ms if log_.budget else None,
            "tolerance": log_.budget.tolerance if log_.budget else None,
        }
        return Outcome.safety, log_.exceeded_reason()

    def _play(self) -> Ending | None:
        try:
            self.player.play_next()
        except (ArmHalted, GripperHalted):
            # a stop landed while this step was sent: the stop's own ending
            requested = self.stops.requested_ending()
            if requested is not None:
                return requested
            self.stops.stop_arm()
            return Outcome.safety, "arm halted by a stop"
        except ArmFault as exc:
            self.stops.stop_arm()
            # the controller's own error, when it has one, says more
            state = self._arm_state()
            if state is not None and state.error is not None:
                return self._arm_fault(state.error, attribute_state(state, self.cell.arm))
            return self._arm_fault(str(exc), attribute_fault(exc, self.cell.arm))
        except GripperFault as exc:
            self.stops.stop_arm()
            return Outcome.safety, f"gripper fault: {exc}"
        except EnvelopeStop as exc:
            # the policy's command was refused, nothing was sent: a safety stop
            # of the policy's making (the arm holds where it is)
            self.stops.stop_arm()
            return Outcome.safety, str(exc)
        self.call_log.played()
        return None

    def _observe(self, t: float) -> dict[str, Any]:
        self.episode.next_query_t = math.inf  # known again when the reply's chunk starts
        return self._observation(t)

    def _arm_state(self) -> ArmState | None:
        try:
            return self.cell.arm.read_state()
        except ArmFault:
            return None

    # -- a telemetry sample -------------------------------------------------------
    def _sample(self, tick: Tick) -> Ending | None:
        self.schedule.telemetry_taken()
        ticks, sampler, player = self.episode.ticks, self.sampler, self.player
        try:
            a = self.cell.arm.read_state()
        except ArmFault as exc:  # the state is unreadable: the link is gone
            self.stops.stop_arm()
            return self._arm_fault(str(exc), attribute_fault(exc, self.cell.arm))
        g = self.cell.gripper.read_state()
        if sampler.is_stale(a):
            ticks.stale += 1
            return None
        ending = self._cell_fault(a, g)
        if ending is not None:
            return ending
        if sampler.sampled:
            ticks.gap(a.t - sampler.prev_t)
        if self.real_time:
            ticks.lag(self.clock.now() - tick.t_tel)
        sampler.sample(
            a,
            g,
            keys.TelemetryPhase.running if player.playing else keys.TelemetryPhase.awaiting_policy,
            requested=player.current,
            sent=player.sent_arm,
            step=player.step,
            envelope=player.envelope_mask,
            latency=self.calls.last_latency,
            calls=self.calls.calls,
        )
        return self._camera_stall() if self.real_time else None

    def _cell_fault(self, a: ArmState, g: GripperState) -> Ending | None:
        """An arm fault (attributed to its cause), the measured tool outside the
        envelope's box or cone (a prediction the arm did not follow: a safety
        stop), or a gripper fault (a safety stop) that the cell reports."""
        if a.error is not None:
            self.stops.stop_arm()
            return self._arm_fault(a.error, attribute_state(a, self.cell.arm))
        breach = self.envelope.watch(a)
        if breach is not None:
            self.stops.stop_arm()
            return Outcome.safety, breach
        if g.fault is not None:
            self.stops.stop_arm()
            return Outcome.safety, f"gripper fault: {g.fault}"
        return None

    def _arm_fault(self, error: str, attribution: Attribution) -> Ending:
        """The ending an arm fault proposes: ``safety`` when the policy's motion
        caused it, ``system`` when the station did (``proctor.station.control.attribution``);
        the attribution goes into the episode's manifest and events."""
        self.episode.arm_fault = attribution.record()
        log.warning(
            "episode %s: arm fault, cause %s (%s): %s",
            self.plan.uid,
            attribution.cause.value,
            attribution.why,
            error,
        )
        reason = f"arm fault: {error}"
        if attribution.cause == Cause.station:
            reason += f" [the station's fault, not the policy's: {attribution.why}]"
        if attribution.follows_policy_motion:
            # the scheduler charges these to the policy past its free ones
            self.episode.fault = episode_record.FAULT_POLICY_MOTION
        return attribution.outcome, reason

    def _camera_stall(self) -> Ending | None:
        for name in self.cell.cameras:
            if self._camera_age(name) > CAMERA_STALL_S:
                self.stops.stop_arm()
                return Outcome.system, f"camera {name} stopped delivering frames"
        return None
