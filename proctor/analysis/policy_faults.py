"""Faults a policy caused that are not scored as its failures (hardware
review #4; docs/methods.md §2).

A ``system`` ending is excluded from every score: the station's doing. Some
of them followed the policy's own doing all the same — a malformed reply
(``policy_protocol``), its checkpoint's server failing by the submitter's
fault (``policy_server``), an arm fault the station is blamed for after the
policy's own motion, such as a joint driven into its limit
(``policy_motion``). The scheduler requeues the first few per policy and
charges the rest (they then count as safety stops). Either way, how often a
policy did it is part of its record: a policy that voids its losing
episodes shows here, whatever the allowance let through.

Pure: episodes in, a frozen result out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from proctor.analysis.behaviour import wilson
from proctor.analysis.episodes import Episode
from proctor.analysis.results import PolicyFaults


def policy_faults(episodes: Iterable[Episode]) -> PolicyFaults:
    """Over every episode one policy ran, scored or ``system``: how many ended
    in a fault of its own doing, by class, and the share with its Wilson 95 %
    interval."""
    run = list(episodes)
    classes = Counter(e.policy_fault for e in run if e.policy_fault is not None)
    faults = sum(classes.values())
    return PolicyFaults(
        episodes=len(run),
        faults=faults,
        by_class=tuple(sorted(classes.items())),
        share=wilson(faults, len(run)),
    )
