"""The frameworks a checkpoint may name (``runner.framework``), each
registered in ``base.FRAMEWORKS`` by the module named after it, which the
registry imports when the framework is first asked for."""

from proctor.runner.frameworks.base import FRAMEWORKS, framework_for

__all__ = ["FRAMEWORKS", "framework_for"]
