"""Hand-made telemetry for the detector's unit tests and the review tests.

``telemetry_table`` writes a table in the recorder's own schema
(``proctor.station.recorder.telemetry_schema``) from a list of scripted gripper
operations, so the annotator reads it exactly as it reads a recording. The
fingers move at a fixed rate towards the target, stop on a held item at its
hold position, and the item leaves them once they opened 0.03 below it (the
detector's default ``release_open``): the expected event times are computed
from these rules, by hand, not by the detector. This is an idealised gripper
read without delay; ``polled=True`` reports it the way the 2F-85's status
poll does (every 20 ms, 4 ms late, in 1/255 steps), as the simulated cell's
driver does (``proctor.station.sim.gripper``), whose physics differs again (squeeze,
a release margin drawn per grasp).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind, EpisodeState, LabelStatus, Outcome, Side
from proctor.core.recording import keys
from proctor.station.recorder import ACTION_KINDS, PHASES, telemetry_schema
from tests import factories

HZ = 100.0
RATE = 1.75  # finger travel per second (0 open … 1 closed)
SOURCE_XY = (0.50, -0.23)  # tote side "left": the source bin is on the right
TARGET_XY = (0.50, 0.23)
CARRY_Z = 0.15


@dataclass(frozen=True)
class Op:
    """One scripted close → (hold) → open of the fingers."""

    t_close: float  # the target goes to 1
    t_open: float  # the target goes back to 0
    held: bool = True  # False: the fingers close on nothing (a missed grasp)
    slip_at: float | None = None  # the item slips out at this time (target still 1)
    grasp_xy: tuple[float, float] = SOURCE_XY
    release_xy: tuple[float, float] = TARGET_XY
    hold_position: float = 0.80


def simulate_fingers(
    ops: list[Op], t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[str, float]]]:
    """Target, finger position and object flag per sample, and the true events
    ("release" / "slip", time). Rules as on the simulated 2F-85: the fingers
    travel ``RATE`` per second towards the target, stop at the item's hold
    position, and the item leaves them once they open 0.03 below it."""
    target = np.zeros(len(t))
    position = np.zeros(len(t))
    held = np.zeros(len(t), dtype=bool)
    events: list[tuple[str, float]] = []
    step = RATE / HZ
    pos = 0.0
    in_hand = False
    slipped: set[int] = set()
    for k, tk in enumerate(t):
        i_op, op = next(
            ((i, o) for i, o in enumerate(ops) if o.t_close <= tk < o.t_open + 1.0), (None, None)
        )
        tgt = 1.0 if op is not None and tk < op.t_open else 0.0
        goal = tgt
        if in_hand and op is not None and tgt >= op.hold_position:
            goal = op.hold_position
        new = pos + max(-step, min(step, goal - pos))
        grasping = op is not None and not in_hand and op.held and i_op not in slipped
        if grasping and tgt == 1.0 and pos < op.hold_position <= new:  # type: ignore[union-attr]
            in_hand, new = True, op.hold_position  # type: ignore[union-attr]
        if in_hand and op is not None and new < op.hold_position - 0.03:
            in_hand = False
            events.append(("release", round(float(tk), 4)))
        pos = new
        if in_hand and op is not None and op.slip_at is not None and tk >= op.slip_at:
            in_hand = False
            slipped.add(i_op)
            events.append(("slip", round(float(tk), 4)))
        target[k], position[k], held[k] = tgt, pos, in_hand
    return target, position, held, events


def true_events(ops: list[Op], duration: float) -> list[tuple[str, float]]:
    n = round(duration * HZ) + 1
    return simulate_fingers(ops, np.arange(n) / HZ)[3]


def tool_path(ops: list[Op], t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.full(len(t), SOURCE_XY[0])
    y = np.full(len(t), SOURCE_XY[1])
    z = np.full(len(t), 0.02)
    for op in ops:
        carry = (t >= op.t_close + 0.5) & (t < op.t_open - 0.3)
        frac = np.clip(
            (t - (op.t_close + 0.5)) / max(op.t_open - 0.3 - op.t_close - 0.5, 1e-6), 0, 1
        )
        x[carry] = op.grasp_xy[0] + (op.release_xy[0] - op.grasp_xy[0]) * frac[carry]
        y[carry] = op.grasp_xy[1] + (op.release_xy[1] - op.grasp_xy[1]) * frac[carry]
        z[carry] = CARRY_Z
        at_release = (t >= op.t_open - 0.3) & (t < op.t_open + 0.8)
        x[at_release], y[at_release], z[at_release] = op.release_xy[0], op.release_xy[1], 0.11
        grasping = (t >= op.t_close) & (t < op.t_close + 0.5)
        x[grasping], y[grasping], z[grasping] = op.grasp_xy[0], op.grasp_xy[1], 0.02
    return x, y, z


POLL_S = 0.02
POLL_LATENCY_S = 0.004


def polled(t: np.ndarray, values: np.ndarray, quantise: bool) -> np.ndarray:
    """What a 50 Hz status poll reports at each sample: the value at the last
    poll whose reply has arrived (``POLL_LATENCY_S`` after it), in 1/255 steps."""
    polls = np.arange(0.0, t[-1] + POLL_S, POLL_S)
    i = np.searchsorted(polls + POLL_LATENCY_S, t + 1e-9, side="right") - 1
    sampled = np.interp(polls, t, values.astype(float))[np.maximum(i, 0)]
    return np.round(sampled * 255) / 255 if quantise else sampled


def telemetry_table(
    ops: list[Op], duration: float, t0: float = 100.0, *, polled_status: bool = False
) -> pa.Table:
    """A telemetry table in the recorder's schema; ``t`` on the station clock from
    ``t0``; ``polled_status``: position and object flag as a 50 Hz poll reports them."""
    n = round(duration * HZ) + 1
    t = np.arange(n) / HZ
    target, position, held, _events = simulate_fingers(ops, t)
    if polled_status:
        position = polled(t, position, quantise=True)
        held = polled(t, held, quantise=False) > 0.5
    x, y, z = tool_path(ops, t)
    floats = {c: np.full(n, np.nan) for c in keys.TELEMETRY_FLOAT_COLUMNS}
    floats[keys.EE_X], floats[keys.EE_Y], floats[keys.EE_Z] = x, y, z
    floats[keys.EE_POSE[6]] = np.ones(n)
    floats[keys.GRIPPER_TARGET] = target
    floats[keys.GRIPPER_TARGET_REQUESTED] = target
    floats[keys.GRIPPER_POSITION] = position
    floats[keys.EE_SPEED] = np.zeros(n)
    schema = telemetry_schema()
    columns = [
        pa.array(t0 + t),
        pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, dtype=np.int8)), pa.array([p.value for p in PHASES])
        ),
        pa.DictionaryArray.from_arrays(
            pa.array(np.full(n, 3, dtype=np.int8)), pa.array(ACTION_KINDS)
        ),
        pa.array(np.arange(n, dtype=np.int32) // 7),
        *[pa.array(floats[c]) for c in keys.TELEMETRY_FLOAT_COLUMNS],
        pa.array(held),
        pa.array(np.arange(n, dtype=np.int32) // 50),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def store_episode(
    session: ProctorSession,
    store: ArtifactStore,
    *,
    ops: list[Op],
    duration: float,
    items: int,
    placed: int,
    lost: int = 0,
    dropped: int = 0,
    outcome: Outcome = Outcome.success,
    state: EpisodeState = EpisodeState.closed,
    telemetry: bool = True,
    object_name: str | None = None,
    **kw: object,
) -> Episode:
    """A closed, logged episode (tote side left) with its telemetry stored."""
    obj = factories.object_type(session, object_name)
    t0 = 100.0
    logged = state == EpisodeState.closed
    ep = factories.episode(
        session,
        obj,
        items=items,
        state=state,
        clock_start_s=t0,
        clock_end_s=t0 + duration,
        placed=placed if logged else None,
        lost=lost if logged else None,
        dropped=dropped if logged else None,
        outcome=outcome if logged else None,
        label_status=LabelStatus.pending,
        **kw,
    )
    ep.tote_side = Side.left
    if telemetry:
        stored = store.put_bytes(parquet_bytes(telemetry_table(ops, duration, t0)))
        session.add(
            Artifact(
                episode_id=ep.id,
                kind=ArtifactKind.telemetry,
                uri=stored.uri,
                sha256=stored.sha256,
                size_bytes=stored.size_bytes,
                media_type="application/vnd.apache.parquet",
            )
        )
    session.flush()
    return ep
