"""The demo's uploaded checkpoint: one arm packed as a submitter packs one.

A real lab uploads an archive with its own server code; the demo does the
same for one of its scripted arms (``CHECKPOINT_ARM``): the archive holds
``policy.toml`` (framework ``command``), a ``requirements.txt`` pinned to the
versions installed here, a ``serve.py``, and under ``src/`` the source files
of Proctor's that the scripted policy's server imports — found by importing
it in a fresh interpreter, so the archive carries exactly its closure and
nothing else of the project (no settings, secrets or database code beyond
what those modules import). The runner host builds the environment from the
requirements (wheels only) and runs ``serve.py`` in its sandbox; the station
reaches it through the blinded gateway like every other arm.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path

import proctor

CHECKPOINT_ARM = "dawdler"
# what the closure needs from PyPI (pydantic-settings brings python-dotenv)
REQUIREMENTS = ("numpy", "msgpack", "websockets", "pydantic", "pydantic-settings")

_CLOSURE = """
import json, sys
from proctor.policywire.serving.demo import DemoPolicy, demo_serve
demo_serve(DemoPolicy({arm!r}, seed=0))
print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()
                        if n.split(".")[0] == "proctor" and getattr(m, "__file__", None))))
"""

_SERVE = '''"""The demo arm's policy server, as a submitter would ship it."""

import argparse
import pathlib
import signal
import sys
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "src"))

from proctor.policywire.serving.demo import DemoPolicy, demo_serve  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--arm", required=True)
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
args = parser.parse_args()
server = demo_serve(DemoPolicy(args.arm, seed=args.seed), port=args.port).start()
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
print(f"serving demo arm {args.arm} on port {args.port}", flush=True)
done.wait()
server.stop()
'''


def closure_files(arm: str = CHECKPOINT_ARM) -> list[Path]:
    """The project's source files the arm's server imports, found in a fresh interpreter."""
    root = Path(proctor.__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _CLOSURE.format(arm=arm)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    return [Path(f).resolve() for f in json.loads(out.stdout.strip().splitlines()[-1])]


def manifest(arm: str, seed: int, name: str) -> str:
    """policy.toml for the arm, declaring what its profile serves."""
    from proctor.policywire.serving.demo import CONTROL_HZ, demo_profile

    p = demo_profile(arm)
    size = f"image_size = [{p.image_size[0]}, {p.image_size[1]}]\n" if p.image_size else ""
    return f"""manifest_version = 1
name = "{name}"
description = "proctor demo: the scripted arm '{arm}' uploaded as a checkpoint"

[runner]
framework = "command"
command = ["python", "serve.py", "--arm", "{arm}", "--seed", "{seed}", "--port", "{{port}}"]
requirements = "requirements.txt"
python = "{sys.version_info.major}.{sys.version_info.minor}"
dialect = "{p.dialect}"

[policy]
action_space = "cartesian_position"
chunk_length = {p.chunk}
control_hz = {CONTROL_HZ}
{size}"""


def build_archive(dest: Path, *, arm: str = CHECKPOINT_ARM, seed: int, name: str) -> Path:
    """Write the arm's checkpoint archive (tar.gz) to ``dest``; deterministic
    for the same sources (fixed times and owners), so re-runs upload the same bytes."""
    root = Path(proctor.__file__).resolve().parents[1]
    files: dict[str, bytes] = {
        "policy.toml": manifest(arm, seed, name).encode(),
        "requirements.txt": "".join(f"{p}=={version(p)}\n" for p in REQUIREMENTS).encode(),
        "serve.py": _SERVE.encode(),
    }
    for path in closure_files(arm):
        files[f"src/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz", compresslevel=6) as tar:
        for member in sorted(files):
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(files[member]), 0, 0o644
            tar.addfile(info, io.BytesIO(files[member]))
    return dest
