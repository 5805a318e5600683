"""What a framework is to the runner: an environment to build, checks to run
before anything starts, and a server to launch inside the sandbox.

Frameworks are found by name in ``FRAMEWORKS`` (a ``proctor.core.registry.Registry``;
``register``), the manifest's ``runner.framework``; nothing branches on the
name elsewhere. The names are the manifest's ``RUNNER_FRAMEWORKS`` (its
sections' tags), each framework in the module named after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

from proctor.core.registry import Registry
from proctor.runner.manifest import RUNNER_FRAMEWORKS, Manifest, ManifestProblem

# where things are inside the sandbox (proctor/runner/sandbox): the folder
# holding policy.toml, read-only; the in-sandbox helpers of ours (bridge,
# framework servers), read-only; the private writable temp (also HOME)
SANDBOX_CHECKPOINT = "/checkpoint"
SANDBOX_HELPERS = "/opt/proctor"
SANDBOX_TMP = "/tmp"
# the folder of our in-sandbox helper scripts on the host (stdlib-only or the
# framework environment's own packages; they never import proctor)
HELPERS_DIR = Path(__file__).resolve().parents[1] / "servers"
# in a ServerLaunch's argv and env: the environment's interpreter and folder
# (see ServerLaunch.fill)
PYTHON_PLACEHOLDER = "{python}"
ENV_PLACEHOLDER = "{env}"


@dataclass(frozen=True)
class EnvSpec:
    """One environment: built once per ``key()`` and reused."""

    framework: str
    # the framework's version (e.g. LeRobot's), or the requirement file's hash
    version: str
    python: str  # "3.11": the interpreter the venv is made from
    # pip requirement lines installed first (ours: the wire's msgpack, websockets)
    packages: tuple[str, ...] = ()
    # the submitter's requirements file's bytes (command runner), installed after
    requirements: bytes | None = field(default=None, repr=False)

    def key(self) -> str:
        digest = hashlib.sha256(
            json.dumps([self.framework, self.version, self.python, list(self.packages)]).encode()
        )
        digest.update(b"\0" + (self.requirements or b""))
        return f"{self.framework}-{self.version}-py{self.python}-{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class ServerLaunch:
    """How to start the policy server inside the sandbox. Paths are the
    sandbox's (``SANDBOX_*``; the environment is bound at its host path).

    A framework does not know where its environment was built, so ``argv``
    and ``env``'s values may hold two placeholders the runner fills in with
    ``fill`` once the environment is built: ``{python}`` (the environment's
    interpreter, ``<env>/bin/python``) and ``{env}`` (the environment's
    folder, e.g. ``{env}/bin/uvicorn``). Nothing else in them is a
    placeholder: a submitter's ``{port}`` is substituted by the framework
    before, and other braces are left as they are.
    """

    argv: tuple[str, ...]
    # the port the server listens on, on the sandbox's own loopback (the
    # sandbox has no other network; the bridge reaches it there)
    port: int
    dialect: str  # what it speaks: openpi | roboarena | positronic_v1
    env: Mapping[str, str] = field(default_factory=dict)
    # the server's working folder inside the sandbox: a submitter's command
    # names its files relative to policy.toml (``python serve.py``)
    cwd: str = SANDBOX_TMP

    def fill(self, env_path: Path) -> ServerLaunch:
        """This launch with ``{python}`` and ``{env}`` replaced for the
        environment at ``env_path`` (its host path, bound as is)."""

        def sub(text: str) -> str:
            return text.replace(PYTHON_PLACEHOLDER, str(env_path / "bin" / "python")).replace(
                ENV_PLACEHOLDER, str(env_path)
            )

        return ServerLaunch(
            argv=tuple(sub(a) for a in self.argv),
            port=self.port,
            dialect=self.dialect,
            env={k: sub(v) for k, v in self.env.items()},
            cwd=self.cwd,
        )


class Framework(Protocol):
    name: ClassVar[str]

    def env_spec(self, manifest: Manifest, root: Path) -> EnvSpec:
        """The environment ``manifest`` needs; ``root`` is the unpacked folder
        holding policy.toml on the host (read, never executed)."""
        ...

    def check(self, manifest: Manifest, root: Path) -> list[ManifestProblem]:
        """Problems found before anything runs, each naming its field (e.g.
        a LeRobot feature the station cannot provide). Reads data files only:
        never unpickles or imports anything from the checkpoint."""
        ...

    def check_members(
        self, manifest: Manifest, read: Callable[[str], bytes | None]
    ) -> list[ManifestProblem]:
        """The same checks at upload, on the archive unopened: ``read(path)``
        gives a regular file member's bytes (path relative to policy.toml), at
        most its first ``archive.MEMBER_READ_BYTES`` (a longer member comes
        back cut there: enough for a config file or a weights file's header),
        or None when the archive has no such file."""
        ...

    def launch(self, manifest: Manifest, port: int) -> ServerLaunch:
        """The server to start, listening on ``port`` inside the sandbox."""
        ...


# each framework in the module named after it, imported when first asked for
FRAMEWORKS: Registry[Framework] = Registry(
    "runner.framework", {name: f"proctor.runner.frameworks.{name}" for name in RUNNER_FRAMEWORKS}
)


_F = TypeVar("_F", bound=type[Framework])


def register(cls: _F) -> _F:
    """Class decorator: one instance of ``cls`` in ``FRAMEWORKS`` under ``cls.name``."""
    FRAMEWORKS.register_instance(cls)
    return cls


def framework_for(manifest: Manifest) -> Framework:
    return FRAMEWORKS.get(manifest.runner.framework)
