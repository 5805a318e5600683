"""The in-process baseline of ``benchmarks/runners.py``: the runner's LeRobot
policy called directly, in the LeRobot environment, with no wire at all.

Run by the environment's python (not proctor's: it imports torch and lerobot,
never proctor):

    python _lerobot_inprocess.py HELPERS_DIR OBSERVATIONS.npz -- SERVER ARGS...

``SERVER ARGS`` are the arguments the runner gives ``servers/lerobot_server.py``
(``--policy``, ``--chunk-length``, ``--prompts``, …): the policy is loaded by
that very module's ``Served``, as the server loads it. Then each line read
on stdin names an observation of the npz (its index); the reply line is the
time ``Served.infer`` took on it, in milliseconds. Timing is done here, so
the pipe that paces the calls costs nothing measured.

``infer`` runs on a worker thread, as the server runs it
(``asyncio.to_thread``): with torch's OpenMP pool on a loaded 2-core machine
the same call from the main thread measured several times slower (median
~500 ms against ~100 ms, by turns in one process), which would make the
baseline measure that, not the policy.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

CAMERAS = ("observation/exterior_image_1_left", "observation/wrist_image_left")


def observations(path: Path) -> list[dict[str, object]]:
    """The benchmark's observations: arrays ``<key>/<i>`` and the prompt."""
    data = np.load(path)
    count = int(data["count"])
    keys = sorted({name.rsplit("/", 1)[0] for name in data.files if name != "count"})
    return [
        {key: data[f"{key}/{i}"] for key in keys} | {"prompt": "put the items into the target bin"}
        for i in range(count)
    ]


def main() -> int:
    helpers, npz = Path(sys.argv[1]), Path(sys.argv[2])
    server_args = sys.argv[sys.argv.index("--") + 1 :]
    sys.path.insert(0, str(helpers))
    import lerobot_server  # the runner's own server module, from servers/

    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--chunk-length", type=int, required=True)
    parser.add_argument("--prompts", default="{}")
    parser.add_argument("--device", default=None)
    args, _ = parser.parse_known_args(server_args)
    served = lerobot_server.Served(args.policy, args)
    obs = observations(npz)
    print("ready", flush=True)
    with ThreadPoolExecutor(max_workers=1) as worker:
        for line in sys.stdin:
            print(f"{worker.submit(timed_infer, served, obs[int(line)]).result():.6f}", flush=True)
    return 0


def timed_infer(served: object, observation: dict[str, object]) -> float:
    t0 = time.perf_counter()
    served.infer(observation)  # type: ignore[attr-defined]
    return (time.perf_counter() - t0) * 1e3


if __name__ == "__main__":
    sys.exit(main())
