"""Station profiles: a name → a factory that builds the ``Cell`` from the config.

* ``sim``  — the kinematic simulated cell (``proctor/station/sim/``), virtual or real-time clock.
* ``twin`` — the real drivers against protocol simulators (franky-sim, a
  Modbus 2F-85, RealSense playback); module ``proctor.station.profiles.twin``.
* ``real`` — the hardware; module ``proctor.station.profiles.real``.

How to add a profile
--------------------
1. Create ``proctor/station/profiles/<name>.py``::

       from proctor.station.cell import Cell
       from proctor.station.config import StationConfig
       from proctor.station.profiles import PROFILES

       @PROFILES.register("<name>")
       def build(config: StationConfig) -> Cell:
           section = config.profile_section("<name>")   # your [<name>] table
           ...                                          # validate it, build drivers
           return Cell(profile="<name>", clock=..., arm=..., gripper=...,
                       cameras={"exterior": ..., "wrist": ...})

   The factory builds but does not connect (the runner calls
   ``Cell.connect``); it validates its own section and raises
   ``proctor.core.errors.ConfigError`` naming the bad field. Camera sizes come
   from ``camera_settings(config, name, default)`` so that ``[cameras.*]``
   overrides apply to every profile alike. Hardware libraries stay inside
   ``proctor/station/drivers/``: import driver classes through their registries
   (``ARMS.load("franky")``), never ``franky`` itself.
2. Add ``"<name>": "proctor.station.profiles.<name>"`` to ``PROFILES`` below, so the
   module is imported only when that profile is asked for.
3. Add the name to ``Station.profile``'s documentation if it is a new kind
   of cell, and a test that builds it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from proctor.core.errors import ConfigError
from proctor.station.cell import Cell
from proctor.station.config import CameraSettings, StationConfig

ProfileFactory = Callable[[StationConfig], Cell]


class ProfileRegistry:
    def __init__(self, modules: dict[str, str]) -> None:
        self._modules = dict(modules)
        self._factories: dict[str, ProfileFactory] = {}

    def register(self, name: str) -> Callable[[ProfileFactory], ProfileFactory]:
        def decorate(factory: ProfileFactory) -> ProfileFactory:
            self._factories[name] = factory
            return factory

        return decorate

    def names(self) -> list[str]:
        return sorted(set(self._modules) | set(self._factories))

    def load(self, name: str) -> ProfileFactory:
        if name not in self._factories:
            module = self._modules.get(name)
            if module is None:
                raise ConfigError(
                    f"profile: '{name}' is unknown; known profiles: {', '.join(self.names())}"
                )
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name == module:
                    raise ConfigError(
                        f"profile: '{name}' is not available in this installation "
                        f"({module} is missing)"
                    ) from None
                raise ConfigError(
                    f"profile: '{name}' needs {exc.name}, which is not installed "
                    "(install the 'hardware'/'twin' extras)"
                ) from None
        if name not in self._factories:
            raise ConfigError(f"profile: module {self._modules[name]} did not register '{name}'")
        return self._factories[name]


PROFILES = ProfileRegistry(
    {
        "sim": "proctor.station.profiles.sim",
        "twin": "proctor.station.profiles.twin",
        "real": "proctor.station.profiles.real",
    }
)


def build_cell(profile: str, config: StationConfig) -> Cell:
    """Build (not connect) the cell for ``profile``."""
    return PROFILES.load(profile)(config)


def camera_settings(config: StationConfig, name: str, default: CameraSettings) -> CameraSettings:
    """The camera's size and rate: the config's ``[cameras.<name>]`` over the profile default."""
    return config.cameras.get(name, default)


__all__ = ["PROFILES", "ProfileFactory", "ProfileRegistry", "build_cell", "camera_settings"]
