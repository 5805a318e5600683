"""Each dialect's serving face: how the demo's scripted policies and the
tests' servers speak its wire, registered under the dialect's own name.

The client face (``proctor.policywire.dialects``) never imports these; a
dialect that claims the "serving" face (``Dialect.faces``) has one here
(tests/policywire/test_dialects.py holds that).
"""

from __future__ import annotations

from typing import Any, ClassVar

from proctor.core.registry import Registry

# defined below, in this module: nothing to import on first use
_servers: Registry[DialectServer] = Registry(
    "dialect server", dict.fromkeys(("openpi", "roboarena", "positronic_v1"))
)
register = _servers.register_instance
unregister = _servers.unregister
get = _servers.get


class DialectServer:
    name: ClassVar[str]

    def served_metadata(self, declared: dict[str, Any], *, action_horizon: int) -> dict[str, Any]:
        """The metadata a server of this dialect sends for a policy that declares
        ``declared`` (RoboArena's keys)."""
        return declared

    def serve(
        self,
        policy: Any,
        *,
        host: str,
        port: int,
        fault: Any,
        image_size: tuple[int, int] | None,
        action_fps: float,
    ) -> Any:
        """A server (not started) for ``policy`` (a ``ServedPolicy``) on this wire.
        ``fault`` drills the openpi server; ``image_size`` is (H, W)."""
        from proctor.policywire.serving.openpi import PolicyServer

        return PolicyServer(policy, host=host, port=port, fault=fault)

    def served_text(self, server: Any) -> str:
        """What ``proctor policy serve`` adds after the server's URL."""
        return ""


@register
class OpenpiServer(DialectServer):
    name = "openpi"

    def served_metadata(self, declared: dict[str, Any], *, action_horizon: int) -> dict[str, Any]:
        # free-form metadata: the action space is the one key the station reads
        return {"action_space": declared["action_space"], "action_horizon": action_horizon}


@register
class RoboarenaServer(DialectServer):
    name = "roboarena"

    def served_metadata(self, declared: dict[str, Any], *, action_horizon: int) -> dict[str, Any]:
        return declared


@register
class PositronicV1Server(DialectServer):
    name = "positronic_v1"

    def serve(
        self,
        policy: Any,
        *,
        host: str,
        port: int,
        fault: Any,
        image_size: tuple[int, int] | None,
        action_fps: float,
    ) -> Any:
        from proctor.policywire.serving.positronic import PositronicServer

        if fault is not None:
            raise ValueError("fault drills are served on the openpi wire only")
        size = (image_size[1], image_size[0]) if image_size else None
        return PositronicServer(
            policy, host=host, port=port, image_size_wh=size, action_fps=action_fps
        )

    def served_text(self, server: Any) -> str:
        return f" (the Positronic v1 wire; session {server.session_url()})"


BUILT_IN = frozenset(_servers.modules)
