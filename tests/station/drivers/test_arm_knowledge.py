"""What only an arm's driver knows lives with that driver: the station's
pre-flight and the control loop's fault attribution ask the arm
(``Arm.preflight_checks``, ``Arm.fault_flag_causes``) and import nothing of
the franky driver's libfranka knowledge, so a second arm driver touches
neither."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from proctor.core.clock import VirtualClock
from proctor.station.control.attribution import Cause, Origin, attribute_fault, attribute_state
from proctor.station.drivers.arm.base import (
    Arm,
    ArmCommand,
    ArmConfig,
    ArmErrorKind,
    ArmFault,
    ArmState,
)
from proctor.station.drivers.arm.franky import FrankyArm, FrankyArmConfig
from proctor.station.drivers.arm.franky_faults import FLAG_CAUSES
from proctor.station.preflight import PreflightSettings
from proctor.station.sim.arm import SimArm
from proctor.station.sim.world import SimWorld

ROOT = Path(__file__).resolve().parents[3]
# the station's own modules that must stay arm-neutral
NEUTRAL = ("proctor/station/preflight.py", "proctor/station/control/attribution.py")
# libfranka's knowledge: the franky driver and its modules, and libfranka's flag names
FRANKY = "proctor.station.drivers.arm.franky"
FLAGS = "proctor.station.drivers.arm.flags"


def _forbidden(name: str) -> bool:
    return name == FLAGS or name.startswith(FLAGS + ".") or name.startswith(FRANKY)


def franky_imports(source: str) -> list[str]:
    """Each import in ``source`` (a module of ``proctor.station``) of the franky
    driver's modules or of libfranka's flags, with its line; a module named
    in a string counts too (``importlib.import_module``, a registry's map)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            # relative: from .drivers.arm import franky, from ..drivers.arm.flags import …
            rel = (node.module or "").replace(".", "/")
            names = [f"{rel}/{alias.name}" for alias in node.names] + [rel]
            names = [
                "proctor.station." + n.strip("/").replace("/", ".") for n in names if "drivers" in n
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        found += [f"{getattr(node, 'lineno', '?')}: {n}" for n in names if _forbidden(n)]
    return found


def test_preflight_and_attribution_import_nothing_of_the_franky_driver() -> None:
    found = {path: franky_imports((ROOT / path).read_text()) for path in NEUTRAL}
    assert found == {path: [] for path in NEUTRAL}


def test_the_check_finds_a_planted_import() -> None:
    planted = [
        "from proctor.station.drivers.arm.flags import LIBFRANKA_ERROR_FLAGS",
        "from proctor.station.drivers.arm import flags",
        "from proctor.station.drivers.arm.franky_faults import FLAG_CAUSES",
        "import proctor.station.drivers.arm.franky_checks",
        "from proctor.station.drivers.arm import franky",
        "ARM = importlib.import_module('proctor.station.drivers.arm.franky')",
    ]
    for line in planted:
        assert franky_imports(f"import importlib\n{line}\n"), line
    source = (ROOT / NEUTRAL[0]).read_text()
    assert franky_imports(source + "\n" + planted[0] + "\n")
    # the arm's base and its neutral vocabulary stay allowed
    assert not franky_imports(
        "from proctor.station.drivers.arm.base import Arm\n"
        "from proctor.station.drivers.arm.faults import Cause\n"
    )


@dataclass(frozen=True)
class ToyConfig(ArmConfig):
    driver: ClassVar[str] = "toy"


class ToyArm(Arm[ToyConfig]):
    """A second arm driver that says nothing of flags or pre-flight."""

    def __init__(self) -> None:
        self.config = ToyConfig()

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    @property
    def is_connected(self) -> bool:
        return True

    def read_state(self) -> ArmState:
        zeros = np.zeros(7)
        return ArmState(0.0, zeros, zeros, np.array([0, 0, 0, 0, 0, 0, 1.0]))

    def send(self, command: ArmCommand) -> ArmCommand:
        return command

    def stop(self) -> None: ...

    @property
    def halted(self) -> bool:
        return False

    def resume(self) -> None: ...

    def recover(self) -> None: ...

    def home(self) -> None: ...


def test_an_arm_without_flags_gets_its_faults_by_kind_alone() -> None:
    toy = ToyArm()
    # libfranka's collision flag means nothing to this arm: no flag decides
    fault = ArmFault("stopped", ArmErrorKind.reflex, ("cartesian_reflex",))
    a = attribute_fault(fault, toy)
    assert (a.cause, a.deciding_flag) == (Cause.unknown, None)
    assert attribute_fault(ArmFault("link", ArmErrorKind.communication), toy).cause == (
        Cause.station
    )
    state = ArmState(
        0.0,
        np.zeros(7),
        np.zeros(7),
        np.array([0, 0, 0, 0, 0, 0, 1.0]),
        error="stopped",
        error_kind=ArmErrorKind.reflex,
        error_flags=("communication_constraints_violation",),
    )
    a = attribute_state(state, toy)
    assert (a.cause, a.deciding_flag, a.follows_policy_motion) == (Cause.unknown, None, False)
    assert attribute_state(state, toy, Origin.station).cause == Cause.station


def test_an_arm_without_checks_gets_no_libfranka_checks() -> None:
    toy = ToyArm()
    assert list(toy.preflight_checks(VirtualClock(), PreflightSettings())) == []
    assert list(toy.fault_flag_causes()) == []


def test_the_franky_driver_and_the_simulated_cell_hand_libfrankas_table() -> None:
    franky = FrankyArm(FrankyArmConfig(host="192.0.2.1"))
    assert franky.fault_flag_causes() is FLAG_CAUSES
    sim = SimArm(SimWorld(VirtualClock()))
    assert sim.fault_flag_causes() is FLAG_CAUSES
    assert list(sim.preflight_checks(VirtualClock(), PreflightSettings())) == []
    # the same collision the toy arm could not read is the policy's here
    fault = ArmFault("stopped", ArmErrorKind.reflex, ("cartesian_reflex",))
    assert attribute_fault(fault, franky).cause == Cause.policy
    # the franky driver's checks are libfranka's five, in pre-flight's order;
    # unconnected, each says it cannot ask the controller (at unit start the
    # test motion is a warning that it is never run there)
    results = list(franky.preflight_checks(VirtualClock(), PreflightSettings(), daemon_start=True))
    assert [r.name for r in results] == [
        "robot mode",
        "fci/brakes",
        "end effector",
        "load",
        "test motion",
    ]
    assert all("arm not connected" in r.detail for r in results[:4])
