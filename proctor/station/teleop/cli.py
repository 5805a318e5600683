"""``proctor station teleop``: serve a person at a SpaceMouse (or the
keyboard) as a policy, for the human reference episodes."""

from __future__ import annotations

from typing import Annotated

import typer

from proctor.core.errors import UsageError


def teleop(
    device: Annotated[
        str, typer.Option(help="Input: spacemouse, or keyboard (this terminal's keys).")
    ] = "spacemouse",
    port: Annotated[int, typer.Option(help="Loopback port to serve the policy wire on.")] = 8010,
    host: Annotated[str, typer.Option(help="Address to bind (keep it loopback).")] = "127.0.0.1",
) -> None:
    """Serve teleoperation over the policy wire, on this station host's
    loopback, and drive the arm as the human reference. In a campaign the
    reference is registered once by an admin (`proctor submission reference
    NAME --url ws://127.0.0.1:PORT`) and each station connects here itself;
    for one episode, `proctor station episode --policy ws://127.0.0.1:PORT`."""
    from proctor.policywire.serving.openpi import PolicyServer
    from proctor.station.teleop.policy import TeleopPolicy

    source: object
    if device == "spacemouse":
        from proctor.station.drivers.input.spacemouse_hid import SpaceMouseHid, SpaceMouseNotFound
        from proctor.station.teleop.spacemouse import SpaceMouseSource

        try:
            hid_device = SpaceMouseHid()
        except SpaceMouseNotFound as exc:
            raise UsageError(str(exc)) from None
        source = SpaceMouseSource(hid_device.read, close=hid_device.close)
    elif device == "keyboard":
        from proctor.station.teleop.keyboard import KeyboardSource

        source = KeyboardSource()
    else:
        raise UsageError(f"--device: '{device}' is not spacemouse or keyboard")
    server = PolicyServer(TeleopPolicy(source), host=host, port=port)  # type: ignore[arg-type]
    try:
        source.start()  # type: ignore[attr-defined]
    except RuntimeError as exc:
        raise UsageError(str(exc)) from None
    try:
        server.serve_forever(
            started=lambda: typer.echo(
                f"teleop ({device}) serving the policy wire on {server.url}", err=True
            )
        )
    except KeyboardInterrupt:
        pass
    finally:
        source.stop()  # type: ignore[attr-defined]
