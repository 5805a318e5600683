"""A submitter's own server: ``runner.command`` (argv, no shell) run in an
environment built from ``runner.requirements`` on ``runner.python``.

Nothing is added to the environment: the server and its wire are theirs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from proctor.runner.frameworks.base import (
    ENV_PLACEHOLDER,
    SANDBOX_CHECKPOINT,
    EnvSpec,
    ServerLaunch,
    register,
)
from proctor.runner.manifest import CommandRunner, Manifest, ManifestProblem
from proctor.runner.requirements import FIELD, MAX_REQUIREMENTS_BYTES, check_requirements


def _program(word: str) -> str:
    """A bare program name (``python``, ``uvicorn``) is the environment's own;
    a path is left as the submitter wrote it (e.g. ``/checkpoint/serve.sh``)."""
    if "/" in word or word.startswith("{"):
        return word
    return f"{ENV_PLACEHOLDER}/bin/{word}"


@register
class Command:
    name: ClassVar[str] = "command"

    def _runner(self, manifest: Manifest) -> CommandRunner:
        runner = manifest.runner
        assert isinstance(runner, CommandRunner)
        return runner

    def _requirements(self, manifest: Manifest, root: Path) -> bytes | None:
        rel = self._runner(manifest).requirements
        if rel is None:
            return None
        with (root / rel).open("rb") as f:
            return f.read(MAX_REQUIREMENTS_BYTES + 1)

    def env_spec(self, manifest: Manifest, root: Path) -> EnvSpec:
        runner = self._runner(manifest)
        requirements = self._requirements(manifest, root)
        digest = hashlib.sha256(requirements or b"").hexdigest()[:12]
        return EnvSpec(
            framework=self.name,
            version=f"req-{digest}",
            python=runner.python,
            requirements=requirements,
        )

    def check(self, manifest: Manifest, root: Path) -> list[ManifestProblem]:
        rel = self._runner(manifest).requirements
        if rel is None:
            return []
        if not (root / rel).is_file():
            return [ManifestProblem(FIELD, f"'{rel}' is not a file in the checkpoint")]
        return check_requirements(self._requirements(manifest, root) or b"")

    def check_members(
        self, manifest: Manifest, read: Callable[[str], bytes | None]
    ) -> list[ManifestProblem]:
        rel = self._runner(manifest).requirements
        if rel is None:
            return []
        raw = read(rel)
        if raw is None:
            return [ManifestProblem(FIELD, f"'{rel}' is not a file in the archive")]
        return check_requirements(raw)

    def launch(self, manifest: Manifest, port: int) -> ServerLaunch:
        runner = self._runner(manifest)
        argv = [part.replace("{port}", str(port)) for part in runner.command]
        argv[0] = _program(argv[0])
        return ServerLaunch(
            argv=tuple(argv), port=port, dialect=runner.dialect, cwd=SANDBOX_CHECKPOINT
        )
