"""Chunk playback: the action chunk being played and the commands it sent."""

from __future__ import annotations

import numpy as np

from proctor.policywire.client import Reply
from proctor.policywire.wire import units
from proctor.policywire.wire.spec import ActionSpace
from proctor.station.cell import Cell
from proctor.station.control.commands import StepCommands, arm_kind, to_commands
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind
from proctor.station.envelope import Envelope


class ChunkPlayer:
    """Plays a policy's action chunk open-loop, one row per action step, for
    at most ``open_loop_steps`` rows; then the chunk is exhausted and the
    policy is asked again. Every arm command passes the episode's envelope
    first (``proctor.station.envelope``). Keeps the command in force (as requested and
    as the arm accepted it, and what the envelope changed) for telemetry."""

    def __init__(
        self,
        cell: Cell,
        *,
        space: ActionSpace | None,
        open_loop_steps: int,
        control_hz: float,
        real_time: bool,
        grip: tuple[float, float] = (1.0, 0.5),
        envelope: Envelope,
        action_units: units.ActionUnits | None = None,
    ) -> None:
        self.arm, self.gripper = cell.arm, cell.gripper
        # what a velocity row means (the server's ``action_units``; SI by default)
        self.units = action_units if action_units is not None else units.get("si")
        self.grip_speed, self.grip_force = grip  # the object's, from the station config
        self.envelope = envelope
        self.open_loop_steps = open_loop_steps
        self.control_hz = control_hz
        self.real_time = real_time
        # a velocity command must not outlive its chunk: the kind of the zero that halts it
        # (DROID's units make velocity rows position targets: nothing to halt)
        kind = arm_kind(space, self.units) if space is not None else None
        velocity = kind in (ArmCommandKind.joint_velocity, ArmCommandKind.cartesian_velocity)
        self.halt_kind: ArmCommandKind | None = kind if velocity else None
        self.chunk: np.ndarray | None = None
        self.space = space  # the space the chunk's rows are in
        self.row = 0  # the next row to play
        self.span = 0  # rows of the chunk played open-loop: [start row, span)
        self.step = -1  # the action step in force, counted over the episode
        self.current: StepCommands | None = None  # that step, as the policy asked
        self.sent_arm: ArmCommand | None = None  # and as the arm accepted it
        self.envelope_mask = 0  # what the envelope changed in it (keys.EnvelopeReason bits)
        self.halted = False  # a zero velocity was sent and nothing since

    @property
    def playing(self) -> bool:
        return self.chunk is not None

    @property
    def exhausted(self) -> bool:
        return self.chunk is None or self.row >= self.span

    @property
    def rows_left(self) -> int:
        return self.span - self.row

    def drop(self) -> None:
        self.chunk = None

    def load(self, reply: Reply, t: float, asked_at: float) -> None:
        """Play ``reply``'s chunk from action step ``t``; the call went out at ``asked_at``."""
        self.chunk, self.space = reply.actions, reply.space
        self.row = self.start_row(reply, t - asked_at)
        self.span = min(self.row + self.open_loop_steps, len(reply.actions))

    def start_row(self, reply: Reply, since_call_s: float) -> int:
        # a chunk timed from its call (Positronic's): on a real-time clock the
        # rows already past are skipped, as its chunk player does
        return reply.first_row(since_call_s, self.control_hz) if self.real_time else 0

    def play_next(self) -> None:
        """Send the next row to the arm, through the envelope, and the gripper
        (raises their faults, and ``EnvelopeStop``)."""
        assert self.chunk is not None and self.space is not None
        # the MEASURED state, read just now: DROID's units add their delta to it,
        # and the envelope holds the command against it
        state = self.arm.read_state()
        self.current = to_commands(
            self.chunk[self.row],
            self.space,
            grip_speed=self.grip_speed,
            grip_force=self.grip_force,
            action_units=self.units,
            state=state,
            control_hz=self.control_hz,
        )
        self.row += 1
        self.step += 1
        guarded = self.envelope.guard(self.current.arm, state)
        self.envelope_mask = guarded.mask
        self.sent_arm = self.arm.send(guarded.command)
        self.gripper.send(self.current.gripper)
        self.halted = False

    def halt(self) -> None:
        """Send a zero velocity if a velocity command is in force: the arm waits at rest."""
        if self.halt_kind is not None and self.sent_arm is not None and not self.halted:
            self.sent_arm = self.arm.send(
                ArmCommand(self.halt_kind, np.zeros(len(self.sent_arm.target)))
            )
            self.halted = True
