"""The load of security review round three, [N2], from a second process: the
unfiltered leaderboard's latency alone, then while bursts of requests run
(tests/web/test_leaderboard_load.py).

    python -m tests.web.subset_load BASE CONTROL_PATH CONCURRENCY SERVER_PID < phases.json

``phases.json``: ``{"rounds": N, "phases": {name: [path, …]}}``; each round
runs every phase once, in order. Prints one JSON object: the control's
latencies idle and under each phase's burst per round (seconds), each
burst's status counts, how long it took and the CPU seconds the server
process spent meanwhile (from /proc: unlike latency, not moved by whatever
else the machine runs). A second process, so that the
burst's own client does not share the server's interpreter.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

IDLE_REQUESTS = 100
CONTROL_LOOPS = 4  # readers of the unfiltered board during a burst
DEADLINE_S = 120.0  # one burst; what is left then is counted as status 0


async def _control(client: httpx.AsyncClient, path: str, until: asyncio.Event) -> list[float]:
    times: list[float] = []
    while not until.is_set():
        started = time.perf_counter()
        r = await client.get(path)
        times.append(time.perf_counter() - started)
        assert r.status_code == 200, r.status_code
        await asyncio.sleep(0.01)  # a reader, not a flood
    return times


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text("ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _burst(
    base: str, control: str, concurrency: int, paths: list[str], pid: int
) -> dict[str, object]:
    limits = httpx.Limits(max_connections=concurrency)
    async with (
        httpx.AsyncClient(base_url=base, timeout=DEADLINE_S) as ctl,
        httpx.AsyncClient(base_url=base, timeout=DEADLINE_S, limits=limits) as load,
    ):
        queue: asyncio.Queue[str] = asyncio.Queue()
        for p in paths:
            queue.put_nowait(p)
        codes: Counter[int] = Counter()

        async def worker() -> None:
            while not queue.empty():
                r = await load.get(queue.get_nowait())
                codes[r.status_code] += 1

        done = asyncio.Event()
        readers = [asyncio.create_task(_control(ctl, control, done)) for _ in range(CONTROL_LOOPS)]
        started, cpu = time.perf_counter(), _cpu_s(pid)
        try:
            await asyncio.wait_for(
                asyncio.gather(*(worker() for _ in range(concurrency))), DEADLINE_S
            )
        except TimeoutError:
            codes[0] += queue.qsize()
        took, cpu = time.perf_counter() - started, _cpu_s(pid) - cpu
        done.set()
        control_s = [t for r in readers for t in await r]
    return {"control": control_s, "codes": dict(codes), "load_s": took, "server_cpu_s": cpu}


async def main(
    base: str, control: str, concurrency: int, pid: int, plan: dict
) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=base, timeout=DEADLINE_S) as ctl:
        idle: list[float] = []
        for _ in range(IDLE_REQUESTS):
            started = time.perf_counter()
            assert (await ctl.get(control)).status_code == 200
            idle.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
    rounds = []
    for _ in range(plan["rounds"]):
        rounds.append(
            {
                name: await _burst(base, control, concurrency, paths, pid)
                for name, paths in plan["phases"].items()
            }
        )
    return {"idle": idle, "rounds": rounds}


if __name__ == "__main__":
    base, control, concurrency, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(main(base, control, concurrency, pid, json.load(sys.stdin)))))
