"""A pre-flight check's result: the words ``proctor station check`` prints
(``proctor.station.preflight``) and a driver's own checks answer in, so that
what only one driver knows how to check lives with that driver
(``Arm.preflight_checks``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class CheckStatus(StrEnum):
    passed = "PASS"
    warning = "WARN"
    failed = "FAIL"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: CheckStatus
    detail: str

    def line(self) -> str:
        return f"{self.status.value}  {self.name:<16} {self.detail}"


class PreflightMotionSettings(Protocol):
    """What a driver's test motion reads of the pre-flight settings
    (``proctor.station.preflight.PreflightSettings``, which see)."""

    @property
    def test_motion(self) -> bool: ...

    @property
    def test_motion_rad(self) -> float: ...

    @property
    def test_motion_timeout_s(self) -> float: ...

    @property
    def min_command_success_rate(self) -> float: ...


__all__ = ["CheckResult", "CheckStatus", "PreflightMotionSettings"]
