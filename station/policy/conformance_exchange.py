"""The checks made through the station's own client: the recorded
observations sent in the server's dialect, the replies' keys, dtypes,
shapes and values, the chunk length, latency, determinism on a fresh
connection and after a RoboArena reset."""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from proctor.domain import EndpointDialect
from station import keys
from station.drivers.arm.base import ArmConfig
from station.policy import codec
from station.policy.client import (
    PolicyDisconnected,
    PolicyError,
    PolicyProtocolError,
    PolicyTimeout,
)
from station.policy.conformance_base import (
    ATOL,
    COLUMNS,
    RTOL,
    CheckState,
    RecordingClient,
    Status,
    excerpt,
    last_line,
    percentiles,
    shape_text,
)
from station.policy.conformance_observations import observations_for
from station.policy.spec import ActionSpace


def _span(values: list[int]) -> str:
    return f"{values[0]}–{values[-1]}" if len(values) > 1 else str(values[0])


def _str_tagged_arrays(obj: Any) -> bool:
    """Whether numpy arrays were tagged with text keys (openpi writes bin keys)."""
    if isinstance(obj, dict):
        if "__ndarray__" in obj or "__npgeneric__" in obj:
            return True
        return any(_str_tagged_arrays(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_str_tagged_arrays(v) for v in obj)
    return False


class ExchangeChecks(CheckState):
    # 2. the exchange, through the station's client
    def episode(self, context: str = "", *, warmup: int = 0) -> list[np.ndarray] | None:
        """One connection: reset (RoboArena), then every observation; the
        action chunks, or None when the exchange failed (a finding says why).
        With ``warmup``, that many observations are sent first, then a second
        reset, then all of them."""
        self.context = context
        self._replies = []
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
                self._replies = []
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
        if client.info is None or client.info.dialect != EndpointDialect.roboarena:
            return True
        try:
            client.reset(self.options.request_timeout_s)
        except PolicyTimeout:
            self.add(
                "reset",
                "Reset",
                Status.failed,
                f"Your server did not acknowledge the RoboArena reset within "
                f"{self.options.request_timeout_s:g} s. The station resets every episode; "
                "answer it (any message does).",
            )
            return False
        except PolicyError as exc:
            self.add(
                "reset",
                "Reset",
                Status.failed,
                f"The RoboArena reset failed: {exc}.",
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
            server_error = self._positronic_error(raw) if self.positronic else None
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

    @staticmethod
    def _positronic_error(raw: Any) -> str | None:
        """The text of a Positronic ``{"error": …}`` reply, if that is what ``raw`` is."""
        if not isinstance(raw, bytes | bytearray):
            return None
        try:
            reply = codec.unpackb(raw)
        except codec.CodecError:
            return None
        return str(reply["error"]) if isinstance(reply, dict) and "error" in reply else None

    def _explain_reply(self, raw: Any, station_says: str, n: str) -> str:
        """Advice for a reply the station's client refused."""
        if self.positronic:
            return (
                f"The station cannot run your reply to observation {n}: "
                f"{station_says.removeprefix('malformed policy reply: ')}. A reply is "
                "{'result': [action, …]}, each action a map of 'robot_command' (cartesian_pos "
                "or joint_pos), 'target_grip' and 'timestamp' (s after the call)."
            )
        space = self.info.action_space if self.info else None
        try:
            decoded = codec.unpackb(raw) if isinstance(raw, bytes | bytearray) else None
        except codec.CodecError as exc:
            return (
                f"Your reply to observation {n} is not msgpack-numpy ({exc}). Pack replies "
                "with openpi_client.msgpack_numpy.packb."
            )
        actions = decoded.get("actions") if isinstance(decoded, dict) else decoded
        if isinstance(decoded, dict) and "actions" not in decoded:
            got = ", ".join(sorted(str(k) for k in decoded)) or "none"
            return (
                f"Your reply to observation {n} has no 'actions' key (it has: {got}). Reply "
                "with {'actions': array of shape (H, D)}."
            )
        if isinstance(actions, np.ndarray) and space is not None:
            if actions.dtype.kind not in "fiu":
                return (
                    f"Your server returned actions of dtype {actions.dtype}; send numbers "
                    "(float32 or float64)."
                )
            if actions.ndim not in (1, 2) or actions.shape[-1] != space.width:
                return (
                    f"Your server returned actions of shape {shape_text(actions)}; the "
                    f"{space.value} action space needs {space.width} columns "
                    f"({COLUMNS[space]}), so a chunk of shape (H, {space.width})."
                )
            if not np.all(np.isfinite(actions.astype(np.float64))):
                return f"Your reply to observation {n} contains NaN or infinite actions."
        return f"The station's client refused your reply to observation {n}: {station_says}."

    def _inspect_raw(self, raw: Any, n: str) -> None:
        """Notes on a reply the station accepted, kept for the summary findings."""
        if not isinstance(raw, bytes | bytearray):
            return
        try:
            plain = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception:
            return
        reply = codec.unpackb(raw)
        if self.positronic:
            result = reply.get("result") if isinstance(reply, dict) else None
            actions = [result] if isinstance(result, dict) else result or []
            self._replies.append(
                {
                    "n": n,
                    "waypoints": len(actions),
                    "stamped": all(
                        isinstance(a, dict) and keys.POSITRONIC_TIMESTAMP in a for a in actions
                    ),
                    "str_keys": _str_tagged_arrays(plain),
                }
            )
            return
        actions = reply.get("actions") if isinstance(reply, dict) else reply
        self._replies.append(
            {
                "n": n,
                "bare": not isinstance(reply, dict),
                "str_keys": _str_tagged_arrays(plain),
                "dtype": str(actions.dtype) if isinstance(actions, np.ndarray) else None,
                "ndim": int(actions.ndim) if isinstance(actions, np.ndarray) else None,
            }
        )

    # 3. what the replies showed
    def judge_replies(self, chunks: list[np.ndarray]) -> None:
        if self.positronic:
            self._judge_positronic(chunks)
            return
        space = self.info.action_space if self.info else None
        replies = self._replies
        shapes = sorted({c.shape for c in chunks})
        shapes_seen = ", ".join(shape_text(np.empty(s)) for s in shapes)
        notes: list[str] = []
        status = Status.passed
        openpi = self.info is not None and self.info.dialect == EndpointDialect.openpi
        if openpi and any(r["bare"] for r in replies):
            status = Status.warning
            notes.append(
                "your replies are bare arrays; openpi clients expect a map "
                "{'actions': …} (RoboArena servers may reply with the array)"
            )
        if any(r["ndim"] == 1 for r in replies):
            status = Status.warning
            notes.append(
                "some replies are a single action (1-D): the station runs it as a chunk of 1"
            )
        if any(r["str_keys"] for r in replies):
            status = Status.warning
            notes.append(
                "your numpy arrays are tagged with text keys ('__ndarray__' as a str); openpi's "
                "msgpack_numpy writes and reads them as binary keys, so openpi clients "
                "would not decode your arrays (the station reads both)"
            )
        self.add(
            "replies",
            "Replies",
            status,
            f"All {len(chunks)} replies were msgpack-numpy with actions of shape {shapes_seen}"
            + ("; but " + "; ".join(notes) + "." if notes else "."),
            shapes=[list(s) for s in shapes],
        )
        dtypes = sorted({r["dtype"] for r in replies if r["dtype"]})
        odd = [d for d in dtypes if d not in ("float32", "float64")]
        if odd:
            self.add(
                "dtype",
                "Action dtype",
                Status.warning,
                f"Your actions arrive as {', '.join(odd)}; the station converts them to "
                "float64, but float32 or float64 is what it expects (float16 loses "
                "millimetres at arm's length; integers are probably a bug).",
                dtypes=dtypes,
            )
        else:
            self.add(
                "dtype",
                "Action dtype",
                Status.passed,
                f"Actions arrive as {', '.join(dtypes)}.",
                dtypes=dtypes,
            )
        self._chunk_length(chunks)
        if space is not None:
            self._values(chunks, space)

    def _judge_positronic(self, chunks: list[np.ndarray]) -> None:
        replies = self._replies
        space = self.reply_space
        waypoints = sorted({r["waypoints"] for r in replies})
        steps = sorted({len(c) for c in chunks})
        notes: list[str] = []
        status = Status.passed
        if not all(r["stamped"] for r in replies):
            status = Status.warning
            fps = self.info.action_fps if self.info else None
            notes.append(
                "some actions carry no 'timestamp', so the station spaces them "
                + (f"at your meta's action_fps ({fps:g} Hz)" if fps else "one per control step")
            )
        if any(r["str_keys"] for r in replies):
            status = Status.warning
            notes.append(
                "your numpy arrays are tagged with text keys ('__ndarray__' as a str); "
                "Positronic's serialiser writes binary keys (the station reads both)"
            )
        self.add(
            "replies",
            "Replies",
            status,
            f"All {len(chunks)} replies were Positronic results of {_span(waypoints)} "
            f"waypoints, run as {_span(steps)} steps at {self.options.control_hz:g} Hz"
            + ("; but " + "; ".join(notes) + "." if notes else "."),
            waypoints=waypoints,
            steps=steps,
        )
        if space is None:  # every reply was refused, and said so
            return
        declared = self.expect.action_space
        title = "Action space"
        if declared is not None and declared != space:
            self.add(
                "action_space",
                title,
                Status.failed,
                f"You declared {declared.value}, but your commands are "
                f"{'cartesian_pos' if space == ActionSpace.cartesian_position else 'joint_pos'}, "
                f"which the station runs as {space.value}. Make them agree.",
                declared=declared.value,
                server=space.value,
            )
        else:
            self.add(
                "action_space",
                title,
                Status.passed,
                f"Your commands run as {space.value} ({COLUMNS[space]})"
                + (", as declared." if declared is not None else "."),
            )
        self._chunk_length(chunks, lengths=waypoints, unit="waypoints")
        self._values(chunks, space)

    def _chunk_length(
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

    def _values(self, chunks: list[np.ndarray], space: ActionSpace) -> None:
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
            limits = ArmConfig()
            lo, hi = np.array(limits.q_min), np.array(limits.q_max)
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
