"""libfranka's pre-flight checks: what only the franky driver knows how to
ask of its controller, through its ``controller_report`` in libfranka's terms
(robot modes, FCI, end effector, load, ``control_command_success_rate``).
``FrankyArm.preflight_checks`` runs them for ``proctor station check``
(``proctor.station.preflight``), after the arm's and the versions' lines.

No hardware library is imported here: the checks read the driver's report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from proctor.core.clock import Clock
from proctor.station.drivers.arm.base import (
    Arm,
    ArmCommand,
    ArmCommandKind,
    ArmFault,
    ask_controller,
)
from proctor.station.drivers.checks import CheckResult, CheckStatus, PreflightMotionSettings


def libfranka_checks(
    arm: Arm[Any], clock: Clock, settings: PreflightMotionSettings, *, daemon_start: bool = False
) -> Iterator[CheckResult]:
    """The five, in order, each as soon as it is done."""
    yield check_robot_mode(arm, daemon_start=daemon_start)
    yield check_fci_and_brakes(arm)
    yield check_end_effector(arm)
    yield check_load(arm)
    yield check_test_motion(arm, clock, settings, daemon_start=daemon_start)


# libfranka's RobotMode names, and what the operator must do about each
ROBOT_MODE_ADVICE = {
    "UserStopped": "the user stop / enabling device is engaged: release it",
    "Reflex": "the arm is in Reflex: recover it (console Recover, or Desk)",
    "Guiding": "the arm is in guiding mode: let go of the pilot buttons",
    "Move": "a motion is running: another client controls the arm",
    "AutomaticErrorRecovery": "the controller is recovering from an error: wait",
    "Other": "the controller is not ready for FCI (brakes locked or FCI not activated in Desk)",
}


# modes the daemon itself leads the operator out of (its console's Recover, or
# releasing the user stop and then Recover): at unit start they are warnings,
# since failing would restart-loop the unit with the console out of reach
# (hardware review #3)
RECOVERABLE_AT_START = frozenset({"Reflex", "UserStopped"})


def check_robot_mode(arm: Arm[Any], *, daemon_start: bool = False) -> CheckResult:
    report, failed = ask_controller(arm, "robot mode")
    if report is None:
        return failed or CheckResult("robot mode", CheckStatus.failed, "no report")
    if report.mode != "Idle":
        advice = ROBOT_MODE_ADVICE.get(report.mode, "not idle")
        if daemon_start and report.mode in RECOVERABLE_AT_START:
            return CheckResult(
                "robot mode",
                CheckStatus.warning,
                f"{report.mode}: {advice}; the station starts needing recovery and arms "
                "no run until then",
            )
        return CheckResult("robot mode", CheckStatus.failed, f"{report.mode}: {advice}")
    return CheckResult("robot mode", CheckStatus.passed, "Idle")


def check_fci_and_brakes(arm: Arm[Any]) -> CheckResult:
    """What franky exposes of FCI and brakes. libfranka connects only
    through an active FCI, so a connected arm proves it; libfranka's robot
    state carries no brake status (``robot_state.h``), franky has it only
    through Desk's web API (``franky.Desk.brake_state``, which needs Desk
    credentials and is not queried here). Locked brakes show up as a robot
    mode other than Idle and as a failed test motion."""
    report, failed = ask_controller(arm, "fci/brakes")
    if report is None:
        return failed or CheckResult("fci/brakes", CheckStatus.failed, "no report")
    return CheckResult(
        "fci/brakes",
        CheckStatus.passed,
        "FCI active (libfranka is connected); brakes: no status through FCI, "
        "the test motion proves them open",
    )


def check_end_effector(arm: Arm[Any]) -> CheckResult:
    """The robot's own F_T_EE against the commissioned TCP."""
    report, failed = ask_controller(arm, "end effector")
    if report is None:
        return failed or CheckResult("end effector", CheckStatus.failed, "no report")
    if not report.tcp_configured:
        return CheckResult(
            "end effector", CheckStatus.warning, "no commissioned TCP to check against"
        )
    if report.tcp_problem is not None:
        return CheckResult("end effector", CheckStatus.failed, report.tcp_problem)
    return CheckResult("end effector", CheckStatus.passed, "F_T_EE as commissioned")


def check_load(arm: Arm[Any]) -> CheckResult:
    """The robot's own m_total and F_x_Ctotal against the commissioned payload."""
    report, failed = ask_controller(arm, "load")
    if report is None:
        return failed or CheckResult("load", CheckStatus.failed, "no report")
    if not report.payload_configured:
        return CheckResult("load", CheckStatus.warning, "no commissioned payload to check against")
    if report.payload_problem is not None:
        return CheckResult("load", CheckStatus.failed, report.payload_problem)
    return CheckResult("load", CheckStatus.passed, "mass and centre of mass as commissioned")


# the test motion has arrived within this (the controller's impedance leaves
# a few mrad, see FrankyArmConfig.home_tolerance_rad)
TEST_MOTION_TOLERANCE_RAD = 0.01


def check_test_motion(
    arm: Arm[Any], clock: Clock, settings: PreflightMotionSettings, *, daemon_start: bool = False
) -> CheckResult:
    """The last joint there and back by a few degrees at the configured
    (low) dynamics, watching libfranka's ``control_command_success_rate``:
    below the threshold, the host cannot keep the 1 kHz loop (review #9).

    Never at unit start (``daemon_start``): systemd starts the daemon at boot
    and after a crash, with nobody at the cell to see the arm move (hardware
    review #12). The operator runs ``proctor station check`` at the cell,
    the daemon stopped, to prove the loop (``deploy/README.md``)."""
    name = "test motion"
    if daemon_start:
        return CheckResult(
            name,
            CheckStatus.warning,
            "not run at unit start (nobody is watching the arm): run `proctor station check` "
            "at the cell, with the daemon stopped, to prove the 1 kHz loop",
        )
    if not settings.test_motion:
        return CheckResult(name, CheckStatus.warning, "disabled ([preflight] test_motion)")
    report, failed = ask_controller(arm, name)
    if report is None:
        return failed or CheckResult(name, CheckStatus.failed, "no report")
    if report.mode != "Idle" or report.tcp_problem or report.payload_problem:
        return CheckResult(
            name, CheckStatus.failed, "not attempted: the arm is not idle and as commissioned"
        )
    rates: list[float] = []
    try:
        start = arm.read_state().q
        # towards the middle of the joint's range, so it never nears a limit
        lo, hi = arm.config.q_min[6], arm.config.q_max[6]
        step = settings.test_motion_rad
        delta = step if start[6] < 0.5 * (lo + hi) else -step
        for target in (start[6] + delta, start[6]):
            q = start.copy()
            q[6] = target
            arm.send(ArmCommand(ArmCommandKind.joint_position, q))
            deadline = clock.now() + settings.test_motion_timeout_s
            # done when the controller has left Move (libfranka's mode while a
            # motion runs) with the joint at its target
            while True:
                report = arm.controller_report()
                if report is None:
                    break
                if report.command_success_rate > 0:
                    # libfranka reports 0 while no control loop runs
                    rates.append(report.command_success_rate)
                arrived = abs(arm.read_state().q[6] - target) < TEST_MOTION_TOLERANCE_RAD
                if arrived and report.mode != "Move":
                    break
                if clock.now() > deadline:
                    arm.stop()
                    return CheckResult(
                        name,
                        CheckStatus.failed,
                        f"did not finish in {settings.test_motion_timeout_s:g} s",
                    )
                clock.sleep_until(clock.now() + 0.005)
        error = arm.read_state().error
    except (ArmFault, ValueError) as exc:
        return CheckResult(name, CheckStatus.failed, str(exc))
    if error is not None:
        return CheckResult(name, CheckStatus.failed, error)
    if not rates:
        return CheckResult(name, CheckStatus.failed, "no control loop observed during the motion")
    worst = min(rates)
    detail = (
        f"joint 7 by {abs(delta):.2f} rad and back; command success rate ≥ {worst:.3f} "
        f"over {len(rates)} samples (need > {settings.min_command_success_rate:g})"
    )
    ok = worst > settings.min_command_success_rate
    return CheckResult(name, CheckStatus.passed if ok else CheckStatus.failed, detail)


__all__ = [
    "RECOVERABLE_AT_START",
    "ROBOT_MODE_ADVICE",
    "TEST_MOTION_TOLERANCE_RAD",
    "check_end_effector",
    "check_fci_and_brakes",
    "check_load",
    "check_robot_mode",
    "check_test_motion",
    "libfranka_checks",
]
