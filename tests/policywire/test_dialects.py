"""The dialect registry: every wire is one module behind it, and a new one is
one module more (here a toy dialect, registered by the test, spoken end to
end over a real loopback WebSocket)."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.sync.server import ServerConnection, serve

from proctor.core.domain import EndpointDialect
from proctor.core.recording import keys
from proctor.policywire import dialects
from proctor.policywire.client import PolicyClient, PolicyProtocolError
from proctor.policywire.conformance import dialects as conformance_dialects
from proctor.policywire.dialects.base import Decoded, Dialect, Handshake, Session
from proctor.policywire.handshake import auth_headers, cameras, public_info
from proctor.policywire.observation import build_observation
from proctor.policywire.serving import dialects as serving_dialects
from proctor.policywire.wire import codec
from proctor.policywire.wire.proprio import Proprio
from proctor.policywire.wire.spec import ActionSpace, ProtocolError, ServerInfo

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("proctor",)
DIALECT_MODULES = ROOT / "proctor" / "policywire" / "dialects"
# each dialect's other faces (its checks, its server) live in modules of their own
FACE_MODULES = (
    ROOT / "proctor" / "policywire" / "conformance" / "dialects",
    ROOT / "proctor" / "policywire" / "serving" / "dialects.py",
)
POSE = np.array([0.4, 0.0, 0.4, 0.0, 0.0, 0.0, 1.0])


def test_the_registry_speaks_every_dialect_a_submission_can_store() -> None:
    for stored in EndpointDialect:
        wire = dialects.get(stored)
        assert wire.name == stored.value
        assert wire.ident is stored
    assert dialects.names()[: len(EndpointDialect)] == [d.value for d in EndpointDialect]


def test_an_unknown_dialect_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="'carrier_pigeon' is not one of openpi, roboarena"):
        dialects.get("carrier_pigeon")


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({}, "openpi"),
        ({"action_space": "joint_position"}, "openpi"),
        ({"n_external_cameras": 1}, "roboarena"),
        ({"needs_session_id": False, "action_space": "joint_position"}, "roboarena"),
    ],
)
def test_unnamed_metadata_is_detected_by_the_dialects_that_claim_it(
    metadata: dict[str, Any], expected: str
) -> None:
    assert dialects.detect(metadata).name == expected


def test_a_detected_dialects_key_goes_as_its_family_sends_it() -> None:
    assert auth_headers(None, "k") == {"Authorization": "Api-Key k"}
    assert auth_headers(EndpointDialect.positronic_v1, "k") == {"Authorization": "Bearer k"}
    assert auth_headers(None, None) == {}


# -- a toy fourth dialect -------------------------------------------------------------


class ToySession(Session):
    def request(self, observation: dict[str, Any], session_id: str) -> dict[str, Any]:
        return {"toy_request": observation, "sid": session_id}

    def reset_message(self, session_id: str) -> dict[str, Any] | None:
        return {"toy_reset": session_id}

    def decode(self, raw: Any, observation: dict[str, Any]) -> Decoded:
        reply = codec.unpackb(raw)
        if not isinstance(reply, dict) or "rows" not in reply:
            raise ProtocolError("a toy reply without 'rows'")
        rows = np.asarray(reply["rows"], dtype=np.float64)
        return Decoded(rows, ActionSpace.joint_position, timed_from_call=True)

    def end_message(self) -> dict[str, Any] | None:
        return {"toy_bye": True}

    def is_end_ack(self, frame: Any) -> bool:
        return frame == {"toy_bye": "ok"}


class Toy(Dialect):
    name = "toy"
    auth_scheme = "Toy"
    url_path_text = "the toy path"

    def dial_url(self, url: str) -> str:
        if not url.startswith("ws://"):
            raise ValueError("a toy endpoint is a ws:// URL")
        return url.rstrip("/") + "/toy"

    def parse_metadata(
        self,
        metadata: Mapping[Any, Any],
        *,
        default_image_size: tuple[int, int],
        n_cameras_available: int,
    ) -> ServerInfo:
        return ServerInfo(self.ident, ActionSpace.joint_position, (8, 8), 0, True, False)

    def image_keys(self, info: ServerInfo) -> dict[str, str]:
        return {"toy/wrist": keys.CAMERA_WRIST}

    def encode(
        self,
        info: ServerInfo,
        *,
        proprio: Proprio,
        prompt: str,
        images: dict[str, np.ndarray],
    ) -> dict[str, Any]:
        return {"toy/q": proprio.q, "toy/task": prompt, "toy/wrist": images[keys.CAMERA_WRIST]}

    def open(self, client: Handshake, ws: Any) -> Session:
        hello = codec.unpackb(ws.recv(timeout=client.connect_timeout_s))
        if hello != {"toy": "hello"}:
            ws.close()
            raise PolicyProtocolError("policy metadata rejected: not a toy hello")
        return ToySession(
            self.parse_metadata(hello, default_image_size=(8, 8), n_cameras_available=1)
        )


@pytest.fixture
def toy() -> Iterator[Dialect]:
    dialects.register(Toy)
    try:
        yield dialects.get("toy")
    finally:
        dialects.unregister("toy")
    assert "toy" not in dialects.names()


# a dialect's faces beyond its client face, each found by name in its own registry
FACES = {"conformance": conformance_dialects.get, "serving": serving_dialects.get}


def missing_faces() -> list[tuple[str, str]]:
    """(dialect, face) for each face a registered dialect claims but whose
    registry has nothing under its name."""
    missing = []
    for name in dialects.names():
        for face in sorted(dialects.get(name).faces):
            try:
                found = FACES[face](name).name
            except (KeyError, ValueError):
                found = None
            if found != name:
                missing.append((name, face))
    return missing


def test_every_dialect_has_each_face_it_claims() -> None:
    """A dialect is one name with up to three faces (client, conformance,
    serving), each in its own layer of the protocol: none is missing, and no
    face is registered for a dialect that does not claim it."""
    assert missing_faces() == []
    for stored in EndpointDialect:  # the built-in ones have all three
        assert dialects.get(stored).faces == FACES.keys()
    for name in conformance_dialects.MODULES:
        assert "conformance" in dialects.get(name).faces
    for name in serving_dialects.BUILT_IN:
        assert "serving" in dialects.get(name).faces


def test_a_dialect_claiming_a_face_it_lacks_is_caught(toy: Dialect) -> None:
    class Boastful(Toy):
        name = "boastful"
        faces = frozenset({"conformance", "serving"})

    dialects.register(Boastful)
    try:
        assert missing_faces() == [("boastful", "conformance"), ("boastful", "serving")]
    finally:
        dialects.unregister("boastful")
    assert missing_faces() == []  # the toy claims no face beyond its client


@pytest.fixture
def toy_server() -> Iterator[tuple[str, list[Any]]]:
    """A toy-dialect server on loopback; the list collects what it received
    (the Authorization header first, then each decoded frame)."""
    seen: list[Any] = []

    def handler(ws: ServerConnection) -> None:
        assert ws.request is not None
        seen.append(ws.request.headers.get("Authorization"))
        seen.append(ws.request.path)
        ws.send(codec.packb({"toy": "hello"}))
        for raw in ws:
            frame = codec.unpackb(raw)  # type: ignore[arg-type]
            seen.append(frame)
            if "toy_request" in frame:
                ws.send(codec.packb({"rows": np.arange(24.0).reshape(3, 8) / 100}))
            elif "toy_reset" in frame:
                ws.send(codec.packb({"ok": True}))
            elif "toy_bye" in frame:
                ws.send(codec.packb({"toy_bye": "ok"}))

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        try:
            yield f"ws://127.0.0.1:{port}", seen
        finally:
            server.shutdown()
            thread.join(5)


def test_a_toy_dialect_registered_by_a_test_is_spoken_end_to_end(
    toy: Dialect, toy_server: tuple[str, list[Any]]
) -> None:
    from proctor.policywire.cli_options import policy_url as _policy_url
    from proctor.web.submissions import endpoints

    base, seen = toy_server
    # the URL and the key as the places that take an endpoint normalise them
    url = _policy_url("--policy", base, toy.ident)
    assert url == base + "/toy" == endpoints.endpoint_url(base, toy.ident)
    headers = auth_headers(toy.ident, "s3cret")
    assert headers == {"Authorization": "Toy s3cret"}

    client = PolicyClient(url, dialect=toy.ident, headers=headers)
    info = client.connect()
    assert info.dialect == "toy" and cameras(info) == (keys.CAMERA_WRIST,)
    assert public_info(info)["dialect"] == "toy"
    client.reset(5.0)
    obs = build_observation(
        info,
        proprio=Proprio(q=np.ones(7), dq=np.zeros(7), ee_pose=POSE, gripper=0.0),
        images={keys.CAMERA_WRIST: np.zeros((16, 16, 3), np.uint8)},
        prompt="stack the toys",
        privileged={"sim/extra": 1},
    )
    assert sorted(obs) == ["sim/extra", "toy/q", "toy/task", "toy/wrist"]
    assert obs["toy/wrist"].shape == (8, 8, 3)  # fitted to the toy's image size
    reply = client.infer(obs, 5.0)
    assert reply.space == ActionSpace.joint_position and reply.actions.shape == (3, 8)
    # the reply says where playback starts: its rows are timed from the call
    assert reply.first_row(0.0, 10.0) == 0 and reply.first_row(0.15, 10.0) == 1
    assert reply.first_row(9.0, 10.0) == 2
    client.close()

    assert seen[0] == "Toy s3cret" and seen[1] == "/toy"
    reset, request, bye = seen[2:]
    assert reset == {"toy_reset": client.session_id}
    assert (
        request["sid"] == client.session_id
        and request["toy_request"]["toy/task"] == "stack the toys"
    )
    assert bye == {"toy_bye": True}


# -- nothing outside the dialect modules dispatches on a dialect's name -----------------


def _name_hits(path: Path, names: set[str]) -> list[str]:
    """Comparisons (==, !=, in) and dict keys that name a dialect."""

    def names_dialect(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id == "EndpointDialect"
        return isinstance(node, ast.Constant) and node.value in names

    def in_tuple(node: ast.AST) -> bool:
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(
            names_dialect(e) for e in node.elts
        )

    where = path.relative_to(ROOT) if ROOT in path.parents else path
    hits = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(names_dialect(o) or in_tuple(o) for o in operands):
                hits.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.Dict) and any(
            k is not None and names_dialect(k) for k in node.keys
        ):
            hits.append(f"{where}:{node.lineno}")
    return hits


def test_no_code_outside_the_dialect_modules_compares_dialect_names() -> None:
    names = {d.value for d in EndpointDialect}
    hits = [
        hit
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if DIALECT_MODULES not in path.parents
        and not any(face == path or face in path.parents for face in FACE_MODULES)
        for hit in _name_hits(path, names)
    ]
    assert hits == [], "dispatch on a dialect name outside the dialects' modules: " + ", ".join(
        hits
    )


def test_the_name_check_would_see_a_comparison(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(info, d):\n"
        "    a = info.dialect == EndpointDialect.openpi\n"
        "    b = d in ('roboarena', 'x')\n"
        "    return {'positronic_v1': 1}, a, b\n"
    )
    hits = _name_hits(probe, {d.value for d in EndpointDialect})
    assert [h.rsplit(":", 1)[1] for h in hits] == ["2", "3", "4"]
