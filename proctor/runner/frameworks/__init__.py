"""The frameworks a checkpoint may name (``runner.framework``), each
registered in ``base.FRAMEWORKS`` when its module is imported here."""

from proctor.runner.frameworks import command, lerobot, openpi
from proctor.runner.frameworks.base import FRAMEWORKS, framework_for

__all__ = ["FRAMEWORKS", "command", "framework_for", "lerobot", "openpi"]
