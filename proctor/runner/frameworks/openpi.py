"""openpi checkpoints: refused, plainly, before anything is built.

openpi is not installable from the package index: the name ``openpi`` there
is an empty placeholder (0.0.0, "Reserved package name for future use by
Physical Intelligence"); only its client, ``openpi-client``, is published.
The framework lives in its git repository, and the runner installs nothing
from outside the index. A checkpoint naming it could never run, so it is
refused at upload with what to do instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from proctor.runner.frameworks.base import EnvSpec, ServerLaunch, register
from proctor.runner.manifest import Manifest, ManifestProblem

FIELD = "runner.framework"
REFUSAL = (
    "'openpi' checkpoints cannot be served by this runner: openpi is not installable "
    "from the package index (only openpi-client is published there). Serve it with "
    'framework = "command" and your own serve script (openpi\'s source packed in the '
    "archive, its dependencies from the index listed in requirements), or run the "
    "server yourself and register it as an endpoint"
)


@register
class Openpi:
    name: ClassVar[str] = "openpi"

    def env_spec(self, manifest: Manifest, root: Path) -> EnvSpec:
        raise ValueError(REFUSAL)

    def check(self, manifest: Manifest, root: Path) -> list[ManifestProblem]:
        return [ManifestProblem(FIELD, REFUSAL)]

    def check_members(
        self, manifest: Manifest, read: Callable[[str], bytes | None]
    ) -> list[ManifestProblem]:
        return [ManifestProblem(FIELD, REFUSAL)]

    def launch(self, manifest: Manifest, port: int) -> ServerLaunch:
        raise ValueError(REFUSAL)
