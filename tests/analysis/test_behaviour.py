"""The behavioural breakdown (proctor.analysis.behaviour, docs/methods.md
§13) against a hand count: shares per (object, mode) with the episode as the
unit, and how many of each object's episodes were reviewed."""

from __future__ import annotations

import numpy as np
import pytest

from proctor.analysis.behaviour import behaviour_breakdown


def test_cells_count_episodes_tags_and_reviewed_episodes() -> None:
    # object 0: episodes 0, 1, 2; object 1: episodes 3, 4
    # tags: mode 0 twice on episode 0 and once on 1; mode 1 on episode 3
    # reviewed: episodes 0 and 4
    cells = behaviour_breakdown(
        ["cups", "forks"],
        ["missed_grasp", "stall"],
        np.array([0, 0, 0, 1, 1]),
        np.array([0, 0, 1, 3]),
        np.array([0, 0, 0, 1]),
        np.array([True, False, False, False, True]),
    )
    got = {(c.object, c.mode): (c.episodes_with, c.episodes, c.tags, c.reviewed) for c in cells}
    assert got == {
        ("cups", "missed_grasp"): (2, 3, 3, 1),
        ("cups", "stall"): (0, 3, 0, 1),
        ("forks", "missed_grasp"): (0, 2, 0, 1),
        ("forks", "stall"): (1, 2, 1, 1),
    }
    cell = next(c for c in cells if (c.object, c.mode) == ("cups", "missed_grasp"))
    assert cell.share.estimate == pytest.approx(2 / 3)


def test_one_reviewed_flag_per_episode() -> None:
    with pytest.raises(ValueError, match="one flag per episode"):
        behaviour_breakdown(["o"], ["m"], np.array([0, 0]), np.array([]), np.array([]), [True])
