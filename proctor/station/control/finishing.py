"""Finishing an episode: close the recording, record how it ended, archive
the spool with its manifest, and summarise it for the operator."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import sessionmaker

from proctor.core import episode_record
from proctor.core.artifacts import ArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import Outcome
from proctor.core.recording import keys
from proctor.policywire.handshake import public_info
from proctor.station import episodes
from proctor.station.archive import archive_recording
from proctor.station.cell import Cell
from proctor.station.config import StationConfig
from proctor.station.control.episode import EpisodeLog, EpisodePlan
from proctor.station.recorder import Recorder, RecordingResult


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


# the event that records an ending the operator should see in the episode's log;
# the other endings (success, ran_out_of_time) are in the `finished` event only
OUTCOME_EVENTS: dict[Outcome, str] = {
    Outcome.safety: "safety_stop",
    Outcome.system: "system_fault",
    Outcome.operator_stop: "operator_stop",
}


@dataclass
class _Ending:
    proposed: Outcome
    reason: str
    notes: list[str]


def _telemetry_rate(result: RecordingResult) -> float:
    """Samples per second over the recorded telemetry, 0 with fewer than two."""
    first, last = result.telemetry_first_t, result.telemetry_last_t
    if result.telemetry_rows > 1 and last and first is not None and last > first:
        return (result.telemetry_rows - 1) / (last - first)
    return 0.0


class EpisodeFinish:
    """Everything the end of one episode leaves behind, in order: the closed
    recording, the episode marked finishing with its ending's event, the
    archived spool and manifest, the episode awaiting its log, the summary."""

    def __init__(
        self,
        cell: Cell,
        config: StationConfig,
        sessions: sessionmaker[ProctorSession],
        store: ArtifactStore,
        plan: EpisodePlan,
        episode: EpisodeLog,
    ) -> None:
        self.cell, self.config, self.sessions, self.store = cell, config, sessions, store
        self.plan, self.episode = plan, episode

    def run(
        self, recorder: Recorder, proposed: Outcome, reason: str, t_end: float
    ) -> EpisodeSummary:
        result, ending = self._close(recorder, _Ending(proposed, reason, []))
        details = self._details(result)
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, self.plan.episode_id)
            assert ep is not None
            episodes.mark_finishing(
                s,
                episode=ep,
                clock_end_s=t_end,
                proposed=ending.proposed,
                reason=ending.reason,
                details=details,
            )
            self._add_outcome_event(s, ep, ending, t_end)
            self._add_envelope_events(s, ep)
            self._add_calls_event(s, ep)
        archived = archive_recording(
            sessions=self.sessions,
            store=self.store,
            episode_id=self.plan.episode_id,
            spool=result.folder,
            cameras=list(self.cell.cameras),
            camera_settings={
                n: {
                    "width": c.config.width,
                    "height": c.config.height,
                    "fps": c.config.fps,
                    **c.describe(),
                }
                for n, c in self.cell.cameras.items()
            },
            recording=result,
            ground_truth=self.cell.scene.ground_truth() if self.cell.scene is not None else None,
            extra_manifest=self._manifest(ending, details),
            interrupted=False,
        )
        ending.notes.extend(archived.notes)
        with session_scope(self.sessions) as s:
            ep = s.get(episodes.Episode, self.plan.episode_id)
            assert ep is not None
            episodes.mark_awaiting_log(s, episode=ep)
        shutil.rmtree(result.folder, ignore_errors=True)
        return EpisodeSummary(
            uid=self.plan.uid,
            run_code=self.plan.work.run_code,
            proposed=ending.proposed,
            reason=ending.reason,
            duration_s=t_end - self.episode.t0,
            telemetry_rows=result.telemetry_rows,
            telemetry_rate_hz=_telemetry_rate(result),
            frames={n: c.frames for n, c in result.cameras.items()},
            dropped_frames={n: c.dropped for n, c in result.cameras.items()},
            policy_calls=len(self.episode.latencies),
            latency_p50_s=details["latency_p50_s"],
            latency_p99_s=details["latency_p99_s"],
            spool=None,
            artifacts=archived.shas,
            notes=ending.notes,
            telemetry_missed_ticks=self.episode.ticks.missed,
        )

    def _close(self, recorder: Recorder, ending: _Ending) -> tuple[RecordingResult, _Ending]:
        """Close the recording; a recording that failed ends the episode ``system``
        (a safety stop stays one: the operator must see it)."""
        try:
            result = recorder.close()
        except RuntimeError as exc:
            ending.notes.append(str(exc))
            ending.proposed, ending.reason = Outcome.system, f"recording failed: {exc}"
            result = recorder.close()
        for name, cam in result.cameras.items():
            if cam.error:
                ending.notes.append(f"camera {name}: {cam.error}")
                if ending.proposed != Outcome.safety:
                    ending.proposed = Outcome.system
                    ending.reason = f"recording camera {name} failed"
        ticks = self.episode.ticks
        if ticks.missed:
            ending.notes.append(
                f"telemetry: {ticks.missed} of {ticks.scheduled} ticks at {ticks.hz:g} Hz "
                f"not sampled ({ticks.late} passed over by a late loop, {ticks.stale} "
                f"without a newer arm state); longest gap {ticks.max_gap_s * 1000:.0f} ms"
            )
        return result, ending

    def _details(self, result: RecordingResult) -> dict[str, Any]:
        """The `finished` event's details."""
        lat = np.array(self.episode.latencies) if self.episode.latencies else None
        return {
            **self.episode.end_details,
            "policy_calls": len(self.episode.latencies),
            "latency_p50_s": float(np.percentile(lat, 50)) if lat is not None else None,
            "latency_p99_s": float(np.percentile(lat, 99)) if lat is not None else None,
            "dropped_frames": {n: c.dropped for n, c in result.cameras.items()},
            "device_frame_gaps": {n: c.device_gaps for n, c in result.cameras.items()},
            "telemetry_ticks": self.episode.ticks.report(),
        }

    def _add_outcome_event(
        self, s: ProctorSession, ep: episodes.Episode, ending: _Ending, t_end: float
    ) -> None:
        kind = OUTCOME_EVENTS.get(ending.proposed)
        if kind is None:
            return
        fault = self.episode.fault if ending.proposed == Outcome.system else None
        details: dict[str, Any] = {"fault": fault} if fault else {}
        if self.episode.arm_fault is not None:
            details["arm_fault"] = self.episode.arm_fault
        episodes.add_event(
            s,
            episode=ep,
            kind=kind,
            t_s=t_end - self.episode.t0,
            message=ending.reason,
            details=details or None,
        )

    def _add_calls_event(self, s: ProctorSession, ep: episodes.Episode) -> None:
        """The per-call table, one event for the episode: the analysis and the
        explorer read it from the database, where they read everything else
        of an episode, without opening its artifacts."""
        calls = self.episode.call_log
        if calls is None:
            return
        episodes.add_event(
            s,
            episode=ep,
            kind=keys.POLICY_CALLS_EVENT,
            message=f"{len(calls.calls)} policy calls"
            + (f", {calls.over_budget} over the latency budget" if calls.budget else ""),
            details=calls.event_details(),
        )

    def _add_envelope_events(self, s: ProctorSession, ep: episodes.Episode) -> None:
        """One ``envelope`` event per run of action steps the envelope changed."""
        env = self.episode.envelope
        if env is None:
            return
        t0 = self.episode.t0
        for run in env.log.runs:
            reasons = sorted(r.value for r in run.reasons)
            details: dict[str, Any] = {
                "reason": "+".join(reasons),
                "reasons": reasons,
                "steps": run.steps,
                "until_s": round(run.t_end - t0, 4),
            }
            message = f"envelope changed {run.steps} action step(s): {', '.join(reasons)}"
            if run.note:  # e.g. which point of the arm a Cartesian command took how low
                details["note"] = run.note
                message += f" ({run.note})"
            episodes.add_event(
                s,
                episode=ep,
                kind=keys.ENVELOPE_EVENT,
                t_s=run.t_start - t0,
                message=message,
                details=details,
            )
        if env.log.runs_dropped:
            episodes.add_event(
                s,
                episode=ep,
                kind=keys.ENVELOPE_EVENT,
                message=f"envelope: {env.log.runs_dropped} more runs of interventions "
                "(not listed; the manifest counts every one)",
                details={"runs_not_listed": env.log.runs_dropped},
            )

    def _manifest(self, ending: _Ending, details: dict[str, Any]) -> dict[str, Any]:
        """What the runner adds to the episode's manifest."""
        plan, episode, cfg, cell = self.plan, self.episode, self.config, self.cell
        # a commissioned cell's measured layout (the real and twin cells);
        # without one the archive writes the profile's own (archive.cell_layout)
        layout = cell.layout(plan.work.tote_side, plan.work.camera_side)
        return {
            **({"layout": layout} if layout is not None else {}),
            "proposed_outcome": ending.proposed.value,
            "reason": episode_record.bounded(ending.reason),
            "profile": cell.profile,
            "clock": "virtual" if cell.is_virtual else "monotonic",
            "control_hz": cfg.control_hz,
            "telemetry_hz": cfg.telemetry_hz,
            "open_loop_steps": cfg.open_loop_steps,
            "policy_lookahead_steps": cfg.policy_lookahead_steps,
            # the control loop's telemetry schedule: ticks it missed are counted here
            "telemetry_ticks": episode.ticks.report(),
            # an arm fault's cause: the policy's contact (safety) or the station's (system)
            "arm_fault": episode.arm_fault,
            # the warnings and errors the station logged during the episode
            "fault_lines": episode.fault_lines.report()
            if episode.fault_lines is not None
            else None,
            # what the envelope changed: {"interventions", "by_reason", "limits"}
            # (the board and the explorer read exactly this shape); null when
            # the episode ended before its control loop ran
            "envelope": episode.envelope.report() if episode.envelope is not None else None,
            "policy": {
                **(public_info(plan.client.info) if plan.client.info else {}),
                "calls": details["policy_calls"],
                "latency_p50_s": details["latency_p50_s"],
                "latency_p99_s": details["latency_p99_s"],
                # calls slower than the campaign's latency budget (None: it set none)
                "calls_over_budget": (
                    episode.call_log.over_budget
                    if episode.call_log is not None and episode.call_log.budget is not None
                    else None
                ),
                # camera frames resized to the policy's image size, and of those how
                # many on the camera's thread before the query asked
                "images_resized": plan.resizer.resized,
                "images_resized_ahead": plan.resizer.ahead,
            },
        }
