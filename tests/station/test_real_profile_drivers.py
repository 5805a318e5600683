"""The real profile's arm and gripper are chosen by name in the config
(``[real.arm] driver = "…"``), from the drivers' registries: a second arm
driver is a registration, not an edit of the profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from proctor.core.clock import MonotonicClock
from proctor.core.errors import ConfigError
from proctor.station.drivers.arm.base import ARMS
from proctor.station.drivers.gripper.base import GRIPPERS
from proctor.station.profiles.real import build_arm, build_gripper


@dataclass(frozen=True)
class _ToyConfig:
    host: str
    speed: float = 0.1


class _ToyDriver:
    """Only what building needs: a config class and the constructor's shape."""

    config_class = _ToyConfig

    def __init__(self, config: _ToyConfig, *, clock: Any) -> None:
        self.config = config
        self.clock = clock


@pytest.fixture
def toy_drivers():  # type: ignore[no-untyped-def]
    ARMS.add("toy_arm", _ToyDriver)  # type: ignore[arg-type]
    GRIPPERS.add("toy_gripper", _ToyDriver)  # type: ignore[arg-type]
    yield
    ARMS.unregister("toy_arm")
    GRIPPERS.unregister("toy_gripper")


def test_the_config_names_the_arm_and_gripper_drivers(toy_drivers) -> None:  # type: ignore[no-untyped-def]
    clock = MonotonicClock()
    section = {"driver": "toy_arm", "host": "10.0.0.2", "speed": 0.3}
    arm = build_arm(section, "real.arm", clock)
    assert isinstance(arm, _ToyDriver) and arm.config == _ToyConfig("10.0.0.2", 0.3)
    assert section["driver"] == "toy_arm"  # the caller's table is not consumed
    gripper = build_gripper({"driver": "toy_gripper", "host": "/dev/x"}, "real.gripper", clock)
    assert isinstance(gripper, _ToyDriver) and gripper.config.host == "/dev/x"


def test_an_unknown_or_malformed_driver_is_refused_by_name() -> None:
    clock = MonotonicClock()
    with pytest.raises(ConfigError, match="arm driver 'kuka' is not one of sim, franky"):
        build_arm({"driver": "kuka", "host": "x"}, "real.arm", clock)
    with pytest.raises(ConfigError, match=r"real\.gripper\.driver: must be a driver's name"):
        build_gripper({"driver": 3}, "real.gripper", clock)
    # the simulated arm is built by its profile from the simulated world, not from a table
    with pytest.raises(ConfigError, match=r"real\.arm\.driver: 'sim' cannot be configured"):
        build_arm({"driver": "sim"}, "real.arm", clock)


def test_the_toy_drivers_keys_are_its_own(toy_drivers) -> None:  # type: ignore[no-untyped-def]
    """``driver`` is the profile's key; the rest is the driver's config, checked as before."""
    with pytest.raises(ConfigError, match="unknown setting"):
        build_arm({"driver": "toy_arm", "host": "h", "port": 1}, "real.arm", MonotonicClock())
