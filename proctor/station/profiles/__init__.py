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
   (``ARMS.get("franky")``), never ``franky`` itself.
2. Add ``<name>`` to ``proctor.core.domain.StationProfile``: ``PROFILES`` below
   (a ``proctor.core.registry.Registry``) maps each of those names to the module
   named after it, imported only when that profile is asked for.
3. Add the name to ``Station.profile``'s documentation if it is a new kind
   of cell, and a test that builds it.
"""

from __future__ import annotations

from collections.abc import Callable

from proctor.core.domain import StationProfile
from proctor.core.errors import ConfigError
from proctor.core.registry import Registry
from proctor.station.cell import Cell
from proctor.station.config import CameraSettings, StationConfig

ProfileFactory = Callable[[StationConfig], Cell]


# one module per profile the kernel names (``StationProfile``: what the server
# accepts at enrolment), named after it
PROFILES: Registry[ProfileFactory] = Registry(
    "profile",
    {p.value: f"proctor.station.profiles.{p.value}" for p in StationProfile},
    error=ConfigError,
    missing_hint="install the 'hardware'/'twin' extras",
)


def build_cell(profile: str, config: StationConfig) -> Cell:
    """Build (not connect) the cell for ``profile``."""
    return PROFILES.get(profile)(config)


def camera_settings(config: StationConfig, name: str, default: CameraSettings) -> CameraSettings:
    """The camera's size and rate: the config's ``[cameras.<name>]`` over the profile default."""
    return config.cameras.get(name, default)


__all__ = ["PROFILES", "ProfileFactory", "build_cell", "camera_settings"]
