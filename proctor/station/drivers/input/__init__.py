"""Operator input devices (teleoperation), behind the hardware-library boundary."""
