"""DEMO / TEST HELPER — NOT A PERSON.

The demo's automatic reviewer: reviews a queued episode of the *simulated*
cell by comparing the detector's candidates with the cell's ground truth,
through exactly the service functions a person's clicks call
(``proctor.annotator.review``). Every record it writes carries ``AUTOMATIC_REVIEWER``
as its reviewer label (no user id), so it can never pass for a person's
review, and it refuses episodes without ground truth (real recordings).

Decisions: candidates that match a true placement (closest first, within
``tolerance_s``) are confirmed, or moved to the true time when they are off
by more than ``exact_s``; true placements no candidate matches are added;
success candidates that match nothing are rejected. When the ground truth
disagrees with the operator's count, the count is flagged instead; the
demo's automatic admin (``resolve_flag_with_ground_truth``) then corrects
the log to the ground truth's counts, and the episode is reviewed again.
"""

from __future__ import annotations

from datetime import datetime

from proctor.annotator.review import (
    CountCorrection,
    Reviewer,
    ReviewState,
    flag_count,
    resolve_flag,
    review_state,
)
from proctor.annotator.review import add as add_placement
from proctor.annotator.review import confirm as confirm_candidate
from proctor.annotator.review import move as move_candidate
from proctor.annotator.review import reject as reject_candidate
from proctor.annotator.scoring import match_times
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import LabelStatus
from proctor.core.errors import UsageError
from proctor.core.recording.reader import load_ground_truth

AUTOMATIC_REVIEWER = "automatic reviewer (demo): decisions from the simulator's ground truth"


def review_with_ground_truth(
    session: ProctorSession,
    *,
    store: ArtifactStore,
    uid: str,
    label: str = AUTOMATIC_REVIEWER,
    tolerance_s: float = 1.0,
    exact_s: float = 0.02,
    now: datetime | None = None,
) -> ReviewState:
    """Review one ``needs_review`` episode from its ground truth (flushed, not committed)."""
    reviewer = Reviewer(label=label)
    state = review_state(session, uid=uid)
    if state.label_status != LabelStatus.needs_review:
        raise UsageError(
            f"episode {uid}: not waiting for review (label status {state.label_status.value})"
        )
    truth = load_ground_truth(session, store, uid)
    if truth is None:
        raise UsageError(f"episode {uid}: no ground truth (not a simulated episode)")
    true_s = [float(t) for t in truth["placements_s"]]
    if len(true_s) != state.placed:
        return flag_count(
            session,
            uid=uid,
            reviewer=reviewer,
            note=f"the simulator's ground truth has {len(true_s)} placement(s), "
            f"the log says {state.placed}",
            now=now,
        )
    # start from a clean slate: what a person already confirmed is checked too
    confirmed_pairs = match_times(true_s, [p.t_s for p in state.confirmed], exact_s)
    kept = {j for _, j in confirmed_pairs}
    for j, p in enumerate(state.confirmed):
        if j not in kept:
            state = reject_candidate(
                session, uid=uid, reviewer=reviewer, placement_id=p.id, now=now
            )
    done_true = {i for i, _ in confirmed_pairs}
    remaining_true = [t for i, t in enumerate(true_s) if i not in done_true]
    open_candidates = [c for c in state.candidates if c.state == "open"]
    pairs = match_times(remaining_true, [c.t_s for c in open_candidates], tolerance_s)
    matched_c = {j for _, j in pairs}
    for j, c in enumerate(open_candidates):
        if j not in matched_c and c.verdict == "success":
            state = reject_candidate(
                session, uid=uid, reviewer=reviewer, candidate_id=c.id, now=now
            )
    matched_t = set()
    for i, j in pairs:
        c = open_candidates[j]
        t = remaining_true[i]
        matched_t.add(i)
        if abs(c.t_s - t) <= exact_s:
            state = confirm_candidate(
                session, uid=uid, reviewer=reviewer, candidate_id=c.id, now=now
            )
        else:
            state = move_candidate(
                session, uid=uid, reviewer=reviewer, candidate_id=c.id, t_s=t, now=now
            )
    for i, t in enumerate(remaining_true):
        if i not in matched_t:
            state = add_placement(session, uid=uid, reviewer=reviewer, t_s=t, now=now)
    return state


AUTOMATIC_ADMIN = "automatic admin (demo): counts corrected from the simulator's ground truth"


def resolve_flag_with_ground_truth(
    session: ProctorSession,
    *,
    store: ArtifactStore,
    uid: str,
    label: str = AUTOMATIC_ADMIN,
    now: datetime | None = None,
) -> ReviewState:
    """Resolve a flagged count from the ground truth: the log is corrected to
    the simulator's final counts (the outcome stays), or stands if they agree."""
    truth = load_ground_truth(session, store, uid)
    if truth is None:
        raise UsageError(f"episode {uid}: no ground truth (not a simulated episode)")
    state = review_state(session, uid=uid)
    final = truth["final"]
    counts = (int(final["placed"]), int(final["lost"]), int(final["dropped"]))
    admin = Reviewer(label=label, admin=True)
    if counts == (state.placed, state.lost, state.dropped):
        return resolve_flag(
            session, uid=uid, reviewer=admin, note="the ground truth agrees with the log", now=now
        )
    return resolve_flag(
        session,
        uid=uid,
        reviewer=admin,
        note="log corrected to the simulator's ground truth",
        correction=CountCorrection(*counts),
        now=now,
    )
