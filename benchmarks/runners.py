"""Runner speed: building a framework's environment, a LeRobot policy's cold
start in the sandbox, and what the sandbox costs each call.

    ./run bench runners [--calls 300] [--warmup 30] [--cold-starts 3]
                        [--lerobot-cold] [--builds-only | --skip-builds] [--json PATH]

1. **Environment build** — through the runner's own path
   (``ServerPipeline.read`` then ``.build``, i.e. ``EnvStore.ensure``):
   a ``command`` checkpoint whose requirements are numpy, msgpack and
   websockets (pinned to this venv's versions), *cold* into a fresh
   temporary environment root (a venv, then pip with ``--only-binary``:
   downloads unless pip finds the wheels locally), then *cached*: the same
   ``ensure`` again, which finds the built environment. The LeRobot
   environment's cached ``ensure`` is timed when it is in the host cache
   (``~/.cache/proctor/runner-envs``, built by the runner tests); its cold
   build (about 2 minutes, about 4 GB downloaded) only with
   ``--lerobot-cold``, into a temporary root that is deleted afterwards.
2. **Cold start to ready** — the tiny ACT checkpoint that
   ``tests/runner/make_checkpoints.py`` makes with LeRobot itself, started
   as a runner host starts it: ``ServerPipeline.launch`` (the sandbox:
   bubblewrap, the cgroups, the bridge) then ``wait_ready`` (the server
   answers its openpi metadata through the sandbox's Unix socket). Baseline,
   interleaved with it: the same server started *without* the sandbox (the
   environment's python on a loopback port), polled at the same interval
   until it greets.
3. **Per-call latency** of that policy, called from a *second process* (the
   station's side) with the station's ``PolicyClient`` (msgpack-numpy, two
   224×224 camera images, the joints), while this process holds the sandbox
   and its relay (the runner host's side), three ways, interleaved call by
   call (the order rotating each round) so that all three see the same load
   on the machine:
   *in-process* — ``Served.infer`` of the runner's LeRobot server module
   timed inside the LeRobot environment, no wire (``_lerobot_inprocess.py``;
   the baseline cannot run in proctor's own process, whose environment has
   no torch or LeRobot, so it runs in step with the other two instead);
   *server* — the LeRobot server without the sandbox, on a loopback port;
   *sandboxed* — the server in the sandbox, reached through
   ``sandbox.relay.Relay``'s TCP port exactly as the gateway reaches it
   (relay → Unix socket → bridge → the server's port inside). Warm-up calls
   are excluded. The sandbox's overhead per call is *sandboxed − server* at
   p50 and at p99; it is also given on the wire alone (each call's latency
   less the ``infer_ms`` its server reported), which takes the policy's own
   compute, and its noise, out of the comparison.

Target on the 2-core reference machine: the sandbox's overhead per call
under 2 ms at p50 and p99. The machine is small and shared: the load
average is printed with each section.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from proctor.core.settings import RunnerSettings, SubmissionSettings
from proctor.policywire.client import PolicyClient
from proctor.runner.archive import ArchiveLimits
from proctor.runner.envs import MARKER, BuiltEnv, EnvStore, default_env_dir
from proctor.runner.frameworks.base import HELPERS_DIR, SANDBOX_CHECKPOINT, SANDBOX_HELPERS
from proctor.runner.frameworks.lerobot import Lerobot
from proctor.runner.manifest import Manifest, parse_manifest
from proctor.runner.pipeline import READY_POLL_S, Launched, PipelineConfig, ServerPipeline
from proctor.runner.sandbox.base import Limits
from proctor.runner.sandbox.relay import Relay

TARGET_OVERHEAD_MS = 2.0
HERE = Path(__file__).resolve().parent
MAKE_CHECKPOINTS = HERE.parent / "tests" / "runner" / "make_checkpoints.py"
IN_PROCESS = HERE / "_lerobot_inprocess.py"
COMMAND_PACKAGES = ("numpy", "msgpack", "websockets")
OBSERVATIONS = 16  # distinct observations, cycled through by every call
CHUNK = 10  # the tiny ACT's chunk_size: one forward pass answers a request

COMMAND_MANIFEST = """\
name = "bench-command"

[runner]
framework = "command"
command = ["python", "serve.py", "--port", "{port}"]
requirements = "requirements.txt"
python = "3.11"

[policy]
action_space = "joint_position"
chunk_length = 4
"""

LEROBOT_MANIFEST = f"""\
name = "bench-act"

[runner]
framework = "lerobot"
policy_path = "act"

[policy]
action_space = "joint_position"
chunk_length = {CHUNK}
cameras = ["exterior", "wrist"]
"""


def load() -> str:
    return f"load avg {os.getloadavg()[0]:.1f}"


def stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
        "min": float(a.min()),
        "n": int(a.size),
    }


def pipeline_for(tmp: Path, runtime: Path, store: EnvStore) -> ServerPipeline:
    """The runner host's pipeline with the default ``[runner]`` limits."""
    r = RunnerSettings()
    sub = SubmissionSettings()
    config = PipelineConfig(
        work_dir=tmp / "work",
        limits=Limits(
            memory_bytes=r.memory_bytes,
            max_processes=r.max_processes,
            cpu_seconds=r.cpu_seconds,
            max_open_files=r.max_open_files,
        ),
        archive_limits=ArchiveLimits(
            max_unpacked_bytes=sub.max_unpacked_bytes,
            max_files=sub.max_files,
            max_ratio=sub.max_compression_ratio,
        ),
        ready_timeout_s=r.ready_timeout_s,
        cgroups=r.cgroups,
        runtime_dir=runtime,
    )
    return ServerPipeline(config, store, on_stage=lambda text: None)


# ------------------------------------------------------- 1. environments


def command_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "policy.toml").write_text(COMMAND_MANIFEST)
    pins = "".join(f"{name}=={version(name)}\n" for name in COMMAND_PACKAGES)
    (folder / "requirements.txt").write_text(pins)
    (folder / "serve.py").write_text("raise SystemExit('never run by this benchmark')\n")
    return folder


def lerobot_checkpoint(folder: Path, env: BuiltEnv) -> Path:
    """The tiny random ACT (and its siblings) made by LeRobot itself, with a
    policy.toml serving ``act/``."""
    folder.mkdir(parents=True)
    done = subprocess.run(
        [str(env.python), str(MAKE_CHECKPOINTS), str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0:
        raise SystemExit(f"make_checkpoints.py failed:\n{done.stderr[-3000:]}")
    (folder / "policy.toml").write_text(LEROBOT_MANIFEST)
    return folder


def timed(fn: Callable[[], object], repeats: int) -> dict[str, float]:
    """``fn`` run ``repeats`` times; milliseconds each."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return stats(out)


def command_builds(tmp: Path, runtime: Path, repeats: int) -> dict[str, Any]:
    """The runner's own stages (``read``, ``build``) into a fresh root: one
    cold build, then ``repeats`` cached ones."""
    store = EnvStore(tmp / "envs-cold", build_timeout_s=1800)
    pipeline = pipeline_for(tmp, runtime, store)
    root, manifest = pipeline.read(command_checkpoint(tmp / "command-ckpt"))
    t0 = time.perf_counter()
    env = pipeline.build(manifest, root)
    cold = time.perf_counter() - t0
    if env.reused:
        raise SystemExit(f"{store.root}: the command environment existed before its cold build")
    cached = timed(lambda: pipeline.build(manifest, root), repeats)
    return {"packages": [f"{p}=={version(p)}" for p in COMMAND_PACKAGES], "key": env.key,
            "cold_s": cold, "cached_ms": cached}  # fmt: skip


def lerobot_env(tmp: Path, args: argparse.Namespace, out: dict[str, Any]) -> BuiltEnv | None:
    """The LeRobot environment: built cold into a temporary root with
    ``--lerobot-cold`` (timed), else the host cache's; its cached ``ensure``
    timed. None when it is in neither."""
    spec = Lerobot().env_spec(lerobot_manifest(), tmp)
    label = f"lerobot {spec.version}"
    if args.lerobot_cold:
        store = EnvStore(tmp / "envs-lerobot", build_timeout_s=3600)
        t0 = time.perf_counter()
        store.ensure(spec, lambda line: print(f"  building: {line}", flush=True))
        out["lerobot_cold_s"] = time.perf_counter() - t0
        print(f"{label}: cold, into a fresh root    {out['lerobot_cold_s']:9.1f} s")
    else:
        store = EnvStore(default_env_dir(None), build_timeout_s=3600)
    if not (store.path_of(spec) / MARKER).is_file():
        print(f"{label}: not in the host cache ({store.path_of(spec)}): sections 2 and 3 "
              "need it; the runner tests build it there, or pass --lerobot-cold")  # fmt: skip
        return None
    out["lerobot_cached_ms"] = timed(lambda: store.ensure(spec, print), args.cached_repeats)
    print(f"{label}: cached (median of {args.cached_repeats})  "
          f"{out['lerobot_cached_ms']['p50']:9.2f} ms")  # fmt: skip
    return store.ensure(spec, print)


def env_section(tmp: Path, runtime: Path, args: argparse.Namespace) -> tuple[dict, BuiltEnv | None]:
    """Section 1; the LeRobot environment for the next sections (None: absent)."""
    print(f"\n== 1. environment build ({load()}) ==")
    command = command_builds(tmp, runtime, args.cached_repeats)
    print(f"command ({', '.join(command['packages'])}):")
    print(f"  cold, into a fresh root                {command['cold_s']:9.1f} s")
    print(f"  cached (median of {args.cached_repeats})                  "
          f"{command['cached_ms']['p50']:9.2f} ms")  # fmt: skip
    out: dict[str, Any] = {"command": command}
    env = lerobot_env(tmp, args, out)
    return out, env


def lerobot_manifest() -> Manifest:
    return parse_manifest(LEROBOT_MANIFEST)


# ------------------------------------------------- 2. cold start to ready


@dataclass
class Plain:
    """The LeRobot server started without the sandbox (the baseline)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def host_argv(argv: tuple[str, ...], root: Path) -> list[str]:
    """A launch's sandbox paths mapped to where the sandbox's binds take them from."""
    out = []
    for part in argv:
        if part.startswith(SANDBOX_HELPERS + "/"):
            part = str(HELPERS_DIR / part.removeprefix(SANDBOX_HELPERS + "/"))
        elif part == SANDBOX_CHECKPOINT or part.startswith(SANDBOX_CHECKPOINT + "/"):
            part = str(root) + part.removeprefix(SANDBOX_CHECKPOINT)
        out.append(part)
    return out


def plain_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """What the sandbox gives its server (nothing inherited), outside it."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home), **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_plain(manifest: Manifest, root: Path, env: BuiltEnv, tmp: Path, name: str) -> Plain:
    port = free_port()
    launch = Lerobot().launch(manifest, port).fill(env.path)
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            host_argv(launch.argv, root),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=plain_env(tmp / f"{name}-home", dict(launch.env)),
            cwd=tmp,
            start_new_session=True,  # its own group: stopped by its pid alone
        )
    return Plain(proc, f"ws://127.0.0.1:{port}", log)


def greets(url: str) -> bool:
    """The server answers a connection with its metadata (what readiness asks)."""
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    try:
        with connect(url, open_timeout=5, max_size=None, compression=None) as ws:
            ws.recv(timeout=5)
        return True
    except (OSError, TimeoutError, WebSocketException):
        return False


def wait_greets(plain: Plain, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not greets(plain.url):
        if plain.proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the unsandboxed server did not come up:\n{plain.log.read_text()}")
        time.sleep(READY_POLL_S)


@dataclass
class Servers:
    """The two servers the latency section calls, kept from the last cold start."""

    launched: Launched | None = None
    plain: Plain | None = None

    def stop(self) -> None:
        if self.launched is not None:
            self.launched.sandbox.stop()
            self.launched = None
        if self.plain is not None:
            self.plain.stop()
            self.plain = None


def cold_start_once(
    pipeline: ServerPipeline, folder: Path, env: BuiltEnv, tmp: Path, i: int, servers: Servers
) -> dict[str, float]:
    """One start of each, the order alternating; both left running in ``servers``."""
    root, manifest = pipeline.read(folder)
    out: dict[str, float] = {}

    def sandboxed() -> None:
        t0 = time.perf_counter()
        servers.launched = pipeline.launch(manifest, root, env, f"bench-{i}")
        out["sandbox_started_s"] = time.perf_counter() - t0
        pipeline.wait_ready(servers.launched)
        out["sandboxed_s"] = time.perf_counter() - t0

    def unsandboxed() -> None:
        t0 = time.perf_counter()
        servers.plain = start_plain(manifest, root, env, tmp, f"plain-{i}")
        wait_greets(servers.plain, pipeline.config.ready_timeout_s)
        out["unsandboxed_s"] = time.perf_counter() - t0

    for step in (sandboxed, unsandboxed) if i % 2 == 0 else (unsandboxed, sandboxed):
        step()
    out["difference_s"] = out["sandboxed_s"] - out["unsandboxed_s"]
    return out


def print_start(label: str, run: dict[str, float]) -> None:
    diff = run["difference_s"]  # the median row: the median of the differences
    print(f"{label:>6s} {run['sandbox_started_s']:13.3f} {run['sandboxed_s']:12.2f} "
          f"{run['unsandboxed_s']:14.2f} {diff:13.2f}")  # fmt: skip


def cold_start_section(
    pipeline: ServerPipeline, folder: Path, env: BuiltEnv, tmp: Path, args: argparse.Namespace,
    servers: Servers,
) -> dict[str, Any]:  # fmt: skip
    print(f"\n== 2. cold start to ready: the tiny ACT, {args.cold_starts} starts each, "
          f"interleaved ({load()}) ==")  # fmt: skip
    print(f"{'start':>6s} {'sandbox up s':>13s} {'sandboxed s':>12s} {'unsandboxed s':>14s} "
          f"{'difference s':>13s}")  # fmt: skip
    runs = []
    for i in range(args.cold_starts):
        servers.stop()
        run = cold_start_once(pipeline, folder, env, tmp, i, servers)
        runs.append(run)
        print_start(str(i + 1), run)
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    print_start("median", med)
    assert servers.launched is not None
    backend = servers.launched.sandbox.diagnostics().limits_backend
    print(f"(both polled every {READY_POLL_S:g} s; the sandbox's limits: {backend})")
    return {"runs": runs, "median": med, "poll_s": READY_POLL_S, "limits_backend": backend}


# ------------------------------------------------------ 3. per-call latency

# one call: (its latency, the server's own infer_ms), in milliseconds
Call = Callable[[int], tuple[float, float]]


def write_observations(path: Path, count: int) -> None:
    """What the station sends (openpi's DROID keys): two 224×224 images, the joints."""
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {"count": np.array(count)}
    for i in range(count):
        arrays[f"observation/exterior_image_1_left/{i}"] = rng.integers(
            0, 255, (224, 224, 3), dtype=np.uint8
        )
        arrays[f"observation/wrist_image_left/{i}"] = rng.integers(
            0, 255, (224, 224, 3), dtype=np.uint8
        )
        arrays[f"observation/joint_position/{i}"] = rng.normal(size=7).astype(np.float32)
        arrays[f"observation/gripper_position/{i}"] = np.array([0.5], np.float32)
    np.savez(path, **arrays)  # type: ignore[arg-type]


def read_observations(path: Path) -> list[dict[str, Any]]:
    """The same observations the in-process helper reads (its own loader)."""
    from benchmarks._lerobot_inprocess import observations

    return observations(path)


@contextlib.contextmanager
def in_process(python: str, npz: Path, server_args: list[str], home: Path) -> Iterator[Call]:
    """``call(i)``: (ms, ms) of ``Served.infer`` on observation ``i`` in the
    LeRobot environment; the helper is stopped by its pid at the end."""
    proc = subprocess.Popen(
        [python, str(IN_PROCESS), str(HELPERS_DIR), str(npz), "--", *server_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=plain_env(home, {"HF_HUB_OFFLINE": "1"}),
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        # LeRobot prints its own lines while it loads: wait for ours
        for line in proc.stdout:
            if line.strip() == "ready":
                break
        else:
            raise SystemExit("the in-process helper exited before it was ready")

        def call(i: int) -> tuple[float, float]:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{i}\n")
            proc.stdin.flush()
            ms = float(proc.stdout.readline())
            return ms, ms

        yield call
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def client_call(client: PolicyClient, observations: list[dict[str, Any]]) -> Call:
    """``call(i)``: (the call's latency, the server's own ``infer_ms``)."""

    def call(i: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        reply = client.infer(dict(observations[i]), timeout_s=60.0)
        ms = (time.perf_counter() - t0) * 1e3
        if reply.actions.shape != (CHUNK, 8) or not np.all(np.isfinite(reply.actions)):
            raise SystemExit(f"a bad reply: actions {reply.actions.shape}")
        timing = reply.server_timing or {}
        return ms, float(timing.get("infer_ms", float("nan")))

    return call


def interleaved(callers: dict[str, Call], rounds: int,
                warmup: int) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    """Every caller once a round, the order rotating; warm-up rounds dropped."""
    names = list(callers)
    out: dict[str, dict[str, list[float]]] = {n: {"ms": [], "infer_ms": []} for n in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            ms, infer_ms = callers[name](r % OBSERVATIONS)
            if r >= warmup:
                out[name]["ms"].append(ms)
                out[name]["infer_ms"].append(infer_ms)
    return out


def latency_section(env: BuiltEnv, folder: Path, tmp: Path, args: argparse.Namespace,
                    servers: Servers) -> dict[str, Any]:  # fmt: skip
    """The relay lives here, beside the sandbox, as in the runner host; the
    calls come from a second process, as the gateway's do."""
    assert servers.launched is not None and servers.plain is not None
    print(f"\n== 3. per-call latency: the tiny ACT, {args.calls} calls each after "
          f"{args.warmup} warm-up, interleaved, from a second process ({load()}) ==")  # fmt: skip
    npz = tmp / "observations.npz"
    write_observations(npz, OBSERVATIONS)
    launch = Lerobot().launch(lerobot_manifest(), 0).fill(env.path)
    over: list[float] = []
    relay = Relay("127.0.0.1", 0, servers.launched.sandbox.wire_socket,
                  latency_budget_s=RunnerSettings().latency_budget_s,
                  on_latency_exceeded=over.append)  # fmt: skip
    spec = {
        "urls": {"server": servers.plain.url, "sandboxed": f"ws://127.0.0.1:{relay.port}"},
        "python": str(env.python),
        "npz": str(npz),
        "server_args": host_argv(launch.argv, folder)[2:],
        "home": str(tmp / "inproc-home"),
        "calls": args.calls,
        "warmup": args.warmup,
        "out": str(tmp / "latency.json"),
    }
    (tmp / "client.json").write_text(json.dumps(spec))
    try:
        subprocess.run([sys.executable, "-m", "benchmarks.runners", "--client",
                        str(tmp / "client.json")], check=True, timeout=3600)  # fmt: skip
    finally:
        relay.close()
    if over:
        raise SystemExit(f"the relay saw a call over the latency budget: {over}")
    return summarise(json.loads((tmp / "latency.json").read_text()))


def client_main(spec_path: Path) -> None:
    """The second process: the station's ``PolicyClient`` to both servers, and
    the in-process helper, called in turn; the raw figures to ``spec["out"]``."""
    spec = json.loads(spec_path.read_text())
    npz = Path(spec["npz"])
    observations = read_observations(npz)
    clients = {name: PolicyClient(url, connect_timeout_s=30.0)
               for name, url in spec["urls"].items()}  # fmt: skip
    try:
        for client in clients.values():
            client.connect()
        with in_process(spec["python"], npz, spec["server_args"], Path(spec["home"])) as call:
            callers = {"in-process": call} | {
                name: client_call(client, observations) for name, client in clients.items()
            }
            raw = interleaved(callers, spec["calls"], spec["warmup"])
    finally:
        for client in clients.values():
            client.close()
    Path(spec["out"]).write_text(json.dumps(raw))


def summarise(raw: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"in_process_ms": stats(raw["in-process"]["ms"])}
    for name in ("server", "sandboxed"):
        ms, infer = np.asarray(raw[name]["ms"]), np.asarray(raw[name]["infer_ms"])
        out[f"{name}_ms"] = stats(list(ms))
        out[f"{name}_infer_ms"] = stats(list(infer))
        out[f"{name}_wire_ms"] = stats(list(ms - infer))
    for q in ("p50", "p99"):
        out[f"overhead_{q}_ms"] = out["sandboxed_ms"][q] - out["server_ms"][q]
        out[f"wire_overhead_{q}_ms"] = out["sandboxed_wire_ms"][q] - out["server_wire_ms"][q]
        out[f"server_over_in_process_{q}_ms"] = out["server_ms"][q] - out["in_process_ms"][q]
    paired = np.asarray(raw["sandboxed"]["ms"]) - np.asarray(raw["server"]["ms"])
    out["paired_difference_median_ms"] = float(np.median(paired))
    return out


def print_latency(res: dict[str, Any]) -> None:
    print(f"{'':34s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} {'p50 ×base':>10s} "
          f"{'p99 ×base':>10s}")  # fmt: skip
    base = res["in_process_ms"]
    rows = [
        ("in-process Served.infer (baseline)", "in_process_ms"),
        ("server, no sandbox", "server_ms"),
        ("sandboxed, through the relay", "sandboxed_ms"),
        ("  server: its own infer_ms", "server_infer_ms"),
        ("  sandboxed: its own infer_ms", "sandboxed_infer_ms"),
        ("  server: the wire alone", "server_wire_ms"),
        ("  sandboxed: the wire alone", "sandboxed_wire_ms"),
    ]
    for label, key in rows:
        s = res[key]
        print(f"{label:34s} {s['p50']:8.2f} {s['p99']:8.2f} {s['mean']:8.2f} "
              f"{s['p50'] / base['p50']:9.2f}× {s['p99'] / base['p99']:9.2f}×")  # fmt: skip
    print(f"the wire without the sandbox (server − in-process): "
          f"p50 {res['server_over_in_process_p50_ms']:+.2f} ms, "
          f"p99 {res['server_over_in_process_p99_ms']:+.2f} ms")  # fmt: skip
    print(f"paired (same round) sandboxed − server, median: "
          f"{res['paired_difference_median_ms']:+.2f} ms")  # fmt: skip
    for label, prefix in (("whole call", "overhead"), ("wire alone", "wire_overhead")):
        p50, p99 = res[f"{prefix}_p50_ms"], res[f"{prefix}_p99_ms"]
        verdict = "MET" if max(p50, p99) < TARGET_OVERHEAD_MS else "MISSED"
        print(f"the sandbox's overhead per call ({label}, sandboxed − server): "
              f"p50 {p50:+.2f} ms, p99 {p99:+.2f} ms vs the {TARGET_OVERHEAD_MS:g} ms "
              f"target: {verdict}")  # fmt: skip


# ------------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--client":
        client_main(Path(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="timed calls per way")
    ap.add_argument("--warmup", type=int, default=30, help="untimed calls per way first")
    ap.add_argument("--cold-starts", type=int, default=3)
    ap.add_argument("--cached-repeats", type=int, default=20)
    ap.add_argument("--lerobot-cold", action="store_true",
                    help="also LeRobot's cold build (~2 min, ~4 GB downloaded)")  # fmt: skip
    ap.add_argument("--skip-builds", action="store_true", help="sections 2 and 3 only")
    ap.add_argument("--builds-only", action="store_true", help="section 1 only")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()

    figures: dict[str, Any] = {"machine": {"cores": os.cpu_count(),
                                           "load_avg_start": os.getloadavg()[0]}}  # fmt: skip
    print(f"machine: {os.cpu_count()} cores, {load()} at start")
    with tempfile.TemporaryDirectory(prefix="proctor-bench-runners-") as tmp_name:
        tmp = Path(tmp_name)
        # each server's socket folder: a short path (a Unix socket's has 107 bytes)
        runtime = Path(tempfile.mkdtemp(prefix="prb-", dir="/tmp"))
        servers = Servers()
        try:
            figures |= run_sections(tmp, runtime, args, servers)
        finally:
            servers.stop()
            shutil.rmtree(runtime, ignore_errors=True)
    figures["machine"]["load_avg_end"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"\nfigures written to {args.json}")


def run_sections(tmp: Path, runtime: Path, args: argparse.Namespace, servers: Servers) -> dict:
    figures: dict[str, Any] = {}
    if args.skip_builds:
        spec = Lerobot().env_spec(lerobot_manifest(), tmp)
        store = EnvStore(default_env_dir(None), build_timeout_s=60)
        env: BuiltEnv | None = store.ensure(spec, print)
    else:
        figures["env_build"], env = env_section(tmp, runtime, args)
    if env is None or args.builds_only:
        return figures
    folder = lerobot_checkpoint(tmp / "lerobot-ckpt", env)
    pipeline = pipeline_for(tmp, runtime, EnvStore(env.path.parent, build_timeout_s=60))
    figures["cold_start"] = cold_start_section(pipeline, folder, env, tmp, args, servers)
    res = latency_section(env, folder, tmp, args, servers)
    print_latency(res)
    figures["latency"] = res | {"calls": args.calls, "warmup": args.warmup,
                                "target_overhead_ms": TARGET_OVERHEAD_MS}  # fmt: skip
    return figures


if __name__ == "__main__":
    main()
