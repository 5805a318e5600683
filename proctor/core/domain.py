"""The domain's vocabulary as enums, shared by every service.

States are enums, never bare strings (docs/style.md). The database stores the
``value`` of each member as text with a CHECK constraint, so adding a member
is a migration that widens the constraint, not a rewrite of the table.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How an episode ended (docs/methods.md §1)."""

    success = "success"  # all items handled
    ran_out_of_time = "ran_out_of_time"
    operator_stop = "operator_stop"
    safety = "safety"  # safety stop: the triggering operation is a ghost
    system = "system"  # infrastructure fault, not the policy's doing: excluded from scores


class EpisodeState(StrEnum):
    """The episode runner's state machine (``proctor/station/episode_runner.py``), persisted
    so a restarted daemon can find a partial episode."""

    armed = "armed"
    running = "running"
    finishing = "finishing"
    awaiting_log = "awaiting_log"
    closed = "closed"
    interrupted = "interrupted"  # the daemon died mid-episode; found on restart


class LabelStatus(StrEnum):
    """Where an episode's placement timestamps stand."""

    pending = "pending"  # not yet annotated
    auto = "auto"  # detector count matched the operator's count
    needs_review = "needs_review"
    reviewed = "reviewed"
    flagged = "flagged"  # reviewer says the operator's count is wrong: admin decides


class Side(StrEnum):
    left = "left"
    right = "right"


class Role(StrEnum):
    admin = "admin"
    operator = "operator"
    reviewer = "reviewer"
    submitter = "submitter"


class PolicyKind(StrEnum):
    policy = "policy"
    reference = "reference"  # the same-fixture human teleoperation


class Visibility(StrEnum):
    private = "private"
    public = "public"


class SubmissionKind(StrEnum):
    checkpoint = "checkpoint"
    endpoint = "endpoint"  # a submitter's server: reached only through the gateway
    # the human reference's teleoperation, served on each station host's own
    # loopback (``proctor station teleop``): the station connects to it itself;
    # the server (gateway, conformance worker) never does. Admins register it.
    teleop = "teleop"


class EndpointDialect(StrEnum):
    """Wire dialects a policy server may speak (station policy client)."""

    openpi = "openpi"
    roboarena = "roboarena"
    positronic_v1 = "positronic_v1"


class ActionUnitsName(StrEnum):
    """What the numbers of a velocity action mean: the conventions an endpoint
    may select (``proctor.policywire.wire.units`` registers one per name)."""

    si = "si"
    droid = "droid"


class ConformanceStatus(StrEnum):
    pending = "pending"
    passed = "passed"
    failed = "failed"


class RunnerStatus(StrEnum):
    """A runner server: one sandboxed server of one checkpoint submission on a
    runner host (``proctor/runner``), from the request to its end."""

    queued = "queued"  # wanted (a check or a running campaign needs it), no host yet
    building = "building"  # a host claimed it: unpacking, building its environment
    starting = "starting"  # the sandboxed server is starting; not yet answering
    ready = "ready"  # answering on ``url``: the gateway and the checker may connect
    stopped = "stopped"  # stopped when nothing needed it (idle), or by an admin
    failed = "failed"  # ended by a failure; ``failure`` says which, and whose fault


class RunnerFault(StrEnum):
    """Whose fault a runner failure is: a platform fault never counts against a policy."""

    submitter = "submitter"
    platform = "platform"


class RunnerFailure(StrEnum):
    """Why a runner server ended, a closed set (``proctor/runner/failures.py``)."""

    # the submitter's
    setup_crash = "setup_crash"  # the environment did not build, or the server exited before ready
    inference_crash = "inference_crash"  # the server exited (or broke the wire) once ready
    out_of_memory = "out_of_memory"  # the sandbox's memory limit was reached
    latency_exceeded = "latency_exceeded"  # a call took longer than the latency budget
    wall_clock_exceeded = "wall_clock_exceeded"  # not ready in time, or served past its lifetime
    sandbox_refused = "sandbox_refused"  # a limit the sandbox enforces: processes, CPU, files
    # the platform's
    runner_unresponsive = "runner_unresponsive"  # the runner host stopped reporting
    host_error = "host_error"  # the runner host itself failed (sandbox, disk, a bug)

    @property
    def fault(self) -> RunnerFault:
        platform = {RunnerFailure.runner_unresponsive, RunnerFailure.host_error}
        return RunnerFault.platform if self in platform else RunnerFault.submitter


class ConformanceRunStatus(StrEnum):
    """One conformance check of a submission, from the queue to its report."""

    queued = "queued"  # waiting for a worker
    running = "running"  # a worker claimed it
    done = "done"  # the report is written (passed or failed)
    error = "error"  # the checker itself failed; the submission keeps its status


class CampaignStatus(StrEnum):
    draft = "draft"
    running = "running"
    closed = "closed"  # no more episodes; seed revealed
    released = "released"  # identities public on the leaderboard


class AssignmentStatus(StrEnum):
    pending = "pending"
    claimed = "claimed"  # a station took it
    done = "done"  # an episode counted against it
    skipped = "skipped"  # pre-flight failed; rescheduled later
    requeued = "requeued"  # a `system` episode: a fresh assignment replaces it


class ArtifactKind(StrEnum):
    video = "video"
    frame_index = "frame_index"  # per-frame timestamp table of a video
    telemetry = "telemetry"
    rrd = "rrd"
    manifest = "manifest"
    checkpoint = "checkpoint"
    ground_truth = "ground_truth"  # simulated cell's true placement times
    photo = "photo"  # reference photo of an initial scene


class CandidateVerdict(StrEnum):
    success = "success"
    failure = "failure"  # drop or loss
    neutral = "neutral"  # e.g. regrasp inside the source bin
    unknown = "unknown"


class PlacementSource(StrEnum):
    detector = "detector"
    reviewer = "reviewer"
    ground_truth = "ground_truth"  # simulated cell only; used to score the annotator


class PlacementStatus(StrEnum):
    proposed = "proposed"  # detector output awaiting reconciliation
    accepted = "accepted"  # detector count matched the operator: label stream "auto"
    confirmed = "confirmed"  # a reviewer confirmed or placed it
    rejected = "rejected"
    superseded = "superseded"  # a later review record replaced it


class ReviewActionKind(StrEnum):
    confirm = "confirm"
    move = "move"
    reject = "reject"
    add = "add"
    flag_count = "flag_count"  # operator's count looks wrong: goes to an admin
    resolve_flag = "resolve_flag"
    correct_log = "correct_log"  # an admin's correction of the operator log
    tag_failure = "tag_failure"  # a behavioural failure mode at a moment of the episode
    retract_tag = "retract_tag"  # a failure-mode tag withdrawn (the tag's row stays)


class LabelStream(StrEnum):
    """Which placement times the analysis reads (docs/methods.md §9)."""

    auto_and_reviewed = "auto_and_reviewed"
    reviewed_only = "reviewed_only"
    detector_only = "detector_only"


class StationUploadState(StrEnum):
    """An artifact upload from a station host (``proctor.scheduler.station_uploads``)."""

    open = "open"  # parts may still arrive
    complete = "complete"  # verified and registered as an artifact
    aborted = "aborted"  # refused at completion (size or sha256) or given up


class StationProfile(StrEnum):
    """The kind of cell a station runs. ``proctor.station.profiles`` registers
    one module per name; the server checks an enrolment against these names
    without importing the station."""

    sim = "sim"
    twin = "twin"
    real = "real"
