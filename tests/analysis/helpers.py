"""Shared builders for the analysis tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proctor.analysis.episodes import EpisodeTable
from proctor.analysis.interchange import read_interchange
from proctor.analysis.operations import Operations, extract_operations


def survival_csv(
    path: Path, arms: dict[str, tuple[Sequence[float], Sequence[int]]], obj: str = "o"
) -> Path:
    """Textbook single-event survival data in the interchange format (docs/methods.md
    §8): items = 1; an event at t is a placement at t with duration t and
    outcome success; a censoring at t has no placement, duration t and
    outcome ran_out_of_time."""
    lines = ["episode_id,policy,object,items,duration_s,placements_s,lost,dropped,outcome"]
    for policy, (times, status) in arms.items():
        for k, (t, d) in enumerate(zip(times, status, strict=True)):
            if d:
                lines.append(f"{policy}-{k},{policy},{obj},1,{t},{t},0,0,success")
            else:
                lines.append(f"{policy}-{k},{policy},{obj},1,{t},,0,0,ran_out_of_time")
    path.write_text("\n".join(lines) + "\n")
    return path


def arm_operations(table: EpisodeTable, policy: str, obj: str | None = None) -> Operations:
    return extract_operations(
        [e for e in table.episodes if e.policy == policy and (obj is None or e.object == obj)]
    )


def load(path: Path) -> EpisodeTable:
    return read_interchange(path)
