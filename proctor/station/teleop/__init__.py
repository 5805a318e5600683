"""Teleoperation for the human reference: a person drives the arm through
the station exactly as a policy would.

The teleop source is served as a policy (``TeleopPolicy``, over the same
WebSocket protocol on loopback), so the station cannot tell a person from a
model: the runner asks it for actions at the control rate, executes and
records them like any other episode. Actions are Cartesian velocities in the
robot base frame plus the gripper target (``cartesian_velocity``, 7 wide).

Input devices: a 3Dconnexion SpaceMouse (``spacemouse.py``: report parsing
here, the HID device under ``proctor/station/drivers/input/``) or, when there is
none, the keyboard of the terminal that serves it (``keyboard.py``).
"""
