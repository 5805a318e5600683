"""The station daemon: one cell, one runner, one work source, one local API.

Built at the entry point (``proctor station run``) from the global settings
(database, artifact store, data folder) and the station config; on start it
first finishes whatever a killed predecessor left behind (``recovery``).
Everything the operator console sees goes through ``status()`` and the
preview frames: run codes, objects, configurations, states and countdowns —
never a policy URL, name, owner or checkpoint.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PIL import Image
from sqlalchemy.orm import sessionmaker

from proctor.core import episode_record
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import EndpointDialect, Outcome
from proctor.core.errors import ConfigError, FieldError, ProctorError
from proctor.core.work import Work, WorkSource
from proctor.policywire import dialects
from proctor.policywire.handshake import auth_headers
from proctor.station import episodes
from proctor.station.config import StationConfig
from proctor.station.deadman import ConsoleDeadman
from proctor.station.episode_runner import (
    EpisodeRunner,
    PolicyUnreachable,
    RunnerBusy,
    RunnerState,
    StopKind,
)
from proctor.station.profiles import build_cell
from proctor.station.recovery import Recovered, recover_interrupted
from proctor.station.work_source import AdHocWorkSource, load_work_source

log = logging.getLogger(__name__)


class NoWork(ProctorError):
    exit_code = 2
    http_status = 404


@dataclass
class Notice:
    """The last thing the operator should know that is not an episode state."""

    level: str  # info | warning | error
    message: str


def adhoc_source(options: dict[str, Any]) -> WorkSource:
    """``[work] source = "adhoc"``: the same work repeatedly, from the config's
    options. ``dialect`` names the policy's wire (default: detected from an
    openpi/RoboArena server's metadata; ``positronic_v1`` must be named);
    ``api_key_env`` names the environment variable holding its API key."""
    opts = dict(options)
    repeat = int(opts.pop("repeat", 1_000_000))
    try:
        dialect = EndpointDialect(opts.pop("dialect")) if "dialect" in opts else None
    except ValueError:
        raise FieldError(
            "work.options.dialect", "not one of " + ", ".join(d.value for d in EndpointDialect)
        ) from None
    headers: dict[str, str] = {}
    if "api_key_env" in opts:
        name = str(opts.pop("api_key_env"))
        key = os.environ.get(name, "")
        if not key:
            raise FieldError(
                "work.options.api_key_env", f"the environment variable {name} is empty"
            )
        headers = auth_headers(dialect, key)
    try:
        url = opts.pop("policy")
        try:
            # as the dialect dials it (a Positronic server's gets its session path)
            url = dialects.get_or_detected(dialect).dial_url(url)
        except ValueError as exc:
            raise FieldError("work.options.policy", str(exc)) from None
        template = Work(
            run_code="X-ADHOC",
            object_name=opts.pop("object"),
            items=int(opts.pop("items", 8)),
            per_item_cap_s=float(opts.pop("per_item_cap_s", 30.0)),
            tote_side=opts.pop("tote_side", "left"),
            camera_side=opts.pop("camera_side", "right"),
            policy_url=url,
            sim_seed=opts.pop("seed", None),
            dialect=dialect,
            policy_headers=headers,
        )
    except KeyError as exc:
        raise FieldError(
            "work.options", f"'{exc.args[0]}' is required for the ad-hoc source"
        ) from None
    if opts:
        raise FieldError("work.options", f"unknown option(s) {', '.join(sorted(opts))}")
    return AdHocWorkSource(template, repeat=repeat)


class Uplink(Protocol):
    """The link to the server of a station host that keeps a ledger
    (``proctor.station.uplink.forwarder.Forwarder``)."""

    def status(self) -> dict[str, Any]: ...

    def nudge(self) -> None: ...

    def drain(self, timeout: float) -> bool: ...

    def watch(self, callback: Callable[[], None]) -> None: ...

    def close(self) -> None: ...


class StationDaemon:
    def __init__(
        self,
        config: StationConfig,
        profile: str,
        *,
        sessions: sessionmaker[ProctorSession],
        store: ArtifactStore,
        spool_root: Path,
        source: WorkSource | None = None,
        uplink: Uplink | None = None,
    ) -> None:
        """``uplink``: ``sessions`` and ``store`` are the station's own ledger
        and local store, forwarded to the server by ``uplink`` (which the
        daemon nudges on every change and closes with itself)."""
        self.config = config
        self.uplink = uplink
        self.profile = profile
        self.sessions = sessions
        self.store = store
        self.spool_root = Path(spool_root)
        self.recovered: list[Recovered] = recover_interrupted(
            sessions=sessions, store=store, station_name=config.name, spool_root=self.spool_root
        )
        self.source = source if source is not None else self._source_from_config()
        self.cell = build_cell(profile, config)
        self._changed = threading.Condition()
        self._version = 0
        self.notice: Notice | None = None
        # the armed run's reference photo (simulated cell): episode uid, camera → JPEG
        self._reference: tuple[str, dict[str, bytes]] | None = None
        if self.recovered:
            self.notice = Notice(
                "warning",
                f"{len(self.recovered)} interrupted episode(s) recovered: "
                + ", ".join(r.uid for r in self.recovered),
            )
        self.runner = EpisodeRunner(
            self.cell,
            config=config,
            sessions=sessions,
            store=store,
            spool_root=self.spool_root,
            on_change=self._bump,
        )
        self._lock = threading.Lock()
        if uplink is not None:
            uplink.watch(self._announce)  # the console hears when the link changes
        self.deadman: ConsoleDeadman | None = None
        if config.console_deadman_s > 0:
            self.deadman = ConsoleDeadman(config.console_deadman_s, self._console_lost)

    def _source_from_config(self) -> WorkSource:
        w = self.config.work
        if w.source == "adhoc":
            # without options there is nothing to do until work is configured
            return adhoc_source(w.options) if w.options else _empty_source()
        return load_work_source(w.source, {**w.options, **self._cell_identity()})

    def _cell_identity(self) -> dict[str, str]:
        """The config's site and cell profile, for a work source that registers
        the station (only those declared: a source that takes neither still loads)."""
        declared = {
            k: v
            for k, v in (("site", self.config.site), ("cell_profile", self.config.cell_profile))
            if v is not None
        }
        for key, value in declared.items():
            given = self.config.work.options.get(key, value)
            if given != value:
                raise ConfigError(
                    f"work.options.{key}: {given!r} contradicts the station's {key} {value!r}"
                )
        return declared

    # -- lifecycle --------------------------------------------------------------------
    def open(self) -> None:
        self.runner.open()
        if self.deadman is not None:
            self.deadman.start()

    def close(self) -> None:
        if self.deadman is not None:
            self.deadman.close()
        self.runner.close()
        if self.uplink is not None:
            self.uplink.close()

    def _bump(self) -> None:
        if self.deadman is not None and self.runner.state not in (
            RunnerState.armed,  # being started
            RunnerState.running,
            RunnerState.homing,  # the console's homing is watched too
        ):
            self.deadman.release()  # the watched episode is over
        self._announce()
        if self.uplink is not None:
            self.uplink.nudge()  # the ledger changed: forward it

    def _announce(self) -> None:
        """A new status version for the console's live feed."""
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def wait_change(self, version: int, timeout: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._version != version, timeout)
            return self._version

    @property
    def version(self) -> int:
        return self._version

    # -- operator actions ----------------------------------------------------------------
    def next_run(self) -> dict[str, Any]:
        """Claim the next work and arm it. A policy that fails its pre-flight is
        handed back to the source (skipped, rescheduled) and the operator is told
        so — in words that do not identify it."""
        with self._lock:
            if self.runner.state != RunnerState.idle:
                raise episodes.WrongState(f"station is {self.runner.state.value}")
            self.runner.check_ready()  # before a claim: a refusal takes no work
            work = self.source.claim()
            if work is None:
                # a source may say why (e.g. the server is offline)
                why = getattr(self.source, "nothing_reason", "") or (
                    "nothing is scheduled for this station right now"
                )
                raise NoWork(f"no work: {why}")
            try:
                uid = self.runner.arm(work)
            except PolicyUnreachable as exc:
                self.source.abandoned(work, reason=str(exc))
                self.notice = Notice("warning", f"run {work.run_code} skipped: {exc}")
                self._bump()
                raise
            except BaseException:
                self.source.abandoned(work, reason="arming failed")
                raise
            self._reference = self._render_reference(uid)
            self.notice = None
            self._bump()
            return self.status()

    def _render_reference(self, uid: str) -> tuple[str, dict[str, bytes]] | None:
        """A simulated cell renders its freshly laid-out, homed scene: the
        reference photo the console shows. Real cells have none (the console
        shows a registered photo instead); a failure here never blocks a run."""
        scene = self.cell.scene
        if scene is None:
            return None
        try:
            return uid, {
                name: self._jpeg(scene.still(name, cam.config.width, cam.config.height))
                for name, cam in self.cell.cameras.items()
            }
        except Exception:
            log.error("rendering the reference photo failed", exc_info=True)
            return None

    def start(self, *, from_console: bool = False) -> dict[str, Any]:
        """Start the armed episode; one started from the console (the station
        API) is watched by the console-link deadman."""
        watched = from_console and self.deadman is not None
        if watched:
            assert self.deadman is not None
            self.deadman.watch()
        try:
            self.runner.start(background=True)
        except BaseException:
            if watched:
                assert self.deadman is not None
                self.deadman.release()
            raise
        return self.status()

    def heartbeat(self) -> dict[str, Any]:
        """The console is there (its page beats every half second)."""
        if self.deadman is not None:
            self.deadman.beat()
        return {"ok": True, "deadman_s": self.config.console_deadman_s}

    def _console_lost(self, silent_s: float) -> None:
        reason = (
            f"console link lost: no heartbeat from the operator console for {silent_s:.1f} s "
            f"(deadman {self.config.console_deadman_s:g} s)"
        )
        if self.runner.state == RunnerState.homing:
            # the arm crosses the cell with nobody watching the console: a
            # safety stop (the only stop homing takes), which the operator
            # recovers from before anything moves again (hardware review #8)
            self.runner.request_stop(StopKind.safety, reason)
            self.notice = Notice("error", reason + ": homing was stopped")
            self._bump()
            return
        try:
            self.runner.request_stop(StopKind.operator, reason)
        except RunnerBusy:
            return  # the episode had ended already
        self.notice = Notice("error", reason + ": the episode was stopped")
        self._bump()

    def home_arm(
        self, *, cell_clear: bool, open_gripper: bool = False, from_console: bool = False
    ) -> dict[str, Any]:
        """The operator's homing, with the cell confirmed clear (see
        ``EpisodeRunner.home``). Homing asked for from the console (the local
        API) is watched by the console-link deadman, as an episode is."""
        watched = from_console and self.deadman is not None
        if watched:
            assert self.deadman is not None
            self.deadman.watch()
        try:
            self.runner.home(cell_clear=cell_clear, open_gripper=open_gripper)
        finally:
            if watched:
                assert self.deadman is not None
                self.deadman.release()
        gripper = "gripper opened" if open_gripper else "gripper left as it was"
        self.notice = Notice("info", f"arm homed, {gripper}")
        self._bump()
        return self.status()

    def stop(self, safety: bool = False) -> dict[str, Any]:
        kind = StopKind.safety if safety else StopKind.operator
        self.runner.request_stop(kind)
        return self.status()

    def recover_arm(self) -> dict[str, Any]:
        self.runner.recover()
        self.notice = Notice(
            "info",
            "arm recovered: it stays where it stopped and the gripper as it is; "
            "home it when the cell is clear",
        )
        self._bump()
        return self.status()

    def activate_gripper(self) -> dict[str, Any]:
        self.runner.activate_gripper()
        self.notice = Notice("info", "gripper activated")
        self._bump()
        return self.status()

    def disarm(self) -> dict[str, Any]:
        self.runner.disarm()
        return self.status()

    def submit_log(
        self,
        data: dict[str, Any],
        operator_id: int | None = None,
        operator_name: str | None = None,
    ) -> dict[str, Any]:
        """Close the episode awaiting its log. With an uplink, the console's
        accounts are the station host's own, so the operator reaches the
        server as a label (``cell-a:alice``) and the id stays here; without
        one, station and console share the database and the id is a user's."""
        if self.runner.state != RunnerState.awaiting_log:
            raise episodes.WrongState(
                f"station is {self.runner.state.value}: no episode is awaiting its log"
            )
        entry = episode_record.OperatorLog.parse(data)
        if self.uplink is None:
            work, uid, outcome = self.runner.submit_log(entry, operator_id=operator_id)
        else:
            label = (
                None
                if operator_name is None
                else episode_record.operator_label(self.config.name, operator_name)
            )
            work, uid, outcome = self.runner.submit_log(entry, operator_label=label)
        self._report(work, uid, outcome)
        return self.status()

    def close_with_ground_truth(self) -> dict[str, Any]:
        """DEMO / TEST ONLY: close with the labelled ground-truth log (proctor.station.demo_log)."""
        from proctor.station.demo_log import close_with_ground_truth

        work, uid, outcome = self.runner.close_with(
            lambda s, u: close_with_ground_truth(s, store=self.store, uid=u)
        )
        self._report(work, uid, outcome)
        return self.status()

    def _report(self, work: Work, uid: str, outcome: Outcome) -> None:
        try:
            self.source.completed(work, episode_uid=uid, outcome=outcome)
        except Exception:
            log.error("the work source failed to record episode %s", uid, exc_info=True)
            self.notice = Notice("error", "the scheduler did not accept the result; see the log")

    # -- what the console sees ---------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        out = self.runner.status()
        out["cameras"] = {
            name: {
                "width": c.config.width,
                "height": c.config.height,
                "fps": c.config.fps,
                "health": self.runner.hub.health(name),
            }
            for name, c in self.cell.cameras.items()
        }
        if self.notice is not None:
            out["notice"] = {"level": self.notice.level, "message": self.notice.message}
        last = self.runner.last
        if last is not None:
            out["last_episode"] = {
                "episode": last.uid,
                "run_code": last.run_code,
                "proposed_outcome": last.proposed.value,
                "reason": last.reason,
                "duration_s": round(last.duration_s, 3),
                "telemetry_rate_hz": round(last.telemetry_rate_hz, 2),
                "frames": last.frames,
                "dropped_frames": last.dropped_frames,
            }
        if self.uplink is not None:
            out["uplink"] = self.uplink.status()
        out["version"] = self._version
        return out

    def _check_camera(self, camera: str) -> None:
        if camera not in self.cell.cameras:
            raise FieldError("camera", f"'{camera}' is not one of {', '.join(self.cell.cameras)}")

    def _jpeg(self, image: Any, quality: int | None = None) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(image).save(
            buf, format="JPEG", quality=quality or self.config.api.preview_jpeg_quality
        )
        return buf.getvalue()

    def preview_jpeg(self, camera: str, quality: int | None = None) -> bytes:
        self._check_camera(camera)
        frame = self.runner.hub.latest(camera)
        if frame is None:
            raise NoWork(f"camera {camera}: no frame yet")
        return self._jpeg(frame.image, quality)

    def reference_jpeg(self, camera: str) -> bytes:
        """The current run's initial scene as rendered when it was armed."""
        self._check_camera(camera)
        ref, active = self._reference, self.runner.active
        if ref is None or active is None or ref[0] != active.uid:
            raise NoWork(
                "reference photo: none for the current run (only a simulated cell renders one)"
            )
        return ref[1][camera]


# what the console says when a station with no work source is asked for a run
NO_SOURCE = (
    "this station has no work source (started without --server and --campaign, and its "
    "config names no [work]), so it claims no runs. To run a campaign's episodes: on the "
    "server, `proctor station enrol NAME --profile PROFILE` (it prints a token); on this "
    "host, PROCTOR_STATION_TOKEN=<token> proctor station run --server https://SERVER "
    "--campaign CAMPAIGN (proctor/station/README.md)"
)


def _empty_source() -> WorkSource:
    class _Nothing:
        nothing_reason = NO_SOURCE

        def claim(self) -> Work | None:
            return None

        def completed(self, work: Work, *, episode_uid: str, outcome: Outcome) -> None:
            pass

        def abandoned(self, work: Work, *, reason: str) -> None:
            pass

    return _Nothing()
