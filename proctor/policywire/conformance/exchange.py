"""The checks made through the station's own client: the recorded
observations sent in the server's dialect, the replies' keys, dtypes,
shapes and values, the chunk length, latency, determinism on a fresh
connection and after a RoboArena reset."""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from proctor.policywire.client import (
    PolicyDisconnected,
    PolicyError,
    PolicyProtocolError,
    PolicyTimeout,
)
from proctor.policywire.conformance import dialects as dialect_checks
from proctor.policywire.conformance.observations import observations_for
from proctor.policywire.conformance.state import (
    ATOL,
    RTOL,
    CheckState,
    RecordingClient,
    Status,
    excerpt,
    last_line,
    percentiles,
)
from proctor.policywire.handshake import dialect_of
from proctor.policywire.wire import codec
from proctor.policywire.wire.spec import ActionSpace

# The FR3's joint limits (Franka's datasheet, rad) that joint-position replies
# are held against. The protocol layer does not read the station's driver
# config, so tests/policywire/test_policy_protocol.py holds these equal to its
# defaults (``ArmConfig.q_min``/``q_max``).
FR3_Q_MIN = (-2.74, -1.78, -2.90, -3.04, -2.81, 0.54, -3.02)
FR3_Q_MAX = (2.74, 1.78, 2.90, -0.15, 2.81, 4.52, 3.02)


def span_text(values: list[int]) -> str:
    return f"{values[0]}–{values[-1]}" if len(values) > 1 else str(values[0])


def str_tagged_arrays(obj: Any) -> bool:
    """Whether numpy arrays were tagged with text keys (openpi writes bin keys)."""
    if isinstance(obj, dict):
        if "__ndarray__" in obj or "__npgeneric__" in obj:
            return True
        return any(str_tagged_arrays(v) for v in obj.values())
    if isinstance(obj, list):
        return any(str_tagged_arrays(v) for v in obj)
    return False


class ExchangeChecks(CheckState):
    # 2. the exchange, through the station's client
    def episode(self, context: str = "", *, warmup: int = 0) -> list[np.ndarray] | None:
        """One connection: reset (RoboArena), then every observation; the
        action chunks, or None when the exchange failed (a finding says why).
        With ``warmup``, that many observations are sent first, then a second
        reset, then all of them."""
        self.context = context
        self.replies = []
        client = self.client()
        try:
            try:
                info = client.connect()
            except PolicyError as exc:
                self.add(
                    "station_client",
                    "Station client",
                    Status.failed,
                    f"The station's client could not start a session{context}: {exc}.",
                )
                return None
            observations = observations_for(info, self.options)
            if not self._reset(client):
                return None
            if warmup:
                for i, obs in enumerate(observations[:warmup]):
                    if self._infer(client, obs, i) is None:
                        return None
                if not self._reset(client):
                    return None
                self.replies = []
            chunks: list[np.ndarray] = []
            for i, obs in enumerate(observations):
                reply = self._infer(client, obs, i)
                if reply is None:
                    return None
                chunks.append(reply)
            self.reply_space = client.action_space
            return chunks
        finally:
            client.close()

    def _reset(self, client: RecordingClient) -> bool:
        reset = (
            dialect_checks.get(dialect_of(client.info).name).reset_name
            if client.info is not None
            else None
        )
        if reset is None:  # the dialect has no reset message
            return True
        try:
            client.reset(self.options.request_timeout_s)
        except PolicyTimeout:
            self.add(
                "reset",
                "Reset",
                Status.failed,
                f"Your server did not acknowledge the {reset} within "
                f"{self.options.request_timeout_s:g} s. The station resets every episode; "
                "answer it (any message does).",
            )
            return False
        except PolicyError as exc:
            self.add(
                "reset",
                "Reset",
                Status.failed,
                f"The {reset} failed: {exc}.",
            )
            return False
        return True

    def _infer(self, client: RecordingClient, obs: dict[str, Any], i: int) -> np.ndarray | None:
        n = f"{i + 1}{self.context}"
        try:
            reply = client.infer(obs, self.options.request_timeout_s)
        except PolicyTimeout:
            self.add(
                "latency",
                "Latency",
                Status.failed,
                f"Your server did not answer observation {n} within "
                f"{self.options.request_timeout_s:g} s, the station's limit. On the station "
                "the episode would end as a system failure.",
                observation=n,
            )
            return None
        except PolicyDisconnected as exc:
            how = (
                f"with close code {exc.close_code}"
                if exc.close_code is not None
                else "without a close frame (as if the process crashed)"
            )
            self.add(
                "replies",
                "Replies",
                Status.failed,
                f"Your server dropped the connection at observation {n}, {how}. The station "
                "would end the episode as a system failure.",
                observation=n,
            )
            return None
        except PolicyProtocolError as exc:
            raw = client.last_raw
            server_error = dialect_checks.of(self).reply_error_text(raw)
            if server_error is not None:
                self.add(
                    "replies",
                    "Replies",
                    Status.failed,
                    f"Your server answered observation {n} with {{'error': …}} instead of a "
                    "result. Its text is below; the station would end the episode as a system "
                    "failure (and never shows the text to the operator).",
                    observation=n,
                    server_error=excerpt(server_error),
                )
            elif isinstance(raw, str):
                self.add(
                    "replies",
                    "Replies",
                    Status.failed,
                    f"Your server answered observation {n} with an error instead of actions"
                    + (f": {last_line(raw)}" if last_line(raw) else ".")
                    + " Its text is below; the station would end the episode as a system "
                    "failure (and never shows the text to the operator).",
                    observation=n,
                    server_error=excerpt(raw),
                )
            else:
                self.add(
                    "replies",
                    "Replies",
                    Status.failed,
                    self._explain_reply(raw, str(exc), n),
                    observation=n,
                )
            return None
        self.latencies.append(reply.latency_s)
        self._inspect_raw(client.last_raw, n)
        return reply.actions

    def _explain_reply(self, raw: Any, station_says: str, n: str) -> str:
        """Advice for a reply the station's client refused."""
        return dialect_checks.of(self).explain_reply(self, raw, station_says, n)

    def _inspect_raw(self, raw: Any, n: str) -> None:
        """Notes on a reply the station accepted, kept for the summary findings."""
        if not isinstance(raw, bytes | bytearray):
            return
        try:
            plain = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception:
            return
        self.replies.append(
            {
                "n": n,
                **dialect_checks.of(self).reply_notes(codec.unpackb(raw), str_tagged_arrays(plain)),
            }
        )

    # 3. what the replies showed
    def judge_replies(self, chunks: list[np.ndarray]) -> None:
        dialect_checks.of(self).judge_replies(self, chunks)

    def judge_chunk_length(
        self, chunks: list[np.ndarray], *, lengths: list[int] | None = None, unit: str = "actions"
    ) -> None:
        lengths = lengths or sorted({len(c) for c in chunks})
        declared = self.expect.chunk_length
        steps = self.options.open_loop_steps
        use = (
            f" The station runs the first {steps} actions of each chunk at "
            f"{self.options.control_hz:g} Hz, then asks again."
            if max(len(c) for c in chunks) > steps
            else f" The station runs each whole chunk at {self.options.control_hz:g} Hz, "
            "then asks again."
        )
        title = "Chunk length"
        if declared is not None and lengths != [declared]:
            wrong = [n for n in lengths if n != declared]
            self.add(
                "chunk_length",
                title,
                Status.failed,
                f"You declared chunks of {declared} {unit}, but your server returned "
                f"{', '.join(str(n) for n in wrong)}.",
                declared=declared,
                returned=lengths,
            )
        elif len(lengths) > 1:
            self.add(
                "chunk_length",
                title,
                Status.warning,
                f"Your chunk length varies between replies ({lengths[0]}–{lengths[-1]}). "
                "That works, but declare it if it is meant to be fixed." + use,
                returned=lengths,
            )
        else:
            self.add(
                "chunk_length",
                title,
                Status.passed,
                f"Every reply held {lengths[0]} {unit}"
                + (", as declared." if declared is not None else ".")
                + use,
                returned=lengths,
            )

    def judge_values(self, chunks: list[np.ndarray], space: ActionSpace) -> None:
        rows = np.concatenate(chunks, axis=0)
        grip = rows[:, -1]
        notes = []
        if grip.min() < -1e-6 or grip.max() > 1 + 1e-6:
            notes.append(
                f"the gripper column (last) ranges {grip.min():.3g}…{grip.max():.3g}; it is "
                "a target in [0, 1] (0 open, 1 closed) and is clipped to that range"
            )
        arm = rows[:, :-1]
        if space == ActionSpace.joint_position:
            lo, hi = np.array(FR3_Q_MIN), np.array(FR3_Q_MAX)
            out = np.flatnonzero(((arm < lo - 1e-3) | (arm > hi + 1e-3)).any(axis=0))
            if len(out):
                notes.append(
                    "joint targets outside the FR3's limits on joint(s) "
                    + ", ".join(str(int(j) + 1) for j in out)
                    + " (radians expected)"
                )
        elif space == ActionSpace.cartesian_position:
            reach = np.linalg.norm(arm[:, :3], axis=1)
            if reach.max() > 1.3:
                notes.append(
                    f"end-effector targets up to {reach.max():.2f} m from the robot's base; "
                    "the FR3 reaches about 0.85 m (metres expected)"
                )
            if np.abs(arm[:, 3:6]).max() > 2 * math.pi + 1e-3:
                notes.append("orientation angles beyond ±2π (radians expected)")
        elif space == ActionSpace.joint_velocity:
            if np.abs(arm).max() > 2.62:
                notes.append(
                    f"joint velocities up to {np.abs(arm).max():.2f} rad/s; the FR3's limit is "
                    "about 2.6 rad/s"
                )
        else:
            lin = np.linalg.norm(arm[:, :3], axis=1).max()
            if lin > 2.0:
                notes.append(f"linear velocities up to {lin:.2f} m/s (m/s expected)")
        if notes:
            self.add(
                "action_values",
                "Action values",
                Status.warning,
                f"Your actions look implausible for {space.value}: " + "; ".join(notes) + ".",
            )
        else:
            self.add(
                "action_values",
                "Action values",
                Status.passed,
                f"Your actions are within plausible ranges for {space.value}.",
            )

    def judge_latency(self) -> None:
        pct = percentiles(self.latencies)
        if pct is None:
            return
        limit = self.options.request_timeout_s
        if pct["p90"] > 1000.0 * self.options.slow_reply_s:
            self.add(
                "latency",
                "Latency",
                Status.warning,
                f"Your server answers in {pct['p50']:.0f} ms (median), {pct['p90']:.0f} ms "
                f"(90th percentile). The arm waits while the policy thinks, so episodes will "
                f"be slow; the station gives up after {limit:g} s.",
                **pct,
            )
        else:
            self.add(
                "latency",
                "Latency",
                Status.passed,
                f"Your server answers in {pct['p50']:.1f} ms (median), {pct['p90']:.1f} ms "
                f"(90th percentile), {pct['max']:.1f} ms at most; the station's limit is "
                f"{limit:g} s.",
                **pct,
            )

    def judge_repeat(
        self, first: list[np.ndarray], again: list[np.ndarray], *, how: str, check: str
    ) -> None:
        """Compare two runs over the same observations (a fresh connection, or
        after a reset)."""
        title = {"determinism": "Determinism", "reset": "Reset"}[check]
        n = min(len(first), len(again))
        worst, where = 0.0, None
        for i in range(n):
            a, b = first[i], again[i]
            if a.shape != b.shape:
                worst, where = math.inf, (i + 1, None)
                break
            diff = np.abs(a - b) - (ATOL + RTOL * np.abs(a))
            if diff.max() > 0:
                d = float(np.abs(a - b).max())
                if d > worst:
                    col = int(np.unravel_index(np.argmax(np.abs(a - b)), a.shape)[1]) + 1
                    worst, where = d, (i + 1, col)
        same = where is None
        diff_text = (
            "a different chunk shape"
            if worst == math.inf
            else f"differences up to {worst:.3g} (first at reply {where[0]}, column {where[1]})"
            if where
            else ""
        )
        if self.expect.deterministic:
            if same:
                self.add(
                    check,
                    title,
                    Status.passed,
                    f"The same observations gave the same actions {how}, as declared.",
                )
            else:
                self.add(
                    check,
                    title,
                    Status.failed,
                    f"You declared your policy deterministic, but the same observations gave "
                    f"different actions {how}: {diff_text}. Seed its randomness per episode "
                    "(or at connection/reset), or do not declare it deterministic.",
                    max_difference=None if worst == math.inf else worst,
                )
        else:
            self.add(
                check,
                title,
                Status.skipped,
                f"Not declared deterministic, so not required. For the record: {how} the same "
                "observations gave "
                + ("the same actions." if same else f"different actions ({diff_text})."),
                max_difference=None if worst == math.inf else worst,
            )
