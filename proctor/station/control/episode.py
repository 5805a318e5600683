"""One episode's two records: the plan fixed when it is armed, and the log
that accumulates while it runs.

The runner builds an ``EpisodePlan`` when it arms a run and an ``EpisodeLog``
beside it; the control loop and the finishing are handed both. Splitting
them says which is which: nothing in the plan changes once the episode is
armed (it is frozen), and everything the loop and the finishing write goes
into the log."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from proctor.core.work import Work
from proctor.policywire.client import PolicyClient, PolicyWorker
from proctor.policywire.observation import ImageResizer
from proctor.station.control.call_log import CallLog
from proctor.station.control.sampling import TelemetryTicks
from proctor.station.envelope import Envelope
from proctor.station.logs import EpisodeFaultLines


@dataclass(frozen=True)
class EpisodePlan:
    """What is decided before the episode starts: the work, its episode, the
    policy it runs (client and worker) and what the policy is sent."""

    work: Work
    uid: str
    episode_id: int
    client: PolicyClient
    worker: PolicyWorker
    prompt: str
    resizer: ImageResizer = field(default_factory=lambda: ImageResizer(None))
    cameras: frozenset[str] = frozenset()  # the cameras the policy is sent


@dataclass
class EpisodeLog:
    """What accumulates while the episode runs, for its manifest, events and summary."""

    t0: float = math.nan  # the cell's clock at the start, once it started
    latencies: list[float] = field(default_factory=list)
    end_details: dict[str, Any] = field(default_factory=dict)
    # station time of the next query, when known: frames taken shortly before it are
    # resized for the policy on the camera's thread as they arrive
    next_query_t: float = math.inf
    ticks: TelemetryTicks = field(default_factory=lambda: TelemetryTicks(0.0))
    fault: str | None = None  # the class of a system ending, when it is known
    # an arm fault's attribution to its cause (proctor.station.control.attribution),
    # for the manifest
    arm_fault: dict[str, Any] | None = None
    # what the station logged while it ran (proctor.station.logs), for the manifest
    fault_lines: EpisodeFaultLines | None = None
    envelope: Envelope | None = None  # the episode's envelope, once the control loop runs
    call_log: CallLog | None = None  # its policy calls, once the control loop runs
