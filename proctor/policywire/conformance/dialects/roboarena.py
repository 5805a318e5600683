"""RoboArena's conformance checks: openpi's, with its reset in the middle of a
session, and bare-array replies allowed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from proctor.policywire.conformance.dialects import register
from proctor.policywire.conformance.dialects.openpi import OpenpiChecks

if TYPE_CHECKING:
    from proctor.policywire.conformance.state import CheckState


@register
class RoboarenaChecks(OpenpiChecks):
    name = "roboarena"
    reset_name = "RoboArena reset"
    map_replies_only = False  # RoboArena servers may reply with the bare array

    def check_reset(self, check: CheckState, first: list[np.ndarray]) -> None:
        """A reset in the middle of a session answers as a fresh connection does."""
        check.progress("resetting in the middle of a session")
        warm = max(1, len(first) // 2)
        after = check.episode(" (after a reset)", warmup=warm)
        if after is not None:
            check.judge_repeat(
                first,
                after,
                how=f"after {warm} requests and a reset as after a fresh connection",
                check="reset",
            )
