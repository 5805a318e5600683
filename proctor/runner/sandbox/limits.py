"""The sandbox's resource limits: a cgroup per sandbox where the host lets us
make one, and rlimits always.

Backends are found by name in ``LIMIT_BACKENDS`` (a ``proctor.core.registry.Registry``:
"cgroup-v2", "cgroup-v1", "rlimit"); ``choose`` picks one from
``RunnerSettings.cgroups``.

Why a cgroup and not just rlimits: the sandboxed server runs as uid 65534
inside bubblewrap's user namespace, but that namespace maps it to the uid
that started bwrap, root (kuid 0) on the runner host. The kernel does not
enforce RLIMIT_NPROC on processes whose real uid is root in the initial
namespace, so only the pids cgroup bounds the number of processes (a fork
bomb). RLIMIT_AS bounds each process's address space, not the sandbox's
memory (and breaks runtimes that reserve large virtual ranges); the memory
cgroup bounds what the whole sandbox holds, page cache and tmpfs included.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import signal
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from proctor.core.registry import Registry
from proctor.runner.sandbox.base import Limits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
# the backends "auto" tries, in order (RunnerSettings.cgroups)
_PREFERENCE: dict[str, tuple[str, ...]] = {
    "auto": ("cgroup-v2", "cgroup-v1", "rlimit"),
    "v2": ("cgroup-v2",),
    "v1": ("cgroup-v1",),
    "none": ("rlimit",),
}
# the hard RLIMIT_CPU is this much past the soft one: SIGXCPU first (a
# server may catch it and exit cleanly), SIGKILL if it does not
CPU_KILL_GRACE_S = 5


class LimitsUnavailable(RuntimeError):
    """The limit backend asked for cannot be used on this host."""


def rlimits(limits: Limits, *, bound_address_space: bool) -> dict[int, tuple[int, int]]:
    """The rlimits every sandbox gets (applied to bwrap before exec, inherited
    by everything inside). RLIMIT_NPROC is left out on purpose: it does not
    bind processes whose real uid is root (see the module docstring)."""
    out = {
        resource.RLIMIT_CPU: (limits.cpu_seconds, limits.cpu_seconds + CPU_KILL_GRACE_S),
        resource.RLIMIT_NOFILE: (limits.max_open_files, limits.max_open_files),
        resource.RLIMIT_FSIZE: (limits.max_file_bytes, limits.max_file_bytes),
        resource.RLIMIT_CORE: (0, 0),
    }
    if bound_address_space:
        out[resource.RLIMIT_AS] = (limits.memory_bytes, limits.memory_bytes)
    return out


class Confinement:
    """One sandbox's share of a backend: made before the sandbox starts,
    entered by its first process before exec, read for diagnostics, removed
    after."""

    # files the child writes its pid into before exec (cgroup.procs)
    procs_files: tuple[Path, ...] = ()
    # RLIMIT_AS as the memory bound (only when nothing better exists)
    bound_address_space: bool = False
    backend: str = ""

    def enter(self) -> None:
        """Runs in the forked child before exec (``preexec_fn``): os calls only."""
        pid = str(os.getpid()).encode()
        for path in self.procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def members(self) -> list[int]:
        pids: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in path.read_text().split())
        return sorted(pids)

    def memory_peak(self) -> int | None:
        return None

    def oom_killed(self) -> bool:
        return False

    def process_limit_hit(self) -> bool:
        return False

    def remove(self) -> None:
        """Kill whatever is left inside, then delete the cgroups (idempotent);
        without cgroups there is nothing to delete."""
        return None


class LimitBackend(ABC):
    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def available(cls) -> bool: ...

    @abstractmethod
    def confine(self, limits: Limits) -> Confinement: ...


# the backends are defined below, in this module
LIMIT_BACKENDS: Registry[type[LimitBackend]] = Registry(
    "sandbox limit backend", dict.fromkeys(("cgroup-v2", "cgroup-v1", "rlimit"))
)


def register(cls: type[LimitBackend]) -> type[LimitBackend]:
    """Class decorator: ``cls`` is the backend called ``cls.name``."""
    return LIMIT_BACKENDS.add(cls.name, cls)


def choose(preference: str) -> LimitBackend:
    """The first usable backend for ``preference`` (RunnerSettings.cgroups:
    auto, v2, v1, none; or a backend's own name)."""
    names = _PREFERENCE.get(preference) or ((preference,) if preference in LIMIT_BACKENDS else ())
    if not names:
        raise LimitsUnavailable(f"runner.cgroups: unknown value {preference!r}")
    for name in names:
        cls = LIMIT_BACKENDS[name]
        if cls.available():
            if name == "rlimit":
                log.warning(
                    "sandbox limits: no writable cgroup hierarchy; using rlimits only. "
                    "The number of processes is NOT bounded (RLIMIT_NPROC does not bind "
                    "root-mapped sandboxes) and memory is bounded per process (RLIMIT_AS)"
                )
            return cls()
    raise LimitsUnavailable(
        f"runner.cgroups = {preference!r}: no such cgroup hierarchy is writable"
    )


# --- cgroup plumbing ---------------------------------------------------------


@dataclass(frozen=True)
class _Mount:
    point: Path
    root: str  # the path inside the hierarchy that is mounted at ``point``
    options: frozenset[str]
    fstype: str


def _mounts() -> list[_Mount]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        options = frozenset(rfields[2].split(",")) | frozenset(fields[5].split(","))
        out.append(_Mount(Path(fields[4]), fields[3], options, rfields[0]))
    return out


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            out[controller] = path
    return out


def _own_dir(mount: _Mount, path: str) -> Path | None:
    """Where this process's cgroup ``path`` lies under ``mount``; the mount
    may show only a subtree (a container), then ``path`` is relative to it."""
    if mount.root != "/" and not path.startswith(mount.root):
        return None
    rel = path[len(mount.root) :] if mount.root != "/" else path
    out = mount.point / rel.lstrip("/")
    return out if out.is_dir() else None


def _writable_dir(path: Path | None) -> bool:
    return path is not None and os.access(path, os.W_OK)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_keyed(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
    return out


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _kill_and_remove(dirs: tuple[Path, ...], procs: tuple[Path, ...]) -> None:
    """SIGKILL every task until the cgroups are empty, then rmdir them. A
    killed task leaves cgroup.procs a moment after the signal."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        pids: set[int] = set()
        for path in procs:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in path.read_text().split())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    for path in dirs:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    log.error("sandbox cgroup %s not removed: %s", path, exc)
                    break
                time.sleep(0.02)
        else:
            log.error("sandbox cgroup %s not removed: still busy", path)


CHILD_PREFIX = "proctor-sandbox-"
# an empty sandbox cgroup older than this was left by a worker that died
# (its processes died with it: --die-with-parent); a younger one may be a
# sibling worker's, made an instant before its sandbox enters it
STALE_AFTER_S = 60.0


def sweep_stale(parent: Path) -> None:
    now = time.time()
    for path in parent.glob(f"{CHILD_PREFIX}*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > STALE_AFTER_S and not _words(path / "cgroup.procs"):
                path.rmdir()


def _new_child(parent: Path) -> Path:
    sweep_stale(parent)
    path = parent / f"{CHILD_PREFIX}{uuid.uuid4().hex[:12]}"
    path.mkdir(mode=0o755)
    return path


# --- cgroup v1 ---------------------------------------------------------------


def _v1_dir(controller: str) -> Path | None:
    own = _own_cgroups().get(controller)
    if own is None:
        return None
    for mount in _mounts():
        if mount.fstype == "cgroup" and controller in mount.options:
            return _own_dir(mount, own)
    return None


class CgroupV1Confinement(Confinement):
    backend = "cgroup-v1"

    def __init__(self, memory: Path, pids: Path) -> None:
        self.memory, self.pids = memory, pids
        self.procs_files = (memory / "cgroup.procs", pids / "cgroup.procs")

    def memory_peak(self) -> int | None:
        return _read_int(self.memory / "memory.max_usage_in_bytes")

    def oom_killed(self) -> bool:
        control = _read_keyed(self.memory / "memory.oom_control")
        if "oom_kill" in control:  # kernels since 4.13 count the kills
            return control["oom_kill"] > 0 or control.get("under_oom", 0) > 0
        return (_read_int(self.memory / "memory.failcnt") or 0) > 0

    def process_limit_hit(self) -> bool:
        return _read_keyed(self.pids / "pids.events").get("max", 0) > 0

    def remove(self) -> None:
        _kill_and_remove((self.memory, self.pids), self.procs_files)


@register
class CgroupV1(LimitBackend):
    """A memory and a pids cgroup made under this process's own cgroups."""

    name = "cgroup-v1"

    @classmethod
    def available(cls) -> bool:
        return _writable_dir(_v1_dir("memory")) and _writable_dir(_v1_dir("pids"))

    def confine(self, limits: Limits) -> Confinement:
        memory_parent, pids_parent = _v1_dir("memory"), _v1_dir("pids")
        if memory_parent is None or pids_parent is None:
            raise LimitsUnavailable("cgroup v1: no memory or pids hierarchy")
        memory = _new_child(memory_parent)
        try:
            pids = _new_child(pids_parent)
        except OSError:
            memory.rmdir()
            raise
        confinement = CgroupV1Confinement(memory, pids)
        try:
            (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            # memory+swap as the same bound: swapping out does not escape it
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                with contextlib.suppress(OSError):
                    swap.write_text(str(limits.memory_bytes))
            (pids / "pids.max").write_text(str(limits.max_processes))
        except OSError:
            confinement.remove()
            raise
        return confinement


# --- cgroup v2 ---------------------------------------------------------------


# the leaf this process moves itself into (cgroup v2 lets a cgroup with
# processes of its own hand no controllers to children)
V2_LEAF = "proctor-runner"
_V2_CONTROLLERS = frozenset({"memory", "pids"})


def _v2_dir() -> Path | None:
    """The delegated cgroup the sandboxes are made in: this process's own,
    or its parent once this process has moved into ``V2_LEAF``."""
    own = _own_cgroups().get("")
    if own is None:
        return None
    for mount in _mounts():
        if mount.fstype == "cgroup2":
            path = _own_dir(mount, own)
            return path.parent if path is not None and path.name == V2_LEAF else path
    return None


def _v2_enable(parent: Path) -> None:
    """Hand memory and pids to ``parent``'s children. A service's delegated
    cgroup (systemd ``Delegate=yes``) holds the worker itself, so its
    processes move into a leaf first."""
    if _words(parent / "cgroup.subtree_control") >= _V2_CONTROLLERS:
        return
    leaf = parent / V2_LEAF
    leaf.mkdir(exist_ok=True)
    for pid in _words(parent / "cgroup.procs"):
        with contextlib.suppress(ProcessLookupError, OSError):
            (leaf / "cgroup.procs").write_text(pid)
    (parent / "cgroup.subtree_control").write_text("+memory +pids")


class CgroupV2Confinement(Confinement):
    backend = "cgroup-v2"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.procs_files = (path / "cgroup.procs",)

    def memory_peak(self) -> int | None:
        return _read_int(self.path / "memory.peak")

    def oom_killed(self) -> bool:
        return _read_keyed(self.path / "memory.events").get("oom_kill", 0) > 0

    def process_limit_hit(self) -> bool:
        return _read_keyed(self.path / "pids.events").get("max", 0) > 0

    def remove(self) -> None:
        kill = self.path / "cgroup.kill"  # kernels since 5.14: one write kills all
        if kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
        _kill_and_remove((self.path,), self.procs_files)


@register
class CgroupV2(LimitBackend):
    """A cgroup made under this process's own, in a delegated cgroup2
    hierarchy whose memory and pids controllers are enabled for children.

    UNVERIFIED here: the development host's cgroup2 holds no memory or pids
    controller, so only cgroup v1 runs in its tests."""

    name = "cgroup-v2"

    @classmethod
    def available(cls) -> bool:
        parent = _v2_dir()
        return (
            parent is not None
            and _writable_dir(parent)
            and _words(parent / "cgroup.controllers") >= _V2_CONTROLLERS
        )

    def confine(self, limits: Limits) -> Confinement:
        parent = _v2_dir()
        if parent is None:
            raise LimitsUnavailable("cgroup v2: no cgroup2 hierarchy")
        _v2_enable(parent)
        path = _new_child(parent)
        confinement = CgroupV2Confinement(path)
        try:
            (path / "memory.max").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
            (path / "pids.max").write_text(str(limits.max_processes))
        except OSError:
            confinement.remove()
            raise
        return confinement


# --- rlimits only ------------------------------------------------------------


class RlimitConfinement(Confinement):
    bound_address_space = True
    backend = "rlimit"


@register
class RlimitOnly(LimitBackend):
    """No cgroup: memory bounded per process by RLIMIT_AS, processes not at
    all (root-mapped sandboxes ignore RLIMIT_NPROC). A last resort; ``choose``
    warns."""

    name = "rlimit"

    @classmethod
    def available(cls) -> bool:
        return True

    def confine(self, limits: Limits) -> Confinement:
        return RlimitConfinement()
