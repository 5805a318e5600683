"""The bubblewrap command line of one sandbox: what the server sees of the
host (read-only system, its environment, the checkpoint, our helpers), what
it may write (a private size-bounded /tmp in memory), and nothing else: no
host /etc, no data folders, no host folder it can write, no network (a fresh
network namespace holds only loopback; the wire is a listening socket the
host hands in as a descriptor)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from proctor.runner.frameworks.base import (
    HELPERS_DIR,
    SANDBOX_CHECKPOINT,
    SANDBOX_HELPERS,
    SANDBOX_TMP,
)
from proctor.runner.sandbox.base import SandboxSpec

BWRAP = "/usr/bin/bwrap"
# the wire's socket, in the host's socket folder (work_dir/sock): the host
# makes it and hands the sandbox only its listening descriptor, so nothing
# the sandbox writes can land on the host's disk
WIRE_SOCKET_NAME = "wire.sock"
# the unprivileged user the server runs as, inside the user namespace
NOBODY = 65534
# the host's system folders the server may read; a merged-/usr host has
# /bin, /lib… as links into /usr, which are recreated as links
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
# files of the host /etc that say nothing about the host but are needed to
# run programs (the dynamic linker's cache, the time zone)
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# ours win over anything passed in
_RESERVED_ENV = frozenset({"HOME", "TMPDIR", "PATH", "CUDA_VISIBLE_DEVICES"})
_GPUS = re.compile(r"\d+(,\d+)*\Z")


class SandboxConfigError(ValueError):
    """The spec cannot be sandboxed as given (the message names the field)."""


def base_prefix(env_dir: Path) -> Path:
    """The base Python installation a venv runs on: the parent of pyvenv.cfg's
    ``home`` (its bin folder); bound read-only at the same path, since the
    venv's interpreter is a link into it and its stdlib lives there."""
    cfg = env_dir / "pyvenv.cfg"
    try:
        lines = cfg.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SandboxConfigError(f"env_dir: {cfg} cannot be read ({exc})") from exc
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            home = Path(value.strip()).resolve()
            if not home.is_absolute() or not home.is_dir():
                raise SandboxConfigError(f"env_dir: pyvenv.cfg home {home} is not a folder")
            return home.parent
    raise SandboxConfigError(f"env_dir: {cfg} has no 'home ='")


def sandbox_env(spec: SandboxSpec) -> dict[str, str]:
    """The server's whole environment: the runner's, the launch's, and ours."""
    env: dict[str, str] = {}
    for source, mapping in (("env", spec.env), ("launch.env", spec.launch.env)):
        for key, value in mapping.items():
            if not _ENV_NAME.match(key) or "\0" in value:
                raise SandboxConfigError(f"{source}: invalid variable {key!r}")
            if key not in _RESERVED_ENV:
                env[key] = value
    env["HOME"] = SANDBOX_TMP
    env["TMPDIR"] = SANDBOX_TMP
    env["PATH"] = f"{spec.env_dir / 'bin'}:/usr/bin:/bin"
    if spec.gpus:
        if not _GPUS.match(spec.gpus):
            raise SandboxConfigError(
                f"gpus: {spec.gpus!r} is not a comma-separated list of indices"
            )
        env["CUDA_VISIBLE_DEVICES"] = spec.gpus
    return env


def write_etc(folder: Path) -> Path:
    """A minimal /etc: who nobody is, and that localhost is loopback."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "passwd": f"nobody:x:{NOBODY}:{NOBODY}:nobody:{SANDBOX_TMP}:/usr/sbin/nologin\n",
        "group": f"nogroup:x:{NOBODY}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _system_binds() -> list[str]:
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    return args


def _etc_binds(etc_dir: Path) -> list[str]:
    args: list[str] = []
    for item in sorted(etc_dir.iterdir()):
        args += ["--ro-bind", str(item), f"/etc/{item.name}"]
    for name in ETC_FILES:
        if Path(name).exists():
            args += ["--ro-bind", name, name]
    return args


def _gpu_binds() -> list[str]:
    """The NVIDIA device nodes. UNVERIFIED: the development host has no GPU.
    Every GPU's node is bound and CUDA_VISIBLE_DEVICES picks the server's
    ones: that steers a cooperative server, it does not stop a hostile one
    from opening another GPU on the same host."""
    args: list[str] = []
    for node in sorted(Path("/dev").glob("nvidia*")):
        if node.is_char_device():
            args += ["--dev-bind", str(node), str(node)]
    return args


def bwrap_argv(spec: SandboxSpec, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """bwrap's argv running ``command`` (sandbox paths) in ``spec``'s sandbox
    with ``env`` (``sandbox_env``, which validates it); ``work_dir`` must hold
    ``etc/`` already (``process.start``)."""
    work = spec.work_dir
    tmp_bytes = spec.limits.max_file_bytes
    args = [
        BWRAP,
        # every namespace: user, pid, ipc, uts, cgroup, mount and network
        # (loopback only); no user namespaces inside (kernel attack surface)
        "--unshare-all",
        "--unshare-user",  # --unshare-all only tries; --uid and --disable-userns need it
        "--disable-userns",
        "--die-with-parent",
        # no controlling terminal: TIOCSTI cannot push keys into ours
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--hostname",
        "sandbox",
        *_system_binds(),
        # a private temp in memory (its pages count against the memory
        # cgroup), mounted before the binds: one under /tmp stays visible
        "--size",
        str(tmp_bytes),
        "--tmpfs",
        SANDBOX_TMP,
        *_etc_binds(work / "etc"),
        "--ro-bind",
        str(base_prefix(spec.env_dir)),
        str(base_prefix(spec.env_dir)),
        "--ro-bind",
        str(spec.env_dir),
        str(spec.env_dir),
        "--ro-bind",
        str(spec.checkpoint_dir),
        SANDBOX_CHECKPOINT,
        "--ro-bind",
        str(HELPERS_DIR),
        SANDBOX_HELPERS,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *(_gpu_binds() if spec.gpus else []),
        # the root bwrap builds is a writable tmpfs: read-only once everything
        # is mounted, so only /tmp (memory, not the host's disk) can be written
        "--remount-ro",
        "/",
        "--chdir",
        spec.launch.cwd,
        "--clearenv",
    ]
    for key, value in sorted(env.items()):
        args += ["--setenv", key, value]
    return [*args, "--", *command]
