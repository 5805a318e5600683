"""The Robotiq 2F-85 register map (Modbus RTU), defined once.

Pure encoding and decoding, no I/O: both the driver and the simulated gripper
use it, so the two cannot disagree silently — the tests pin the byte layout
against the request/response frames printed in the Robotiq manual.

Layout (Robotiq 2F-85/2F-140 instruction manual, section 4 "Control"):

* Output (robot → gripper), 3 holding registers from 1000 (0x03E8), written
  with FC16; each register carries two bytes, high byte first:
  ``1000 = [ACTION REQUEST | reserved]``, ``1001 = [reserved | rPR]``,
  ``1002 = [rSP | rFR]``. ACTION REQUEST bits: rACT (0), rGTO (3), rATR (4),
  rARD (5).
* Input (gripper → robot), 3 input registers from 2000 (0x07D0), read with
  FC04: ``2000 = [GRIPPER STATUS | reserved]``, ``2001 = [FAULT STATUS | gPR]``,
  ``2002 = [gPO | gCU]``. GRIPPER STATUS bits: gACT (0), gGTO (3),
  gSTA (4–5), gOBJ (6–7). FAULT STATUS: gFLT in the low nibble, the optional
  controller's kFLT in the high nibble. gCU × 10 = motor current in mA.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

DEVICE_ID = 9  # factory default slave id of every Robotiq gripper
BAUDRATE = 115200  # the 2F-85's fixed RS-485 setting: 115200 8N1

REG_COMMAND = 0x03E8  # 1000: first output register (FC16)
REG_STATUS = 0x07D0  # 2000: first input register (FC04)
N_REGISTERS = 3

# ACTION REQUEST byte (high byte of register 1000)
BIT_RACT = 1 << 0  # activate (a rising edge resets a major fault)
BIT_RGTO = 1 << 3  # go to the requested position
BIT_RATR = 1 << 4  # automatic release (emergency release, ignores rPR)
BIT_RARD = 1 << 5  # auto-release direction: 0 closing, 1 opening

# GRIPPER STATUS byte (high byte of register 2000)
BIT_GACT = 1 << 0
BIT_GGTO = 1 << 3
SHIFT_GSTA = 4
SHIFT_GOBJ = 6

CURRENT_MA_PER_COUNT = 10  # gCU: "current ≈ 10 × value mA" (manual)
POSITION_MAX = 255  # rPR/gPO/rSP/rFR are bytes: 0 = open/slow/weak, 255 = closed/fast/strong


class GSta(IntEnum):
    """Gripper status (gSTA)."""

    reset = 0  # in reset (or automatic release); see gFLT if activated
    activating = 1
    unused = 2  # not used by the 2F-85
    ready = 3  # activation completed


class GObj(IntEnum):
    """Object detection status (gOBJ); valid only while gGTO = 1."""

    moving = 0  # fingers in motion towards the requested position
    contact_opening = 1  # stopped by an object while opening
    contact_closing = 2  # stopped by an object while closing
    at_position = 3  # at the requested position: no object (or lost it)


class GFlt(IntEnum):
    """Fault status (gFLT), Robotiq manual §4.7.4."""

    none = 0x00
    action_delayed = 0x05  # priority: (re)activation must complete before the action
    activation_bit_not_set = 0x07  # priority: rACT must be set before an action
    over_temperature = 0x08  # minor: ≥ 85 °C internally, let it cool below 80 °C
    no_communication = 0x09  # minor: no communication for at least 1 s
    under_voltage = 0x0A  # major from here on: a reset (rising edge on rACT) is needed
    automatic_release_in_progress = 0x0B
    internal_fault = 0x0C
    activation_fault = 0x0D
    overcurrent = 0x0E
    automatic_release_completed = 0x0F


FAULT_TEXT = {
    GFlt.action_delayed: "action delayed: the activation must be completed first",
    GFlt.activation_bit_not_set: "the activation bit must be set before an action",
    GFlt.over_temperature: "maximum operating temperature exceeded (>= 85 C); let it cool",
    GFlt.no_communication: "no communication during at least 1 second",
    GFlt.under_voltage: "under minimum operating voltage",
    GFlt.automatic_release_in_progress: "automatic release in progress",
    GFlt.internal_fault: "internal fault",
    GFlt.activation_fault: "activation fault: check for interference",
    GFlt.overcurrent: "overcurrent triggered",
    GFlt.automatic_release_completed: "automatic release completed",
}

# faults that only clear with a reset (rising edge on rACT), manual §4.7.4
MAJOR_FAULTS = frozenset(f for f in GFlt if f >= GFlt.under_voltage)


def fault_text(code: int) -> str | None:
    """Human text for a gFLT code; ``None`` for no fault."""
    if code == GFlt.none:
        return None
    try:
        flt = GFlt(code)
    except ValueError:
        return f"gFLT 0x{code:02X}: unknown fault code"
    return f"gFLT 0x{code:02X}: {FAULT_TEXT[flt]}"


def _byte(name: str, value: int) -> int:
    if not 0 <= value <= 0xFF:
        raise ValueError(f"{name} must be a byte (0..255), got {value}")
    return value


@dataclass(frozen=True)
class CommandRegisters:
    """Registers 1000–1002 as the robot writes them."""

    action: int = 0  # ACTION REQUEST bits
    position: int = 0  # rPR
    speed: int = 0  # rSP
    force: int = 0  # rFR

    def encode(self) -> list[int]:
        return [
            _byte("action", self.action) << 8,
            _byte("rPR", self.position),
            (_byte("rSP", self.speed) << 8) | _byte("rFR", self.force),
        ]

    @classmethod
    def decode(cls, regs: list[int]) -> CommandRegisters:
        if len(regs) != N_REGISTERS:
            raise ValueError(f"expected {N_REGISTERS} command registers, got {len(regs)}")
        return cls(
            action=(regs[0] >> 8) & 0xFF,
            position=regs[1] & 0xFF,
            speed=(regs[2] >> 8) & 0xFF,
            force=regs[2] & 0xFF,
        )

    @property
    def ract(self) -> bool:
        return bool(self.action & BIT_RACT)

    @property
    def rgto(self) -> bool:
        return bool(self.action & BIT_RGTO)

    @property
    def ratr(self) -> bool:
        return bool(self.action & BIT_RATR)


RESET = CommandRegisters()  # all zero: clears rACT (and a major fault, with the next activation)
ACTIVATE = CommandRegisters(action=BIT_RACT)


def move(position: int, speed: int, force: int) -> CommandRegisters:
    return CommandRegisters(action=BIT_RACT | BIT_RGTO, position=position, speed=speed, force=force)


@dataclass(frozen=True)
class StatusRegisters:
    """Registers 2000–2002 as the gripper reports them."""

    gact: bool = False
    ggto: bool = False
    gsta: GSta = GSta.reset
    gobj: GObj = GObj.moving
    gflt: int = GFlt.none  # an int: a device may report codes this map does not know
    kflt: int = 0
    gpr: int = 0  # echo of the requested position
    gpo: int = 0  # measured position
    gcu: int = 0  # current / 10 mA

    def encode(self) -> list[int]:
        status = (
            (BIT_GACT if self.gact else 0)
            | (BIT_GGTO if self.ggto else 0)
            | (int(self.gsta) << SHIFT_GSTA)
            | (int(self.gobj) << SHIFT_GOBJ)
        )
        fault = ((self.kflt & 0x0F) << 4) | (int(self.gflt) & 0x0F)
        return [
            status << 8,
            (fault << 8) | _byte("gPR", self.gpr),
            (_byte("gPO", self.gpo) << 8) | _byte("gCU", self.gcu),
        ]

    @classmethod
    def decode(cls, regs: list[int]) -> StatusRegisters:
        if len(regs) != N_REGISTERS:
            raise ValueError(f"expected {N_REGISTERS} status registers, got {len(regs)}")
        status = (regs[0] >> 8) & 0xFF
        fault = (regs[1] >> 8) & 0xFF
        return cls(
            gact=bool(status & BIT_GACT),
            ggto=bool(status & BIT_GGTO),
            gsta=GSta((status >> SHIFT_GSTA) & 0x03),
            gobj=GObj((status >> SHIFT_GOBJ) & 0x03),
            gflt=fault & 0x0F,
            kflt=(fault >> 4) & 0x0F,
            gpr=regs[1] & 0xFF,
            gpo=(regs[2] >> 8) & 0xFF,
            gcu=regs[2] & 0xFF,
        )

    @property
    def ready(self) -> bool:
        return self.gact and self.gsta == GSta.ready

    @property
    def object_detected(self) -> bool:
        return self.ggto and self.gobj in (GObj.contact_opening, GObj.contact_closing)

    @property
    def current_ma(self) -> float:
        return float(self.gcu * CURRENT_MA_PER_COUNT)

    @property
    def fault(self) -> str | None:
        return fault_text(self.gflt)
