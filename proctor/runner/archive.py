"""Inspecting an uploaded checkpoint archive without unpacking it.

Tar (plain, gzip, bzip2, xz) and zip archives are read as streams: nothing
is written to disk, nothing is imported or run. Every member is checked the
way an extractor that trusts nobody would check it, so that the runner (a
later service, on another machine) can unpack the archive safely:

* names: no absolute paths (``/x``, ``C:x``), no ``..`` components, no
  backslashes or NUL characters; ``./`` (what ``tar -C dir .`` writes) is
  the archive's root and ``./x`` is ``x``; no path may be defined twice
  (an extractor would overwrite the first, e.g. re-point a link that other
  links were checked through);
* types: regular files, folders, and links only; no devices, FIFOs or
  sparse files;
* links: a symbolic link must resolve inside the archive, following the
  links the archive has already defined (so ``a -> b/..`` chains cannot
  climb out), and once the walk is complete every link is checked again
  against the final tree (a link defined later can change where an earlier
  one leads); a hard link must name an earlier file of the archive; no
  member may be written through a link;
* sizes: the sum of the files' sizes, the number of entries, and the ratio
  of unpacked to packed bytes are limited (decompression bombs); the
  decompressor is stopped as soon as a limit is crossed, and every zip
  member is read to the end so its CRC is checked;
* ``policy.toml`` is found at the top level (or in the archive's single top
  folder) and its bytes returned for validation.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

from proctor.runner.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES

# below this many unpacked bytes the ratio is not checked: a tiny tar of text
# files compresses 50:1 and is no bomb
RATIO_FLOOR_BYTES = 1 << 20
_READ = 1 << 20
_MAX_LINK_HOPS = 40
_MAX_NAME = 4096
# the normalized name of the archive's root (the ``./`` entry of ``tar -C dir .``)
ROOT = ""


class ArchiveRejected(ValueError):
    """The archive is unsafe or unreadable; the message says why, for the submitter."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_unpacked_bytes: int
    max_files: int
    max_ratio: float


@dataclass(frozen=True)
class ArchiveSummary:
    format: str  # tar | tar.gz | tar.bz2 | tar.xz | zip
    files: int
    folders: int
    links: int
    unpacked_bytes: int  # sum of the regular files' sizes
    members: tuple[str, ...]  # every entry's normalized path
    manifest_root: str  # the folder holding policy.toml ("" for the top level)
    manifest: bytes

    def public(self) -> dict[str, object]:
        return {
            "format": self.format,
            "files": self.files,
            "folders": self.folders,
            "links": self.links,
            "unpacked_bytes": self.unpacked_bytes,
            "manifest_root": self.manifest_root,
        }


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def detect_format(head: bytes) -> str | None:
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    if head.startswith(b"BZh"):
        return "tar.bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "tar.xz"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    return None


# -- names and links ----------------------------------------------------------
def _check_name(name: str) -> str:
    """The member's normalized path (``ROOT`` for ``.`` and ``./``), or
    ArchiveRejected."""
    if not name:
        raise ArchiveRejected("an archive entry has an empty name")
    shown = name if len(name) < 200 else name[:200] + "…"
    if len(name) > _MAX_NAME:
        raise ArchiveRejected(f"'{shown}': the name is longer than {_MAX_NAME} characters")
    if "\x00" in name:
        raise ArchiveRejected(f"'{shown}': the name contains a NUL character")
    if "\\" in name:
        raise ArchiveRejected(f"'{shown}': the name contains '\\' (use '/' between folders)")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise ArchiveRejected(f"'{shown}' is an absolute path; archive entries must be relative")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveRejected(f"'{shown}' points outside the archive ('..' in its path)")
    return "/".join(parts)  # ROOT when only "." and "/" were left


@dataclass
class _Tree:
    """What an extractor would have built so far: which paths are links."""

    symlinks: dict[str, str] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    defined: set[str] = field(default_factory=set)  # every entry's path, whatever its kind

    def define(self, path: str) -> None:
        """Each path once: a second entry would replace the first on
        extraction (a link re-pointed after others were checked through it)."""
        if path in self.defined:
            shown = path or "./"
            raise ArchiveRejected(
                f"'{shown}' appears more than once in the archive; each path may be defined once"
            )
        self.defined.add(path)

    def resolve(self, start: list[str], target: str, what: str) -> list[str]:
        """Walk ``target`` from the folder ``start``, following the archive's own
        links; ArchiveRejected when the walk leaves the archive."""
        outside = f"{what} points to '{target}', outside the archive"
        if target.startswith("/") or re.match(r"^[A-Za-z]:", target):
            raise ArchiveRejected(outside)
        stack = list(start)
        pending = [p for p in target.split("/")]
        hops = 0
        while pending:
            comp = pending.pop(0)
            if comp in ("", "."):
                continue
            if comp == "..":
                if not stack:
                    raise ArchiveRejected(outside)
                stack.pop()
                continue
            stack.append(comp)
            link = self.symlinks.get("/".join(stack))
            if link is not None:
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise ArchiveRejected(f"{what}: too many levels of links (a loop?)")
                if link.startswith("/"):
                    raise ArchiveRejected(outside)
                stack.pop()
                pending = link.split("/") + pending
        return stack

    def check_parent(self, path: str) -> None:
        """A member must not be written through a link (``l/x`` with ``l`` a link)."""
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.symlinks:
                raise ArchiveRejected(
                    f"'{path}' is written through the link '{'/'.join(parts[:i])}'"
                )

    def add_symlink(self, path: str, target: str) -> None:
        what = f"the link '{path}'"
        if not target:
            raise ArchiveRejected(f"{what} has an empty target")
        if "\x00" in target or "\\" in target:
            raise ArchiveRejected(f"{what} has a target with '\\' or NUL characters")
        parent = path.split("/")[:-1]
        self.resolve(parent, target, what)
        self.symlinks[path] = target

    def check_final(self) -> None:
        """Every link again, against the complete tree: a link defined after
        another may change where the other leads (``esc -> x/../a``, then
        ``x -> .``), and no entry may lie beneath a link defined after it."""
        for path, target in self.symlinks.items():
            self.resolve(path.split("/")[:-1], target, f"the link '{path}'")
        for path in self.defined:
            self.check_parent(path)


# -- the walk -----------------------------------------------------------------
@dataclass
class _Walk:
    limits: ArchiveLimits
    packed_size: int
    tree: _Tree = field(default_factory=_Tree)
    members: list[str] = field(default_factory=list)
    files: int = 0
    folders: int = 0
    links: int = 0
    unpacked: int = 0
    manifests: dict[str, bytes] = field(default_factory=dict)

    def count_entry(self) -> None:
        if len(self.members) >= self.limits.max_files:
            raise ArchiveRejected(
                f"the archive holds more than {self.limits.max_files} entries "
                f"(the limit is {self.limits.max_files})"
            )

    def add_size(self, size: int, name: str) -> None:
        if size < 0:
            raise ArchiveRejected(f"'{name}' declares a negative size")
        self.unpacked += size
        self.check_totals()

    def check_totals(self, unpacked: int | None = None, packed: int | None = None) -> None:
        total = self.unpacked if unpacked is None else unpacked
        limit = self.limits.max_unpacked_bytes
        if total > limit:
            raise ArchiveRejected(
                f"the archive unpacks to more than {human_bytes(limit)} "
                f"(the limit is {human_bytes(limit)})"
            )
        base = max(1, self.packed_size if packed is None else packed)
        if total > RATIO_FLOOR_BYTES and total / base > self.limits.max_ratio:
            raise ArchiveRejected(
                f"the archive unpacks to {human_bytes(total)} from {human_bytes(base)} "
                f"(ratio {total / base:.0f}:1, the limit is {self.limits.max_ratio:.0f}:1): "
                "refused as a decompression bomb"
            )

    def note_manifest(self, path: str, data: bytes) -> None:
        if path.count("/") <= 1 and posixpath.basename(path) == MANIFEST_NAME:
            self.manifests[path] = data

    def summary(self, fmt: str) -> ArchiveSummary:
        root, manifest = self._find_manifest()
        return ArchiveSummary(
            format=fmt,
            files=self.files,
            folders=self.folders,
            links=self.links,
            unpacked_bytes=self.unpacked,
            members=tuple(self.members),
            manifest_root=root,
            manifest=manifest,
        )

    def _find_manifest(self) -> tuple[str, bytes]:
        if MANIFEST_NAME in self.manifests:
            return "", self.manifests[MANIFEST_NAME]
        tops = {m.split("/", 1)[0] for m in self.members}
        if len(tops) == 1:
            (top,) = tops
            path = f"{top}/{MANIFEST_NAME}"
            if path in self.manifests:
                return top, self.manifests[path]
        raise ArchiveRejected(
            f"no {MANIFEST_NAME} at the top of the archive (or of its single top folder): "
            "every checkpoint needs one (see the manifest schema)"
        )


def _read_manifest(stream: BinaryIO, name: str) -> bytes:
    data = stream.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ArchiveRejected(f"'{name}' is larger than {MAX_MANIFEST_BYTES} bytes")
    return data


class _CountingReader(io.RawIOBase):
    """Reads a decompressing stream and stops it as soon as it has produced
    more than the walk allows (so a bomb is never fully inflated)."""

    def __init__(self, inner: BinaryIO, raw: BinaryIO, walk: _Walk, limit: int) -> None:
        self.inner = inner
        self.raw = raw
        self.walk = walk
        self.limit = limit
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.inner.read(min(len(buffer), _READ))
        n = len(data)
        buffer[:n] = data
        self.produced += n
        if self.produced > self.limit:
            self.walk.check_totals(unpacked=self.walk.limits.max_unpacked_bytes + 1)
        self.walk.check_totals(unpacked=self.produced, packed=self.raw.tell())
        return n


def _walk_tar(path: Path, fmt: str, walk: _Walk) -> None:
    with path.open("rb") as raw, contextlib.ExitStack() as stack:
        stream: BinaryIO
        if fmt == "tar":
            stream = raw
        else:
            inner: BinaryIO
            if fmt == "tar.gz":
                inner = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
            elif fmt == "tar.bz2":
                inner = stack.enter_context(bz2.BZ2File(raw, mode="rb"))
            else:
                inner = stack.enter_context(lzma.LZMAFile(raw, mode="rb"))
            # the tar stream: the files plus a header per entry and padding
            limit = walk.limits.max_unpacked_bytes + 1536 * walk.limits.max_files + (1 << 20)
            stream = io.BufferedReader(_CountingReader(inner, raw, walk, limit), _READ)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    _tar_member(tar, member, walk)
        except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
            raise ArchiveRejected(f"not a readable {fmt} archive ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:200]


def _tar_member(tar: tarfile.TarFile, member: tarfile.TarInfo, walk: _Walk) -> None:
    walk.count_entry()
    name = _check_name(member.name)
    if name == ROOT:
        _root_entry(member.isdir(), member.name, walk)
        return
    walk.tree.check_parent(name)
    walk.tree.define(name)
    if member.isdev() or member.isfifo():
        kind = (
            "a character device"
            if member.ischr()
            else "a block device"
            if member.isblk()
            else "a FIFO"
        )
        raise ArchiveRejected(
            f"'{name}' is {kind}; archives may hold only files, folders and links"
        )
    if member.issparse():
        raise ArchiveRejected(f"'{name}' is a sparse file; store it as a regular file")
    if member.issym():
        walk.tree.add_symlink(name, member.linkname)
        walk.links += 1
    elif member.islnk():
        try:
            target = _check_name(member.linkname)
        except ArchiveRejected:
            target = ""
        if target not in walk.tree.files:
            raise ArchiveRejected(
                f"'{name}' is a hard link to '{member.linkname}', which is not an earlier "
                "file of the archive"
            )
        walk.links += 1
    elif member.isdir():
        walk.folders += 1
    elif member.isreg():
        walk.add_size(member.size, name)
        walk.files += 1
        walk.tree.files.add(name)
        if name.count("/") <= 1 and posixpath.basename(name) == MANIFEST_NAME:
            extracted = tar.extractfile(member)
            if extracted is not None:
                walk.note_manifest(name, _read_manifest(extracted, name))
    else:
        raise ArchiveRejected(f"'{name}' has an unsupported entry type ({member.type!r})")
    walk.members.append(name)


def _root_entry(is_dir: bool, raw_name: str, walk: _Walk) -> None:
    """``.`` or ``./``: the folder the archive unpacks into, nothing to
    create; anything but a folder there would replace it."""
    if not is_dir:
        raise ArchiveRejected(
            f"'{raw_name}' names the archive's root; only a folder entry may name it"
        )
    walk.tree.define(ROOT)


def _walk_zip(path: Path, walk: _Walk) -> None:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArchiveRejected(f"not a readable zip archive ({_reason(exc)})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > walk.limits.max_files:
            raise ArchiveRejected(
                f"the archive holds {len(infos)} entries (the limit is {walk.limits.max_files})"
            )
        # the declared sizes first: a bomb is refused before anything is inflated
        declared = sum(max(0, i.file_size) for i in infos if not i.is_dir())
        walk.check_totals(unpacked=declared)
        for info in infos:
            _zip_member(archive, info, walk)


def _zip_mode(info: zipfile.ZipInfo) -> int:
    # Unix permissions live in the high half of external_attr (create_system 3)
    return (info.external_attr >> 16) & 0xFFFF if info.create_system == 3 else 0


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, walk: _Walk) -> None:
    walk.count_entry()
    name = _check_name(info.filename)
    if name == ROOT:
        _root_entry(info.is_dir() or stat.S_IFMT(_zip_mode(info)) == stat.S_IFDIR, name, walk)
        return
    walk.tree.check_parent(name)
    walk.tree.define(name)
    if info.flag_bits & 0x1:
        raise ArchiveRejected(f"'{name}' is encrypted; upload an unencrypted archive")
    mode = _zip_mode(info)
    ftype = stat.S_IFMT(mode)
    if ftype and ftype not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK):
        raise ArchiveRejected(
            f"'{name}' is a device, FIFO or socket; archives may hold only files, folders and links"
        )
    if info.is_dir() or ftype == stat.S_IFDIR:
        walk.folders += 1
        walk.members.append(name)
        return
    if ftype == stat.S_IFLNK:
        if info.file_size > _MAX_NAME:
            raise ArchiveRejected(f"the link '{name}' has a target longer than {_MAX_NAME}")
        target = _read_zip(archive, info, name, walk, keep=True).decode("utf-8", "replace")
        walk.tree.add_symlink(name, target)
        walk.links += 1
        walk.members.append(name)
        return
    keep = name.count("/") <= 1 and posixpath.basename(name) == MANIFEST_NAME
    if keep and info.file_size > MAX_MANIFEST_BYTES:
        raise ArchiveRejected(f"'{name}' is larger than {MAX_MANIFEST_BYTES} bytes")
    data = _read_zip(archive, info, name, walk, keep=keep)
    walk.files += 1
    walk.tree.files.add(name)
    if keep:
        walk.note_manifest(name, data)
    walk.members.append(name)


def _read_zip(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, walk: _Walk, *, keep: bool
) -> bytes:
    """Inflate one member to its end (the CRC is checked there), counting what
    comes out; returns the bytes only when ``keep``."""
    kept = bytearray()
    produced = 0
    try:
        with archive.open(info) as f:
            while block := f.read(_READ):
                produced += len(block)
                walk.check_totals(unpacked=walk.unpacked + produced)
                if keep:
                    kept += block
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, zlib.error) as exc:
        raise ArchiveRejected(f"'{name}' cannot be read ({_reason(exc)})") from None
    if produced != info.file_size:
        raise ArchiveRejected(f"'{name}' unpacks to {produced} bytes but declares {info.file_size}")
    walk.add_size(produced, name)
    return bytes(kept)


def inspect_archive(path: Path, limits: ArchiveLimits) -> ArchiveSummary:
    """Check the archive at ``path`` (see the module's docstring); raises
    ArchiveRejected with a message meant for the submitter."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(512)
    fmt = detect_format(head)
    if fmt is None:
        raise ArchiveRejected(
            "not a tar, tar.gz, tar.bz2, tar.xz or zip archive: pack the checkpoint folder "
            "with its policy.toml into one of these"
        )
    walk = _Walk(limits=limits, packed_size=size)
    if fmt == "zip":
        _walk_zip(path, walk)
    else:
        _walk_tar(path, fmt, walk)
    if not walk.members:
        raise ArchiveRejected("the archive is empty")
    walk.tree.check_final()
    return walk.summary(fmt)


# -- reading one member, unpacking --------------------------------------------
# what a framework's upload check may read of one member (a config file, or
# the head of a weights file)
MEMBER_READ_BYTES = 1 << 20
# an unpacked file's permissions: executable only if the archive said so
# owner only: a submitter's weights are theirs (no other local account
# reads them); the sandbox reads them as the same host uid, mapped through
# its user namespace, so it needs no group or other bits
_FILE_MODE = 0o600
_EXEC_MODE = 0o700
_DIR_MODE = 0o700


def _open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r|*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveRejected(f"not a readable tar archive ({_reason(exc)})") from None


def read_member(path: Path, member: str, *, max_bytes: int = MEMBER_READ_BYTES) -> bytes | None:
    """The first ``max_bytes`` of the regular file ``member`` (a normalized
    path, as in ``ArchiveSummary.members``) of an archive ``inspect_archive``
    accepted, read from the stream without unpacking; None when the archive
    has no regular file of that name (a folder, a link or nothing)."""
    with path.open("rb") as f:
        fmt = detect_format(f.read(512))
    try:
        if fmt == "zip":
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    if _check_name(info.filename) == member:
                        if info.is_dir() or stat.S_IFMT(_zip_mode(info)) not in (0, stat.S_IFREG):
                            return None
                        with archive.open(info) as data:
                            return data.read(max_bytes)
            return None
        with _open_tar(path) as tar:
            for entry in tar:
                if _check_name(entry.name) == member:
                    extracted = tar.extractfile(entry) if entry.isreg() else None
                    return None if extracted is None else extracted.read(max_bytes)
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise ArchiveRejected(f"'{member}' cannot be read ({_reason(exc)})") from None
    return None


@dataclass
class _Unpacker:
    """Writes the entries of an inspected archive into ``dest``: folders and
    regular files only created there (never through a link, never over an
    existing path), links re-created as the inspection allowed them (hard
    links to an earlier file of the archive), and no permission bits beyond 0o700/0o600."""

    dest: Path
    budget: int  # bytes the inspection counted: more means the file changed
    written: int = 0

    def target(self, name: str) -> Path:
        return self.dest.joinpath(*name.split("/"))

    def folder(self, name: str) -> None:
        self.target(name).mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)

    def file(self, name: str, data: IO[bytes], executable: bool) -> None:
        out = self.target(name)
        out.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        mode = _EXEC_MODE if executable else _FILE_MODE
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(out, flags, mode), "wb") as f:
            while block := data.read(_READ):
                self.written += len(block)
                if self.written > self.budget:
                    raise ArchiveRejected("the archive changed after it was checked")
                f.write(block)
            os.fchmod(f.fileno(), mode)  # exactly: the umask narrowed O_CREAT's mode

    def link(self, name: str, target: str) -> None:
        out = self.target(name)
        out.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        out.symlink_to(target)

    def hardlink(self, name: str, source: str) -> None:
        # a link, not a copy: the inspection counted the file's bytes once,
        # and a hundred copies of it would be a hundred times the disk
        out = self.target(name)
        out.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        os.link(self.target(source), out, follow_symlinks=False)


def _unpack_tar(path: Path, out: _Unpacker) -> None:
    with _open_tar(path) as tar:
        for entry in tar:
            name = _check_name(entry.name)
            if name == ROOT:
                continue
            if entry.isdir():
                out.folder(name)
            elif entry.issym():
                out.link(name, entry.linkname)
            elif entry.islnk():
                out.hardlink(name, _check_name(entry.linkname))
            elif entry.isreg():
                data = tar.extractfile(entry)
                if data is None:
                    raise ArchiveRejected(f"'{name}' cannot be read")
                out.file(name, data, executable=bool(entry.mode & 0o111))
            else:
                raise ArchiveRejected(f"'{name}' has an unsupported entry type")


def _unpack_zip(path: Path, out: _Unpacker) -> None:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = _check_name(info.filename)
            mode = _zip_mode(info)
            if name == ROOT:
                continue
            if info.is_dir() or stat.S_IFMT(mode) == stat.S_IFDIR:
                out.folder(name)
            elif stat.S_IFMT(mode) == stat.S_IFLNK:
                out.link(name, archive.read(info).decode("utf-8", "replace"))
            else:
                with archive.open(info) as data:
                    out.file(name, data, executable=bool(mode & 0o111))


def unpack_archive(path: Path, dest: Path, limits: ArchiveLimits) -> ArchiveSummary:
    """Unpack the archive at ``path`` into the empty folder ``dest`` (created
    if missing), after checking it again as at upload (``inspect_archive``):
    the runner host trusts nothing it did not check itself. The checkpoint's
    folder is ``dest / summary.manifest_root``. On any failure ``dest`` may
    hold part of the archive: the caller removes it."""
    summary = inspect_archive(path, limits)
    dest.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty: unpack into a fresh folder")
    out = _Unpacker(dest, budget=summary.unpacked_bytes)
    try:
        if summary.format == "zip":
            _unpack_zip(path, out)
        else:
            _unpack_tar(path, out)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise ArchiveRejected(f"the archive cannot be unpacked ({_reason(exc)})") from None
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
        # a file and a folder of one name ("a", then "a/b"): nothing is overwritten
        raise ArchiveRejected(
            f"the archive names a path as both a file and a folder ({type(exc).__name__})"
        ) from None
    return summary
