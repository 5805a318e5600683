"""Reading one member of an archive without unpacking it (the upload's
framework checks), and unpacking one on the runner host: checked again,
files and folders only inside the destination, links as the inspection
allowed them, no permission bits beyond 0o700/0o600 (owner only)."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from proctor.runner.archive import (
    ArchiveLimits,
    ArchiveRejected,
    inspect_archive,
    read_member,
    unpack_archive,
)
from tests.web.submissions_support import manifest, tar_bytes, zip_bytes

LIMITS = ArchiveLimits(max_unpacked_bytes=8 * 2**20, max_files=100, max_ratio=1000.0)


def _write(tmp_path: Path, data: bytes, name: str = "ckpt.tar.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _tar_with_modes(entries: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["tar.gz", "tar.xz", "zip"])
def test_one_member_is_read_bounded_without_unpacking(tmp_path: Path, fmt: str) -> None:
    files = [
        ("acme/policy.toml", manifest()),
        ("acme/checkpoint/config.json", b'{"type": "act"}'),
        ("acme/checkpoint/model.safetensors", b"w" * 5000),
    ]
    if fmt == "zip":
        data = zip_bytes(files, symlinks={"acme/checkpoint/latest": "model.safetensors"})
    else:
        entries = [(n, "file", b) for n, b in files]
        entries.append(("acme/checkpoint/latest", "symlink", "model.safetensors"))
        data = tar_bytes(entries, mode="w:gz" if fmt == "tar.gz" else "w:xz")
    path = _write(tmp_path, data, f"ckpt.{fmt}")
    inspect_archive(path, LIMITS)
    assert read_member(path, "acme/checkpoint/config.json") == b'{"type": "act"}'
    assert read_member(path, "acme/checkpoint/model.safetensors", max_bytes=10) == b"w" * 10
    assert read_member(path, "acme/checkpoint/latest") is None  # a link, not a file
    assert read_member(path, "acme/checkpoint") is None
    assert read_member(path, "acme/nothing.json") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ckpt.{fmt}"]  # nothing unpacked


def test_an_archive_is_unpacked_with_plain_permissions(tmp_path: Path) -> None:
    data = tar_bytes(
        [
            ("./", "dir", None),
            ("policy.toml", "file", manifest()),
            ("ckpt", "dir", None),
            ("ckpt/model.safetensors", "file", b"weights"),
            ("ckpt/latest", "symlink", "model.safetensors"),
            ("ckpt/copy", "hardlink", "ckpt/model.safetensors"),
        ]
    )
    dest = tmp_path / "out"
    summary = unpack_archive(_write(tmp_path, data), dest, LIMITS)
    assert summary.manifest_root == ""
    assert (dest / "policy.toml").read_bytes() == manifest()
    assert (dest / "ckpt" / "latest").is_symlink()
    assert (dest / "ckpt" / "latest").read_bytes() == b"weights"
    copy = dest / "ckpt" / "copy"
    assert not copy.is_symlink() and copy.read_bytes() == b"weights"
    assert copy.stat().st_ino == (dest / "ckpt" / "model.safetensors").stat().st_ino
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert stat.S_IMODE((dest / "ckpt").stat().st_mode) == 0o700


def test_setuid_and_world_writable_bits_are_dropped(tmp_path: Path) -> None:
    data = _tar_with_modes(
        [
            ("policy.toml", manifest(), 0o666),
            ("serve.sh", b"#!/bin/sh\n", 0o4777),
            ("data.bin", b"x", 0o600),
        ]
    )
    dest = tmp_path / "out"
    unpack_archive(_write(tmp_path, data), dest, LIMITS)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in dest.iterdir()}
    assert modes == {"policy.toml": 0o600, "serve.sh": 0o700, "data.bin": 0o600}


def test_a_zip_is_unpacked_too(tmp_path: Path) -> None:
    data = zip_bytes(
        [("acme/policy.toml", manifest()), ("acme/ckpt/w", b"w" * 100)],
        symlinks={"acme/ckpt/latest": "w"},
    )
    dest = tmp_path / "out"
    summary = unpack_archive(_write(tmp_path, data, "ckpt.zip"), dest, LIMITS)
    assert summary.manifest_root == "acme" and summary.format == "zip"
    assert (dest / "acme" / "ckpt" / "latest").read_bytes() == b"w" * 100


def test_an_unsafe_archive_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    data = tar_bytes(
        [("policy.toml", "file", manifest()), ("escape", "symlink", "../../etc/passwd")]
    )
    dest = tmp_path / "out"
    with pytest.raises(ArchiveRejected, match="outside the archive"):
        unpack_archive(_write(tmp_path, data), dest, LIMITS)
    assert not dest.exists() or not any(dest.iterdir())


def test_unpacking_needs_an_empty_folder(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "policy.toml").write_text("mine")
    data = tar_bytes([("policy.toml", "file", manifest())])
    with pytest.raises(ValueError, match="not empty"):
        unpack_archive(_write(tmp_path, data), dest, LIMITS)
    assert (dest / "policy.toml").read_text() == "mine"


def test_a_path_that_is_both_a_file_and_a_folder_overwrites_nothing(tmp_path: Path) -> None:
    data = tar_bytes(
        [("policy.toml", "file", manifest()), ("a/b", "file", b"inner"), ("a", "file", b"outer")]
    )
    dest = tmp_path / "out"
    with pytest.raises(ArchiveRejected, match="both a file and a folder"):
        unpack_archive(_write(tmp_path, data), dest, LIMITS)
    assert (dest / "a" / "b").read_bytes() == b"inner"
