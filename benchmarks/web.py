"""Web speed: the leaderboard and the run explorer under load, and the time
to open a 4-minute episode in the explorer.

    ./run bench web [--clients 50] [--seconds 10] [--fps 30] [--episode-s 240] [--skip-load]
                    [--workers 1,2] [--workers-only]

Setup (not timed): a released campaign (reference + 4 policies × 4 objects ×
8 episodes) scored by the real analysis into stored snapshots, and one
4-minute episode recorded through the station's recorder (two 640×480
cameras at 30 fps, 100 Hz telemetry) into the artifact store.

1. **Explorer ready** — headless Chromium opens ``/episodes/{uid}`` of the
   4-minute episode: time from navigation start until the page is ready
   (both frame tables and the telemetry fetched and plotted, the first
   video frame decoded: the page's ``explorer-ready`` mark), cold then
   warm, with no other load, before anything else has asked for the episode
   (so the first open is cold on the server too). Target: < 1 s.
2. **Server CPU per request** — one client in a second process, sequential
   requests: the server process's CPU time per request, which does not
   depend on what else the machine runs; ratio to the static-file baseline
   and the requests per second one core could serve.
3. **Latency under load** — the app under uvicorn in this process (one
   worker, as ``proctor serve`` runs it); a *second process* on loopback
   opens ``--clients`` concurrent keep-alive connections and requests one
   URL as fast as each connection allows (closed loop) for ``--seconds``,
   then again with each client pacing itself to one request per second
   (what 50 people reading pages look like). Per URL: p50, p99,
   requests/s, and the ratio to the **baseline**: a static file
   (``/static/css/proctor.css``) served by the same server under the same
   load. Target: leaderboard p99 < 100 ms.
4. **Explorer page with 1 and 2 worker processes** — the real ``proctor
   serve --workers N`` (each of ``--workers``) over the same database, and
   ``--clients`` closed-loop clients on the explorer page, as anonymous
   visitors (answered from each worker's shared cache) and with the shared
   cache off (every request rendered: what a signed-in visitor costs).
   Target: p99 < 300 ms with 2 workers.

The machine is small and shared: the load average is printed with the
figures, and every ratio compares runs taken under the same conditions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

TARGET_LEADERBOARD_P99_MS = 100.0
TARGET_EXPLORER_READY_S = 1.0
TARGET_EXPLORER_PAGE_P99_MS = 300.0


# ----------------------------------------------------------------- the load


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    """One HTTP/1.1 request on a kept-alive connection; the status code. The
    generator is deliberately lean (bare asyncio streams, no client library):
    its CPU comes out of the same two cores the server runs on."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        raise ConnectionError("a response without a length")
    return status


async def _load(
    base: str, path: str, clients: int, seconds: float, rate: float | None, requests: int = 0
) -> dict:
    host, _, port = base.removeprefix("http://").partition(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def one(i: int) -> None:
        nonlocal errors
        if rate:  # spread the paced clients over the first second
            await asyncio.sleep(i / clients / rate)
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while True:
            t0 = time.perf_counter()
            if (requests and len(latencies) >= requests) or (not requests and t0 >= deadline):
                break
            try:
                if conn is None:
                    conn = await asyncio.open_connection(host, int(port))
                if await asyncio.wait_for(_get(*conn, request), 30.0) != 200:
                    errors += 1
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
                errors += 1
                if conn is not None:
                    conn[1].close()
                conn = None
            t1 = time.perf_counter()
            latencies.append(t1 - t0)
            if rate:
                await asyncio.sleep(max(0.0, 1.0 / rate - (t1 - t0)))
        if conn is not None:
            conn[1].close()

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    return {"latencies": latencies, "errors": errors, "elapsed": elapsed}


def load_main() -> None:
    """The second process: ``python -m benchmarks.web --load BASE PATH N S [RATE]``."""
    base, path, clients, seconds = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    rate = float(sys.argv[6]) or None
    requests = int(sys.argv[7])
    out = asyncio.run(_load(base, path, clients, seconds, rate, requests))
    json.dump(out, sys.stdout)


def run_load(
    base: str, path: str, clients: int, seconds: float, rate: float | None, requests: int = 0
) -> dict:
    """Load from a second process: ``clients`` connections for ``seconds``
    (or ``requests`` requests in all), back to back or at ``rate`` per client."""
    cmd = [sys.executable, "-m", "benchmarks.web", "--load", base, path, str(clients),
           str(seconds), str(rate or 0), str(requests)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 600, check=True)
    out = json.loads(r.stdout)
    lat = np.asarray(out["latencies"]) * 1e3
    return {
        "n": int(lat.size),
        "errors": out["errors"],
        "p50": float(np.percentile(lat, 50)) if lat.size else float("nan"),
        "p99": float(np.percentile(lat, 99)) if lat.size else float("nan"),
        "rps": lat.size / out["elapsed"],
    }


# ---------------------------------------------------------------- the setup


def _seed(app: Any, tmp: Path, *, fps: int, episode_s: float) -> tuple[int, str]:
    import sqlalchemy as sa

    from proctor.analysis.synthetic import PolicyModel
    from proctor.core.db.engine import session_scope
    from proctor.core.db.models import Episode
    from tests.web.leaderboard_data import ALL_STREAMS, seed_campaign
    from tests.web.recordings import RecordingSpec, attach_recording

    speeds = {"spoons": 1.0, "towels": 1.4, "scissors": 1.2, "batteries": 0.9}
    models = [
        PolicyModel("human-reference", 2.7, sigma=0.35, frailty_shape=12.0, p_drop=0.003,
                    p_lost=0.0, p_safety=0.0, object_speed=speeds, reference=True),
        PolicyModel("alpha", 6.0, p_drop=0.04, object_speed=speeds),
        PolicyModel("beta", 6.5, p_drop=0.035, object_speed=speeds),
        PolicyModel("gamma", 9.0, sigma=0.9, p_drop=0.06, object_speed=speeds),
        PolicyModel("delta", 14.0, p_drop=0.05, p_safety=0.02, object_speed=speeds),
    ]  # fmt: skip
    objects = {"spoons": ["rigid"], "towels": ["deformable"], "scissors": ["articulated"],
               "batteries": ["rigid", "small"]}  # fmt: skip
    t0 = time.perf_counter()
    with session_scope(app.state.web.session_factory) as s:
        seeded = seed_campaign(
            s,
            released=True,
            episodes_per_cell=8,
            items=8,
            seed=2,
            objects=objects,
            models=models,
            streams=ALL_STREAMS,
        )
    print(f"campaign: {len(seeded.episode_uids)} episodes scored under 3 label streams "
          f"in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    # the longest policy episode becomes the 4-minute recording
    with session_scope(app.state.web.session_factory) as s:
        uid = s.scalar(
            sa.select(Episode.uid)
            .where(Episode.campaign_id == seeded.campaign_id, Episode.placed > 0)
            .order_by((Episode.clock_end_s - Episode.clock_start_s).desc())
        )
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        ep.clock_end_s = ep.clock_start_s + episode_s  # make it exactly the length asked for
    spec = RecordingSpec(duration_s=episode_s, fps=fps, width=640, height=480, telemetry_hz=100.0,
                         picks_s=tuple(np.arange(5.0, episode_s - 5, 20.0)))  # fmt: skip
    t0 = time.perf_counter()
    archived = attach_recording(
        sessions=app.state.web.session_factory,
        store=app.state.web.store,
        uid=uid,
        spool=tmp / "spool",
        spec=spec,
    )
    frames = archived.manifest["cameras"]["exterior"]["frames"]
    took = time.perf_counter() - t0
    print(f"recording: {episode_s:g} s, 2 × 640×480 @ {fps} fps ({frames} frames each), "
          f"{int(episode_s * 100)} telemetry rows, in {took:.1f} s")  # fmt: skip
    return seeded.campaign_id, uid


def _serve(app: Any) -> tuple[str, Any, threading.Thread]:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", backlog=2048)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server, thread


# ------------------------------------------------------------ the explorer


def explorer_ready(base: str, uid: str, runs: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    from tests.browser import launch_chromium

    out = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            for i in range(runs):
                page = context.new_page()
                page.goto(f"{base}/episodes/{uid}", wait_until="commit")
                page.wait_for_selector("body[data-explorer-ready='1']", timeout=60_000)
                timing = page.evaluate(
                    """() => {
                      const ready = performance.getEntriesByName('explorer-ready')[0].startTime;
                      const nav = performance.getEntriesByType('navigation')[0];
                      const res = performance.getEntriesByType('resource');
                      const size = (f) => res.filter(f).reduce((a, r) => a + r.transferSize, 0);
                      return {ready_ms: ready, html_ms: nav.responseEnd,
                              dcl_ms: nav.domContentLoadedEventEnd,
                              telemetry_kb: size(r => r.name.includes('/telemetry')) / 1024,
                              frames_kb: size(r => r.name.includes('/frames/')) / 1024};
                    }"""
                )
                timing["cold"] = i == 0
                out.append(timing)
                page.close()
        finally:
            browser.close()
    return out


def load_sections(base: str, cid: int, uid: str, args: argparse.Namespace) -> None:
    urls = {
        "static file (baseline)": "/static/css/proctor.css",
        "leaderboard page": f"/leaderboard/{cid}",
        "leaderboard JSON": f"/api/leaderboard/{cid}",
        "policy page": f"/leaderboard/{cid}/policies/alpha",
        "explorer page": f"/episodes/{uid}",
        "explorer JSON": f"/api/episodes/{uid}",
        "explorer telemetry (2400 pts)": f"/api/episodes/{uid}/telemetry?max_points=2400",
    }
    import httpx

    for path in urls.values():  # warm the caches once, check every URL answers
        r = httpx.get(base + path, timeout=60)
        if r.status_code != 200:
            raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")
    # what each request costs the server, whatever else the machine is doing:
    # CPU time of this process (the server's) over sequential requests
    print(f"\n== server CPU per request: one client, sequential, {args.cpu_requests} "
          f"requests per URL (load avg {os.getloadavg()[0]:.1f}) ==")  # fmt: skip
    print(f"{'URL':32s} {'CPU ms':>8s} {'×base':>7s} {'req/s per core':>15s}")
    cpu = {}
    for name, path in urls.items():
        before = time.process_time()
        run_load(base, path, 1, 0.0, None, requests=args.cpu_requests)
        cpu[name] = (time.process_time() - before) / args.cpu_requests * 1e3
    for name, ms in cpu.items():
        print(f"{name:32s} {ms:8.2f} {ms / cpu['static file (baseline)']:6.2f}× "
              f"{1000 / ms:15.0f}")  # fmt: skip
    for mode, rate in (("closed loop: back-to-back requests", None),
                       ("paced: 1 request/s per client", 1.0)):  # fmt: skip
        load = os.getloadavg()[0]
        print(f"\n== {args.clients} concurrent clients from a second process, {mode}, "
              f"{args.seconds:g} s per URL (load avg {load:.1f}) ==")  # fmt: skip
        print(f"{'URL':32s} {'p50 ms':>8s} {'p99 ms':>8s} {'req/s':>8s} {'errors':>7s}"
              f" {'p50 ×base':>10s} {'p99 ×base':>10s}")  # fmt: skip
        results = {}
        for name, path in urls.items():
            results[name] = run_load(base, path, args.clients, args.seconds, rate)
        b = results["static file (baseline)"]
        for name, res in results.items():
            r50, r99 = res["p50"] / b["p50"], res["p99"] / b["p99"]
            print(f"{name:32s} {res['p50']:8.1f} {res['p99']:8.1f} {res['rps']:8.0f} "
                  f"{res['errors']:7d} {r50:9.2f}× {r99:9.2f}×")  # fmt: skip
        p99 = results["leaderboard page"]["p99"]
        verdict = "MET" if p99 < TARGET_LEADERBOARD_P99_MS else "MISSED"
        print(f"leaderboard page p99 vs the {TARGET_LEADERBOARD_P99_MS:.0f} ms target: "
              f"{verdict} ({p99:.1f} ms)")  # fmt: skip


# ------------------------------------------------ proctor serve --workers N


def _proctor_serve(env: dict[str, str], workers: int, log: Path) -> tuple[str, subprocess.Popen]:
    """``proctor serve --workers N`` on a free loopback port; (base URL, process)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "proctor", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--no-migrate", "--workers", str(workers)]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"proctor serve exited:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(base + "/api/health", timeout=5).status_code == 200:
                return base, proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"proctor serve did not answer:\n{log.read_text(errors='replace')}")


def explorer_workers(url: str, tmp: Path, secret: str, uid: str, args: argparse.Namespace) -> None:
    import httpx

    path = f"/episodes/{uid}"
    print(f"\n== explorer page, {args.clients} closed-loop clients, {args.seconds:g} s, "
          f"proctor serve --workers N ==")  # fmt: skip
    print(f"{'workers':>7s} {'shared cache':>13s} {'p50 ms':>8s} {'p99 ms':>8s} {'req/s':>8s} "
          f"{'errors':>7s} {'load avg':>9s}")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env |= {"PROCTOR_ENV": "test", "PROCTOR_DATA_DIR": str(tmp), "PROCTOR_DATABASE_URL": url,
            "PROCTOR_SECRET_KEY": secret}  # fmt: skip
    results = {}
    for workers in args.workers:
        for cached in (True, False):
            extra = {} if cached else {"PROCTOR_WEB__SHARED_CACHE_S": "0"}
            log = tmp / f"serve-{workers}-{int(cached)}.log"
            base, proc = _proctor_serve(env | extra, workers, log)
            try:
                for _ in range(4 * workers):  # every worker has rendered it once
                    httpx.get(base + path, timeout=60).raise_for_status()
                load = os.getloadavg()[0]
                res = run_load(base, path, args.clients, args.seconds, None)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            results[workers, cached] = res
            print(f"{workers:7d} {'on' if cached else 'off':>13s} {res['p50']:8.1f} "
                  f"{res['p99']:8.1f} {res['rps']:8.0f} {res['errors']:7d} "
                  f"{load:9.1f}")  # fmt: skip
    if (2, True) in results:
        p99 = results[2, True]["p99"]
        verdict = "MET" if p99 < TARGET_EXPLORER_PAGE_P99_MS else "MISSED"
        print(f"explorer page p99 with 2 workers vs the {TARGET_EXPLORER_PAGE_P99_MS:.0f} ms "
              f"target: {verdict} ({p99:.1f} ms)")  # fmt: skip


# ------------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        load_main()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--episode-s", type=float, default=240.0)
    ap.add_argument("--explorer-runs", type=int, default=5)
    ap.add_argument("--cpu-requests", type=int, default=200)
    ap.add_argument("--skip-load", action="store_true", help="only the explorer-ready figures")
    ap.add_argument("--workers", type=lambda v: [int(n) for n in v.split(",")], default=[1, 2],
                    help="worker counts for the explorer page under proctor serve")  # fmt: skip
    ap.add_argument("--workers-only", action="store_true",
                    help="only the explorer page under proctor serve --workers N")  # fmt: skip
    args = ap.parse_args()

    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.getLogger("proctor.web.auth.sessions").setLevel(logging.ERROR)
    from proctor.core.db import migrate
    from proctor.core.settings import load_settings
    from proctor.web.app import create_app
    from proctor.web.templating import compile_all

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="proctor-bench-web-") as tmp_name:
        tmp = Path(tmp_name)
        url = f"sqlite:///{tmp / 'proctor.db'}"
        migrate.upgrade(url)
        secret = "bench-" + "x" * 40
        settings = load_settings(env="test", data_dir=tmp, database_url=url, secret_key=secret)
        app = create_app(settings)
        compile_all(app.state.web.templates)  # as `proctor serve` does before it listens
        cid, uid = _seed(app, tmp, fps=args.fps, episode_s=args.episode_s)
        if args.workers_only:
            app.state.web.engine.dispose()
            explorer_workers(url, tmp, secret, uid, args)
            return
        base, server, thread = _serve(app)
        try:
            # first, while nothing has asked for the episode yet: a truly cold open
            print(f"\n== explorer ready: a {args.episode_s:g} s episode, headless Chromium, "
                  f"no other load (load avg {os.getloadavg()[0]:.1f}) ==")  # fmt: skip
            runs = explorer_ready(base, uid, args.explorer_runs)
            for r in runs:
                kind = "cold" if r["cold"] else "warm"
                print(f"{kind}: ready {r['ready_ms']:7.0f} ms (HTML {r['html_ms']:.0f} ms, "
                      f"DOM {r['dcl_ms']:.0f} ms; telemetry {r['telemetry_kb']:.0f} KiB, "
                      f"frame tables {r['frames_kb']:.0f} KiB)")  # fmt: skip
            warm = [r["ready_ms"] for r in runs if not r["cold"]] or [runs[0]["ready_ms"]]
            median = statistics.median(warm) / 1e3
            cold = runs[0]["ready_ms"] / 1e3
            for label, value in (("median of warm runs", median), ("cold, first open", cold)):
                verdict = "MET" if value < TARGET_EXPLORER_READY_S else "MISSED"
                print(f"explorer ready ({label}) vs the {TARGET_EXPLORER_READY_S:g} s target: "
                      f"{verdict} ({value:.2f} s)")  # fmt: skip
            if not args.skip_load:
                load_sections(base, cid, uid, args)
        finally:
            server.should_exit = True
            thread.join(timeout=15)
            app.state.web.engine.dispose()
        if not args.skip_load:
            explorer_workers(url, tmp, secret, uid, args)


if __name__ == "__main__":
    main()
