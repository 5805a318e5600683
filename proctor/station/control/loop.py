"""The control loop: pace → stop check → action step → deadline → sample.

Each step returns how the episode ends, or None to go on. The loop proposes
an outcome; it never decides one (the operator's log does)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from proctor.core.domain import Outcome
from proctor.station import episodes, keys
from proctor.station.control.attribution import Attribution, Cause, attribute_fault, attribute_state
from proctor.station.control.call_log import CallLog
from proctor.station.control.playback import ChunkPlayer
from proctor.station.control.policy_calls import PolicyCalls, Waited
from proctor.station.control.sampling import TelemetrySampler
from proctor.station.control.schedule import Schedule, Tick
from proctor.station.drivers.arm.base import ArmFault, ArmHalted, ArmState
from proctor.station.drivers.gripper.base import GripperFault, GripperHalted, GripperState
from proctor.station.envelope import Envelope, EnvelopeStop, envelope_settings
from proctor.station.policy import units
from proctor.station.recorder import Recorder

if TYPE_CHECKING:
    from proctor.station.runner import EpisodeRunner, _Active

log = logging.getLogger(__name__)

Ending = tuple[Outcome, str]

# on a real-time clock a camera whose last frame is older than this has stalled
CAMERA_STALL_S = 1.0


class ControlLoop:
    """One episode's control loop, from the runner's ``_run`` to its ending."""

    def __init__(self, runner: EpisodeRunner, act: _Active, recorder: Recorder) -> None:
        cfg, cell = runner.config, runner.cell
        self.runner, self.act, self.cell = runner, act, cell
        self.clock = cell.clock
        self.real_time = not cell.is_virtual
        self._periods = runner.camera_periods
        self.schedule = Schedule(
            act.t0, act.work.budget_s, cfg.telemetry_hz, cfg.control_hz, act.ticks
        )
        # None until a Positronic server's first reply names it; its commands are
        # positions (cartesian_pos, joint_pos), never velocities
        space = act.client.action_space
        act.envelope = Envelope.for_arm(
            envelope_settings(cfg, cell.envelope_defaults), cell.arm, control_hz=cfg.control_hz
        )
        self.envelope = act.envelope
        self.player = ChunkPlayer(
            cell,
            space=space,
            open_loop_steps=cfg.open_loop_steps,
            control_hz=cfg.control_hz,
            real_time=self.real_time,
            grip=cfg.gripper.for_object(act.work.object_name),
            envelope=act.envelope,
            action_units=units.get(act.client.info.action_units) if act.client.info else None,
        )
        self.calls = PolicyCalls(
            act.worker,
            self._observe,
            clock=self.clock,
            wall=runner.wall,
            real_time=self.real_time,
            timeout_s=cfg.policy_timeout_s,
            lookahead_steps=cfg.policy_lookahead_steps if self.player.halt_kind is not None else 0,
            stop_requested=runner._stop_event.is_set,
            stop_arm=runner._stop_arm_now,
            latencies=act.latencies,
        )
        self.sampler = TelemetrySampler(recorder, prev_t=act.t0)
        act.call_log = CallLog(act.t0, cfg.control_hz, act.work.latency_budget)
        self.call_log = act.call_log

    def run(self) -> Ending:
        while True:
            tick = self._pace()
            if tick is None:
                return self._out_of_time()
            ending = self._tick(tick)
            if ending is not None:
                return ending

    def _tick(self, tick: Tick) -> Ending | None:
        ending = self.runner._requested_stop(self.act)
        if ending is not None:
            return ending
        if tick.action_due:
            step = self._action_step(tick.t_act)
            if step is Waited.interrupted:
                return None  # a stop was requested while the policy thought: the next tick ends it
            if step is not None:
                return step
        ending = self.calls.check_deadline(self.act.t0, self.act.end_details)
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
        work = self.act.work
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
                self.act.next_query_t = t + ahead * self.schedule.dt_act
        if player.playing:
            ending = self._play()
            if ending is not None:
                return ending
            if calls.wants_ahead(player.rows_left):
                calls.ask(t)  # the next chunk is asked for while this one's last rows run
        scene = self.cell.scene
        if scene is not None and scene.all_handled():
            self.runner._stop_arm_now()
            return Outcome.success, "all items handled (the simulated cell's operator ends it)"
        return None

    def _over_latency_budget(self, t: float) -> Ending:
        """The policy's replies were late past the campaign's tolerance: the arm
        stops and the episode ends charged to the policy, a scored failure
        (``safety``: its unfinished operation is a ghost, docs/methods.md §1),
        never to the station."""
        self.runner._stop_arm_now()
        log_ = self.call_log
        self.act.end_details[keys.LATENCY_BUDGET_EXCEEDED] = {
            "t_s": round(t - self.act.t0, 4),
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
            requested = self.runner._requested_stop(self.act)
            if requested is not None:
                return requested
            self.runner._stop_arm_now()
            return Outcome.safety, "arm halted by a stop"
        except ArmFault as exc:
            self.runner._stop_arm_now()
            # the controller's own error, when it has one, says more
            state = self.runner._arm_state()
            if state is not None and state.error is not None:
                return self._arm_fault(state.error, attribute_state(state))
            return self._arm_fault(str(exc), attribute_fault(exc))
        except GripperFault as exc:
            self.runner._stop_arm_now()
            return Outcome.safety, f"gripper fault: {exc}"
        except EnvelopeStop as exc:
            # the policy's command was refused, nothing was sent: a safety stop
            # of the policy's making (the arm holds where it is)
            self.runner._stop_arm_now()
            return Outcome.safety, str(exc)
        self.call_log.played()
        return None

    def _observe(self, t: float) -> dict[str, Any]:
        self.act.next_query_t = math.inf  # known again when the reply's chunk starts
        return self.runner._observation(self.act, t, self._periods)

    # -- a telemetry sample -------------------------------------------------------
    def _sample(self, tick: Tick) -> Ending | None:
        self.schedule.telemetry_taken()
        ticks, sampler, player = self.act.ticks, self.sampler, self.player
        try:
            a = self.cell.arm.read_state()
        except ArmFault as exc:  # the state is unreadable: the link is gone
            self.runner._stop_arm_now()
            return self._arm_fault(str(exc), attribute_fault(exc))
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
            self.runner._stop_arm_now()
            return self._arm_fault(a.error, attribute_state(a))
        breach = self.envelope.watch(a)
        if breach is not None:
            self.runner._stop_arm_now()
            return Outcome.safety, breach
        if g.fault is not None:
            self.runner._stop_arm_now()
            return Outcome.safety, f"gripper fault: {g.fault}"
        return None

    def _arm_fault(self, error: str, attribution: Attribution) -> Ending:
        """The ending an arm fault proposes: ``safety`` when the policy's motion
        caused it, ``system`` when the station did (``proctor.station.control.attribution``);
        the attribution goes into the episode's manifest and events."""
        self.act.arm_fault = attribution.record()
        log.warning(
            "episode %s: arm fault, cause %s (%s): %s",
            self.act.uid,
            attribution.cause.value,
            attribution.why,
            error,
        )
        reason = f"arm fault: {error}"
        if attribution.cause == Cause.station:
            reason += f" [the station's fault, not the policy's: {attribution.why}]"
        if attribution.follows_policy_motion:
            # the scheduler charges these to the policy past its free ones
            self.act.fault = episodes.FAULT_POLICY_MOTION
        return attribution.outcome, reason

    def _camera_stall(self) -> Ending | None:
        for name in self.cell.cameras:
            if self.runner.hub.wall_age(name) > CAMERA_STALL_S:
                self.runner._stop_arm_now()
                return Outcome.system, f"camera {name} stopped delivering frames"
        return None
