"""Checkpoint uploads over HTTP: the resumable protocol, and every way an
upload is refused — each with a message that names what is wrong, and
nothing left behind (no artifact, no rows, no staged or temporary files)."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.models import Artifact, ObjectType, Policy, Submission, UploadSession
from proctor.core.domain import ArtifactKind, ConformanceStatus, Role, SubmissionKind
from tests.browser import LiveServer
from tests.web.conftest import Web
from tests.web.submissions_support import (
    MAX_UPLOAD,
    NOTHING,
    audit_actions,
    begin,
    good_checkpoint,
    leftovers,
    lerobot_config,
    manifest,
    noise,
    portal_app,
    portal_settings,
    put,
    safetensors,
    sha,
    submitter,
    tar_bytes,
    upload,
    zip_bytes,
)


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


def _problems(r: Any) -> list[tuple[list[str], str]]:
    assert r.status_code == 422, r.text
    return [(d["loc"], d["msg"]) for d in r.json()["detail"]]


def test_a_checkpoint_is_uploaded_in_chunks_stored_and_submitted(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    data = good_checkpoint()
    r = upload(c, h, data, chunk=1000)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["kind"] == "checkpoint" and out["policy_name"] == "acme-diffusion"
    assert out["checkpoint_sha256"] == sha(data) and out["checkpoint_size_bytes"] == len(data)
    assert out["archive"]["format"] == "tar.gz" and out["archive"]["files"] == 3
    assert out["manifest"]["runner"] == {
        "framework": "lerobot",
        "policy_path": "checkpoint",
        "lerobot_version": None,
    }
    assert out["conformance_status"] == "pending"
    assert "runner" in out["conformance_report"]["summary"]  # says why it waits
    # stored content-addressed, verified, with its Artifact row
    store = open_store(portal.settings.artifacts_location)
    assert store.read_bytes(sha(data)) == data
    with portal.db() as s:
        sub = s.get(Submission, out["id"])
        assert sub is not None and sub.kind == SubmissionKind.checkpoint
        art = s.get(Artifact, sub.checkpoint_artifact_id)
        assert art is not None and art.kind == ArtifactKind.checkpoint and art.sha256 == sha(data)
        assert art.details["filename"] == "ckpt.tar.gz"
        assert sub.conformance_status == ConformanceStatus.pending
        assert s.scalar(sa.select(sa.func.count()).select_from(UploadSession)) == 0
    left = leftovers(portal)
    assert left["staged_files"] == [] and left["store_tmp"] == []
    assert "submission.checkpoint" in audit_actions(portal)
    # a second version of the same policy is a new submission of the same policy
    r2 = upload(c, h, good_checkpoint(weights=noise(4096, seed=2)))
    assert r2.status_code == 201 and r2.json()["policy_id"] == out["policy_id"]
    # the very same bytes again are refused (and that upload is gone too)
    r3 = upload(c, h, data)
    assert _problems(r3) == [
        (
            ["upload", "sha256"],
            f"this checkpoint is already submission {out['id']} of 'acme-diffusion'",
        )
    ]
    assert leftovers(portal)["upload_rows"] == 0


def test_the_offset_protocol_refuses_gaps_overlaps_and_excess(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    data = good_checkpoint()
    uid = begin(c, h, data).json()["id"]
    assert put(c, h, uid, 0, data[:500]).json()["offset"] == 500
    # a gap or a replay: 409 with where to resume
    for wrong in (0, 400, 900):
        r = put(c, h, uid, wrong, data[wrong : wrong + 10])
        assert r.status_code == 409, wrong
        assert (
            r.json()["detail"]
            == "offset: the upload is at byte 500; send the next bytes from there"
        )
        assert r.headers["upload-offset"] == "500"
    # more than is left: refused whole, the offset stays
    r = put(c, h, uid, 500, data[500:] + b"extra")
    assert r.status_code == 413 and "at most" in r.json()["detail"]
    assert c.get(f"/api/uploads/{uid}", headers=h).json()["offset"] == 500
    # completing early says where it stands
    r = c.post(f"/api/uploads/{uid}/complete", json={"sha256": sha(data)}, headers=h)
    assert r.status_code == 409 and "at byte 500" in r.json()["detail"]
    assert put(c, h, uid, 500, data[500:]).json()["complete"] is True
    assert (
        c.post(f"/api/uploads/{uid}/complete", json={"sha256": sha(data)}, headers=h).status_code
        == 201
    )


def test_an_oversized_checkpoint_is_refused_before_a_byte_is_stored(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    r = c.post(
        "/api/uploads", json={"filename": "big.tar", "size_bytes": MAX_UPLOAD + 1}, headers=h
    )
    assert r.status_code == 413
    assert r.json()["detail"] == (
        "size_bytes: the checkpoint is 2.0 MiB; this server accepts at most 2.0 MiB"
    )
    assert leftovers(portal) == NOTHING


def test_a_wrong_sha256_discards_the_upload(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    data = good_checkpoint()
    r = upload(c, h, data, declared="0" * 64)
    assert _problems(r) == [
        (
            ["upload", "sha256"],
            f"sha256: the uploaded bytes hash to {sha(data)}, not the declared {'0' * 64}; "
            "the upload was discarded (was the file changed or corrupted in transit?)",
        )
    ]
    assert leftovers(portal) == NOTHING
    assert audit_actions(portal)[-1] == "upload.rejected"


def test_the_sha256_may_be_declared_up_front_and_must_then_agree(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    data = good_checkpoint()
    uid = begin(c, h, data, sha256=sha(data)).json()["id"]
    put(c, h, uid, 0, data)
    r = c.post(f"/api/uploads/{uid}/complete", json={"sha256": "1" * 64}, headers=h)
    assert r.status_code == 422 and "differs from the sha256 declared" in r.text
    r = c.post(f"/api/uploads/{uid}/complete", headers=h)  # the declared one is used
    assert r.status_code == 201, r.text


UNSAFE: list[tuple[str, Callable[[], bytes], str | re.Pattern[str]]] = [
    (
        "dot-dot",
        lambda: tar_bytes(
            [("policy.toml", "file", manifest()), ("../../etc/cron.d/x", "file", b"x")]
        ),
        "archive: '../../etc/cron.d/x' points outside the archive ('..' in its path)",
    ),
    (
        "absolute",
        lambda: tar_bytes([("policy.toml", "file", manifest()), ("/etc/passwd", "file", b"x")]),
        "archive: '/etc/passwd' is an absolute path; archive entries must be relative",
    ),
    (
        "symlink escape",
        lambda: tar_bytes(
            [("policy.toml", "file", manifest()), ("checkpoint", "symlink", "../../../home")]
        ),
        "archive: the link 'checkpoint' points to '../../../home', outside the archive",
    ),
    (
        "symlink chain escape",
        lambda: tar_bytes(
            [
                ("policy.toml", "file", manifest()),
                ("a", "dir", None),
                ("a/up", "symlink", ".."),
                ("a/out", "symlink", "up/../.."),
            ]
        ),
        "archive: the link 'a/out' points to 'up/../..', outside the archive",
    ),
    (
        "written through a link",
        lambda: tar_bytes(
            [
                ("policy.toml", "file", manifest()),
                ("inside", "symlink", "."),
                ("inside/x", "file", b"x"),
            ]
        ),
        "archive: 'inside/x' is written through the link 'inside'",
    ),
    (
        # [M5] x is re-pointed after esc was checked through it: after extraction
        # esc would be /etc/passwd
        "symlink redefined",
        lambda: tar_bytes(
            [
                ("policy.toml", "file", manifest()),
                ("x", "symlink", "p/q/r/s/t/u"),
                ("esc", "symlink", "x/../../../../../../etc/passwd"),
                ("x", "symlink", "."),
            ]
        ),
        "archive: 'x' appears more than once in the archive; each path may be defined once",
    ),
    (
        "zip symlink redefined",
        lambda: zip_bytes(
            [("policy.toml", manifest())],
            symlinks=[
                ("x", "p/q/r/s/t/u"),
                ("esc", "x/../../../../../../etc/passwd"),
                ("x", "."),
            ],
        ),
        "archive: 'x' appears more than once in the archive; each path may be defined once",
    ),
    (
        "file defined twice",
        lambda: tar_bytes(
            [
                ("policy.toml", "file", manifest()),
                ("policy.toml", "file", manifest("someone-else")),
            ]
        ),
        "archive: 'policy.toml' appears more than once in the archive",
    ),
    (
        # esc is fine when checked (x is nothing yet); x -> . defined afterwards
        # makes x/.. the archive's parent: caught when the walk is complete
        "link changed by a later link",
        lambda: tar_bytes(
            [
                ("policy.toml", "file", manifest()),
                ("esc", "symlink", "x/../sibling"),
                ("x", "symlink", "."),
            ]
        ),
        "archive: the link 'esc' points to 'x/../sibling', outside the archive",
    ),
    (
        "zip link changed by a later link",
        lambda: zip_bytes(
            [("policy.toml", manifest())], symlinks=[("esc", "x/../sibling"), ("x", ".")]
        ),
        "archive: the link 'esc' points to 'x/../sibling', outside the archive",
    ),
    (
        "entry beneath a later link",
        lambda: tar_bytes(
            [
                ("policy.toml", "file", manifest()),
                ("d/f", "file", b"x"),
                ("d", "symlink", "."),
            ]
        ),
        "archive: 'd/f' is written through the link 'd'",
    ),
    (
        "the root as a link",
        lambda: tar_bytes([("policy.toml", "file", manifest()), ("./", "symlink", "..")]),
        "archive: './' names the archive's root; only a folder entry may name it",
    ),
    (
        "dot-slash dot-dot",
        lambda: tar_bytes([("./policy.toml", "file", manifest()), ("./../x", "file", b"x")]),
        "archive: './../x' points outside the archive ('..' in its path)",
    ),
    (
        "hard link out",
        lambda: tar_bytes([("policy.toml", "file", manifest()), ("h", "hardlink", "/etc/shadow")]),
        "archive: 'h' is a hard link to '/etc/shadow', which is not an earlier file of the archive",
    ),
    (
        "device",
        lambda: tar_bytes([("policy.toml", "file", manifest()), ("dev/sda", "chardev", None)]),
        "archive: 'dev/sda' is a character device; archives may hold only files, folders and links",
    ),
    (
        "zip symlink escape",
        lambda: zip_bytes([("policy.toml", manifest())], symlinks={"w": "../../outside"}),
        "archive: the link 'w' points to '../../outside', outside the archive",
    ),
    (
        "zip bomb",
        lambda: zip_bytes(
            [("policy.toml", manifest()), ("checkpoint/zeros.bin", bytes(6 * 2**20))]
        ),
        # the packed size depends on zlib's version: the pattern leaves it open
        re.compile(
            r"archive: the archive unpacks to 6\.0 MiB from [\d.]+ KiB \(ratio \d+:1, the limit "
            r"is 100:1\): refused as a decompression bomb"
        ),
    ),
    (
        "tar bomb",
        lambda: tar_bytes(
            [("policy.toml", "file", manifest()), ("zeros", "file", bytes(12 * 2**20))]
        ),
        "archive: the archive unpacks to more than 8.0 MiB (the limit is 8.0 MiB)",
    ),
    (
        "too many files",
        lambda: tar_bytes(
            [("policy.toml", "file", manifest())] + [(f"f{i}", "file", b"x") for i in range(60)]
        ),
        "archive: the archive holds more than 40 entries (the limit is 40)",
    ),
    (
        "not an archive",
        lambda: b"\x89PNG\r\n\x1a\n" + bytes(600),
        "archive: not a tar, tar.gz, tar.bz2, tar.xz or zip archive: pack the checkpoint folder "
        "with its policy.toml into one of these",
    ),
    (
        "truncated tar.gz",
        lambda: good_checkpoint()[:300],
        "archive: not a readable tar.gz archive",
    ),
    (
        "no manifest",
        lambda: tar_bytes([("weights.bin", "file", b"w")]),
        "archive: no policy.toml at the top of the archive (or of its single top folder): every "
        "checkpoint needs one (see the manifest schema)",
    ),
]


# the archive checks do not touch the database: one backend is enough here (that
# a refusal leaves no row behind is checked on both by the sha256 and manifest tests)
@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("case", UNSAFE, ids=[c[0] for c in UNSAFE])
def test_an_unsafe_or_unreadable_archive_is_refused_and_nothing_is_left(
    portal: Web, case: tuple[str, Callable[[], bytes], str | re.Pattern[str]]
) -> None:
    _, build, message = case
    h = submitter(portal)
    data = build()
    assert len(data) < MAX_UPLOAD
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert len(problems) == 1
    loc, msg = problems[0]
    assert loc == ["upload", "archive"]
    if isinstance(message, re.Pattern):
        assert message.fullmatch(msg), msg
    else:
        assert msg.startswith(message), msg
    assert leftovers(portal) == NOTHING


def test_a_malformed_manifest_is_refused_field_by_field(portal: Web) -> None:
    h = submitter(portal)
    bad = (
        manifest()
        .replace(b'framework = "lerobot"', b'framework = "tensorflow"')
        .replace(b"chunk_length = 10", b"chunk_length = 0\nchunk_lenght = 10")
        .replace(b'action_space = "joint_velocity"', b'action_space = "joints"')
    )
    data = tar_bytes([("policy.toml", "file", bad), ("checkpoint/w", "file", b"w")])
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert problems == [
        (
            ["policy.toml", "runner", "framework"],
            "policy.toml: runner.framework: 'tensorflow' is not one of lerobot, openpi, command",
        ),
        (
            ["policy.toml", "policy", "action_space"],
            "policy.toml: policy.action_space: 'joints' is not one of joint_position, "
            "joint_velocity, cartesian_position, cartesian_velocity",
        ),
        (
            ["policy.toml", "policy", "chunk_length"],
            "policy.toml: policy.chunk_length: Input should be greater than or equal to 1",
        ),
        (
            ["policy.toml", "policy", "chunk_lenght"],
            "policy.toml: policy.chunk_lenght: is not a field of policy.toml (check the spelling)",
        ),
    ]
    assert leftovers(portal) == NOTHING


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"name = [", "policy.toml is not valid TOML"),
        (b"\xff\xfe", "policy.toml is not UTF-8 text"),
        (
            manifest().replace(b'policy_path = "checkpoint"', b'policy_path = "ckpt"'),
            "policy.toml: runner.policy_path: 'ckpt' is not in the archive",
        ),
        (
            manifest().replace(b'name = "acme-diffusion"', b'name = "x"'),
            "policy.toml: name: 3–128 characters",
        ),
        (
            manifest().replace(b"chunk_length = 10", b'chunk_length = 10\naction_units = "rad/s"'),
            "policy.toml: policy.action_units: must be one of si, droid",
        ),
    ],
)
def test_manifest_problems_name_the_field(portal: Web, text: bytes, expected: str) -> None:
    h = submitter(portal)
    data = tar_bytes([("policy.toml", "file", text), ("checkpoint/w", "file", b"w")])
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert problems[0][1].startswith(expected), problems
    assert leftovers(portal) == NOTHING


@pytest.mark.parametrize(
    "nested",
    [
        b"x = " + b"[" * 20_000 + b"]" * 20_000,
        b"x = " + b"{a = " * 5_000 + b"1" + b"}" * 5_000,
    ],
    ids=["arrays", "inline tables"],
)
def test_a_deeply_nested_manifest_is_refused_and_the_upload_discarded(
    portal: Web, nested: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """[M7] tomllib recurses once per level: the nesting is bounded before it
    parses, so this is a 422 (not a 500 with a 3000-line traceback) and the
    upload does not linger against the open-upload cap."""
    h = submitter(portal)
    data = tar_bytes([("policy.toml", "file", manifest() + nested + b"\n")])
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert problems == [
        (["policy.toml"], "policy.toml nests arrays or tables more than 32 levels deep")
    ]
    assert leftovers(portal) == NOTHING
    assert audit_actions(portal)[-1] == "upload.rejected"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_manifest_in_the_single_top_folder_and_a_zip_are_accepted(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    nested = tar_bytes(
        [
            ("acme/policy.toml", "file", manifest()),
            ("acme/checkpoint/config.json", "file", lerobot_config()),
            ("acme/checkpoint/model.safetensors", "file", safetensors(b"p")),
            ("acme/checkpoint/latest", "symlink", "model.safetensors"),
        ],
        mode="w:bz2",
    )
    r = upload(c, h, nested, filename="acme.tar.bz2")
    assert r.status_code == 201, r.text
    assert r.json()["archive"]["manifest_root"] == "acme" and r.json()["archive"]["links"] == 1
    z = zip_bytes(
        [
            ("policy.toml", manifest("acme-zip")),
            ("checkpoint/config.json", lerobot_config()),
            ("checkpoint/model.safetensors", safetensors(b"p" * 100)),
        ]
    )
    r = upload(c, h, z, filename="acme.zip")
    assert r.status_code == 201, r.text
    assert r.json()["archive"]["format"] == "zip"


def test_an_archive_of_a_folder_s_contents_is_accepted(portal: Web, tmp_path: Path) -> None:
    """[L13] ``tar czf x.tgz -C dir .`` writes ``./`` and ``./policy.toml``:
    the root entry is the archive's top, ``./x`` is ``x``."""
    folder = tmp_path / "acme"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "policy.toml").write_bytes(manifest())
    (folder / "checkpoint" / "config.json").write_bytes(lerobot_config())
    (folder / "checkpoint" / "model.safetensors").write_bytes(safetensors(noise(4096)))
    (folder / "checkpoint" / "latest").symlink_to("model.safetensors")
    packed = tmp_path / "acme.tar.gz"
    subprocess.run(["tar", "czf", str(packed), "-C", str(folder), "."], check=True)
    data = packed.read_bytes()
    with tarfile.open(packed) as tar:
        assert tar.getnames()[0] == "."  # what tar writes for the folder itself
        assert "./policy.toml" in tar.getnames()
    h = submitter(portal)
    r = upload(portal.client(), h, data)
    assert r.status_code == 201, r.text
    archive = r.json()["archive"]
    assert archive["manifest_root"] == "" and archive["files"] == 3
    assert archive["folders"] == 1 and archive["links"] == 1  # the root is no folder of its own
    zipped = zip_bytes(
        [
            ("./", b""),
            ("./policy.toml", manifest("acme-zip")),
            ("./checkpoint/config.json", lerobot_config()),
            ("./checkpoint/model.safetensors", safetensors(b"p")),
        ]
    )
    r = upload(portal.client(), h, zipped, filename="acme.zip")
    assert r.status_code == 201, r.text
    assert r.json()["archive"]["manifest_root"] == ""


def test_a_name_taken_by_someone_else_is_refused_and_the_upload_discarded(portal: Web) -> None:
    h_ada = submitter(portal, "ada")
    h_bob = submitter(portal, "bob")
    assert upload(portal.client(), h_ada, good_checkpoint("shared-name")).status_code == 201
    before = leftovers(portal)
    r = upload(portal.client(), h_bob, good_checkpoint("shared-name", weights=noise(100, seed=3)))
    assert _problems(r) == [
        (
            ["policy.toml", "name"],
            "policy.toml: name: this policy name is not available; choose another",
        )
    ]
    assert leftovers(portal) == before


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("estimate", "a word the results use for something else"),
        ("Towels-XL", "is the name of an object"),
    ],
)
def test_a_name_the_results_use_is_refused_and_the_upload_discarded(
    portal: Web, name: str, says: str
) -> None:
    with portal.db() as s:
        s.add(ObjectType(name="towels-xl"))
    h_ada = submitter(portal, "ada")
    before = leftovers(portal)
    r = upload(portal.client(), h_ada, good_checkpoint(name))
    [(loc, message)] = _problems(r)
    assert loc == ["policy.toml", "name"] and says in message and name in message, message
    assert leftovers(portal) == before
    with portal.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Policy)) == 0


def test_uploads_are_private_to_their_owner(portal: Web) -> None:
    h_ada = submitter(portal, "ada")
    h_bob = submitter(portal, "bob")
    portal.add_user("root", Role.admin)
    h_root = {"Authorization": f"Bearer {portal.token('root', ('admin',))}"}
    c = portal.client()
    data = good_checkpoint()
    uid = begin(c, h_ada, data).json()["id"]
    for method, path in [
        ("GET", f"/api/uploads/{uid}"),
        ("PUT", f"/api/uploads/{uid}?offset=0"),
        ("POST", f"/api/uploads/{uid}/complete"),
        ("DELETE", f"/api/uploads/{uid}"),
    ]:
        r = c.request(method, path, headers=h_bob, content=b"x" if method == "PUT" else None)
        assert r.status_code == 404 and r.json() == {"detail": "upload not found"}, (method, path)
    assert c.get("/api/uploads", headers=h_bob).json() == []
    assert [u["id"] for u in c.get("/api/uploads", headers=h_ada).json()] == [uid]
    # the admin may look but not write into someone's upload (and has no submitter role)
    assert c.get(f"/api/uploads/{uid}", headers=h_root).status_code == 403
    assert c.delete(f"/api/uploads/{uid}", headers=h_ada).status_code == 204
    assert leftovers(portal) == NOTHING


def test_abandoned_uploads_expire_and_each_submitter_holds_a_few_at_most(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    data = good_checkpoint()
    ids = [begin(c, h, data).json()["id"] for _ in range(4)]
    put(c, h, ids[0], 0, data[:100])
    r = begin(c, h, data)
    assert r.status_code == 409 and "you have 4 unfinished uploads" in r.json()["detail"]
    portal.clock.advance(hours=49)  # past submissions.upload_expiry_hours (48)
    assert begin(c, h, data).status_code == 201  # beginning one cleans the expired ones
    assert len(leftovers(portal)["staged_files"]) == 1
    assert c.get(f"/api/uploads/{ids[0]}", headers=h).status_code == 404


def test_a_lost_staged_file_is_reported_gone(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    uid = begin(c, h, good_checkpoint()).json()["id"]
    (Path(portal.settings.data_dir) / "uploads" / f"{uid}.part").unlink()
    r = c.get(f"/api/uploads/{uid}", headers=h)
    assert r.status_code == 410 and "start the upload again" in r.json()["detail"]
    assert leftovers(portal) == NOTHING


# -- interrupted for real: a socket closed mid-body ------------------------------------
def _send_partial(server: LiveServer, path: str, token: str, total: int, part: bytes) -> None:
    """A PUT that announces ``total`` bytes, sends ``part`` and hangs up."""
    host = urlsplit(server.base_url)
    with socket.create_connection((host.hostname, host.port), timeout=10) as sock:
        head = (
            f"PUT {path} HTTP/1.1\r\nHost: {host.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {total}\r\nConnection: close\r\n\r\n"
        ).encode()
        sock.sendall(head + part)
        # let the server take the bytes in before the line drops (uvicorn reports a
        # disconnect ahead of body bytes it has not handed to the app yet)
        time.sleep(0.5)


def test_an_interrupted_upload_resumes_where_the_connection_dropped(
    start_live_server: Callable[..., LiveServer], web_db_url: str, tmp_path: Path
) -> None:
    import httpx

    settings = portal_settings(web_db_url, tmp_path / "live")
    server = start_live_server(
        database_url=web_db_url,
        data_dir=settings.data_dir,
        encryption_key=settings.encryption_key,
        submissions=settings.submissions.model_dump(),
    )
    server.add_user("ada", Role.submitter)
    from proctor.web.accounts import service as accounts

    with server.db() as s:
        user = accounts.get_user_by_username(s, "ada")
        assert user is not None
        _, token = accounts.create_token(
            session=s,
            user=user,
            name="cli",
            scopes=("submitter",),
            expires_in_days=None,
            allowed_roles=list(Role),
            actor=accounts.Actor(label="test"),
            now=server.app.state.web.clock(),
        )
    h = {"Authorization": f"Bearer {token}"}
    data = good_checkpoint(weights=noise(150_000))
    with httpx.Client(base_url=server.base_url, headers=h, timeout=30) as c:
        uid = c.post("/api/uploads", json={"filename": "c.tgz", "size_bytes": len(data)}).json()[
            "id"
        ]
        sent = 70_000
        _send_partial(server, f"/api/uploads/{uid}?offset=0", token, len(data), data[:sent])
        # the server records what arrived once it sees the disconnect
        deadline = time.monotonic() + 15
        offset = 0
        while time.monotonic() < deadline:
            offset = c.get(f"/api/uploads/{uid}").json()["offset"]
            if offset:
                break
            time.sleep(0.05)
        assert 0 < offset <= sent
        staged = Path(settings.data_dir) / "uploads" / f"{uid}.part"
        assert staged.read_bytes()[:offset] == data[:offset]
        r = c.put(
            f"/api/uploads/{uid}?offset={offset}",
            content=data[offset:],
            headers={"Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 200 and r.json()["complete"] is True
        r = c.post(f"/api/uploads/{uid}/complete", json={"sha256": sha(data)})
        assert r.status_code == 201, r.text
    store = open_store(str(server.settings.artifacts_location))
    assert store.read_bytes(sha(data)) == data
    with server.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Policy)) == 1


# -- the framework's own checks (proctor/runner/frameworks) ---------------------------------
_STATION_INPUTS = {
    "observation.state": [8],
    "observation.images.exterior": [3, 96, 96],
    "observation.images.wrist": [3, 96, 96],
}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            lerobot_config({**_STATION_INPUTS, "observation.environment_state": [4]}),
            (
                ["policy.toml", "runner", "policy_path"],
                "policy.toml: runner.policy_path: config.json: "
                "input_features.observation.environment_state: the station provides no such "
                "observation",
            ),
        ),
        (
            lerobot_config(action=[6]),
            (
                ["policy.toml", "runner", "policy_path"],
                "policy.toml: runner.policy_path: config.json: output_features.action: has "
                "shape [6]; the joint_velocity action space (policy.action_space) needs [8]",
            ),
        ),
        (
            lerobot_config({**_STATION_INPUTS, "observation.images.top": [3, 96, 96]}),
            (
                ["policy.toml", "runner", "policy_path"],
                "policy.toml: runner.policy_path: config.json: "
                "input_features.observation.images.top: the station has no camera 'top'",
            ),
        ),
    ],
    ids=["environment_state", "action [6]", "unknown camera"],
)
def test_a_lerobot_feature_the_station_cannot_provide_is_refused_at_upload(
    portal: Web, config: bytes, expected: tuple[list[str], str]
) -> None:
    h = submitter(portal)
    data = good_checkpoint(config=config)
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert len(problems) == 1, problems
    assert problems[0][0] == expected[0]
    assert problems[0][1].startswith(expected[1]), problems
    assert leftovers(portal) == NOTHING
    assert "upload.rejected" in audit_actions(portal)


def test_a_lerobot_folder_without_its_weights_is_refused_at_upload(portal: Web) -> None:
    h = submitter(portal)
    data = tar_bytes(
        [
            ("policy.toml", "file", manifest()),
            ("checkpoint/config.json", "file", lerobot_config()),
            ("checkpoint/model.bin", "file", safetensors(b"w")),
        ]
    )
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert problems == [
        (
            ["policy.toml", "runner", "policy_path"],
            "policy.toml: runner.policy_path: model.safetensors: is missing "
            "(save with save_pretrained)",
        )
    ]
    assert leftovers(portal) == NOTHING


def test_an_openpi_checkpoint_is_refused_at_upload_saying_what_to_do(portal: Web) -> None:
    h = submitter(portal)
    text = manifest().replace(
        b'framework = "lerobot"\npolicy_path = "checkpoint"',
        b'framework = "openpi"\nconfig = "pi05_droid"\ncheckpoint_path = "checkpoint"',
    )
    data = tar_bytes([("policy.toml", "file", text), ("checkpoint/w", "file", b"w")])
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    assert [loc for loc, _ in problems] == [["policy.toml", "runner", "framework"]]
    message = problems[0][1]
    assert message.startswith("policy.toml: runner.framework: 'openpi' checkpoints cannot be")
    assert "not installable from the package index" in message
    assert 'framework = "command"' in message
    assert leftovers(portal) == NOTHING


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"-e .", "options are not allowed"),
        (b"https://example.com/evil-1.0.tar.gz", "URLs and paths are not allowed"),
        (b"evil @ https://example.com/evil.whl", "URLs and paths are not allowed"),
        (b"--extra-index-url https://example.com/simple", "options are not allowed"),
    ],
    ids=["editable", "url", "direct reference", "index option"],
)
def test_a_requirements_line_that_is_not_a_plain_specifier_is_refused_at_upload(
    portal: Web, line: bytes, why: str
) -> None:
    h = submitter(portal)
    text = manifest().replace(
        b'framework = "lerobot"\npolicy_path = "checkpoint"',
        b'framework = "command"\ncommand = ["python", "serve.py", "--port", "{port}"]\n'
        b'requirements = "requirements.txt"',
    )
    data = tar_bytes(
        [
            ("policy.toml", "file", text),
            ("serve.py", "file", b"print('hi')\n"),
            ("requirements.txt", "file", b"numpy==2.2.6\n" + line + b"\n"),
        ]
    )
    problems = _problems(upload(portal.client(), h, data, chunk=len(data)))
    shown = line.decode()
    assert problems == [
        (
            ["policy.toml", "runner", "requirements"],
            problems[0][1],
        )
    ]
    assert problems[0][1].startswith(f"policy.toml: runner.requirements: '{shown}': {why}")
    assert leftovers(portal) == NOTHING


def test_a_command_checkpoint_with_plain_requirements_is_accepted(portal: Web) -> None:
    h = submitter(portal)
    text = manifest().replace(
        b'framework = "lerobot"\npolicy_path = "checkpoint"',
        b'framework = "command"\ncommand = ["python", "serve.py", "--port", "{port}"]\n'
        b'requirements = "requirements.txt"',
    )
    reqs = b"# pinned\nnumpy==2.2.6\nwebsockets>=15,<18  # the wire\nmsgpack[extra]~=1.1\n"
    data = tar_bytes(
        [
            ("policy.toml", "file", text),
            ("serve.py", "file", b"print('hi')\n"),
            ("requirements.txt", "file", reqs),
        ]
    )
    r = upload(portal.client(), h, data, chunk=len(data))
    assert r.status_code == 201, r.text
    assert r.json()["manifest"]["runner"]["framework"] == "command"
