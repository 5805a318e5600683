"""Recording the observations the conformance check sends.

Run once (``python -m proctor.station.tools.record_conformance``) and commit the
file it writes, ``proctor/policywire/conformance/observations.npz``: a
short episode on the simulated cell, driven by the ``reference`` demo policy
through the real episode runner, with a recording policy server in between
that keeps what the station sent. The server asks for images at the cameras'
own size (RoboArena metadata without ``image_resolution``), so the check can
resize them to whatever each server it checks asks for, exactly as the
station would.

The file holds, per observation: both cameras' images (H×W×3 uint8), the
joint positions, the end-effector pose as DROID's 6-vector, the gripper
position, and the simulated cell's privileged ``sim/…`` keys; plus the
prompt and where it came from. Only the check reads it (``conformance.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.wire import keys

# the protocol layer reads the file; this tool lives in the station because it
# runs the station's episode runner
OUT = Path(__file__).resolve().parents[2] / "policywire" / "conformance" / "observations.npz"
OBJECT = "spoons"
ITEMS = 2
SEED = 7


class _RecordingPolicy:
    """The reference demo policy, asking for full-size images and keeping a
    copy of every observation it is sent."""

    def __init__(self) -> None:
        self.inner = DemoPolicy("reference", seed=SEED)
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def metadata(self) -> dict[str, Any]:
        meta = dict(self.inner.metadata())
        meta["image_resolution"] = None  # the cameras' own size
        meta["needs_session_id"] = False
        return meta

    def new_session(self) -> Any:
        session = self.inner.new_session()
        outer = self

        class _Session:
            def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
                with outer.lock:
                    outer.seen.append({k: np.array(v, copy=True) for k, v in observation.items()})
                return session.infer(observation)

            def reset(self, message: dict[str, Any]) -> None:
                session.reset(message)

        return _Session()


def record(out: Path = OUT, count: int = 10, width: int = 320, height: int = 240) -> Path:
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import make_engine, make_session_factory, migrate
    from proctor.core.domain import Side
    from proctor.core.work import Work
    from proctor.policywire.serving.openpi import PolicyServer
    from proctor.station.config import load_station_config
    from proctor.station.episode_runner import EpisodeRunner
    from proctor.station.profiles import build_cell

    policy = _RecordingPolicy()
    cfg = load_station_config(
        None,
        cameras={
            "exterior": {"width": width, "height": height, "fps": 15},
            "wrist": {"width": width, "height": height, "fps": 15},
        },
    )
    with tempfile.TemporaryDirectory(prefix="proctor-record-") as tmp_dir:
        tmp = Path(tmp_dir)
        url = f"sqlite:///{tmp / 'record.db'}"
        migrate.upgrade(url)
        engine = make_engine(url)
        server = PolicyServer(policy).start()
        try:
            runner = EpisodeRunner(
                build_cell("sim", cfg),
                config=cfg,
                sessions=make_session_factory(engine),
                store=LocalArtifactStore(tmp / "artifacts"),
                spool_root=tmp / "spool",
            )
            runner.open()
            try:
                runner.arm(
                    Work(
                        run_code="R-RECORD",
                        object_name=OBJECT,
                        items=ITEMS,
                        per_item_cap_s=30.0,
                        tote_side=Side.left,
                        camera_side=Side.right,
                        policy_url=server.url,
                        sim_seed=SEED,
                    )
                )
                runner.start(background=False)
            finally:
                runner.close()
        finally:
            server.stop()
            engine.dispose()
    seen = policy.seen
    if len(seen) < count:
        raise RuntimeError(f"the episode made only {len(seen)} policy calls; need {count}")
    # spread over the episode: the start, the reach, the grasp, the carry, the release
    picks = np.unique(np.linspace(0, len(seen) - 1, count).round().astype(int))
    obs = [seen[i] for i in picks]
    n_items = max(len(o[keys.SIM_ITEMS]) for o in obs)

    def stack(key: str, dtype: Any) -> np.ndarray:
        return np.stack([np.asarray(o[key], dtype=dtype) for o in obs])

    items = np.zeros((len(obs), n_items, 4))
    for i, o in enumerate(obs):
        items[i, : len(o[keys.SIM_ITEMS])] = o[keys.SIM_ITEMS]
    np.savez_compressed(
        out,
        exterior=stack(keys.exterior_image(keys.EXTERIOR_FIRST_INDEX), np.uint8),
        wrist=stack(keys.OBS_WRIST_IMAGE, np.uint8),
        joint_position=stack(keys.OBS_JOINT_POSITION, np.float32),
        cartesian_position=stack(keys.OBS_CARTESIAN_POSITION, np.float32),
        gripper_position=stack(keys.OBS_GRIPPER_POSITION, np.float32),
        sim_items=items,
        sim_source_bin=stack(keys.SIM_SOURCE_BIN, np.float64),
        sim_target_bin=stack(keys.SIM_TARGET_BIN, np.float64),
        sim_bin_height=stack(keys.SIM_BIN_HEIGHT, np.float64),
        sim_seed=stack(keys.SIM_SEED, np.int64),
        sim_t=stack(keys.SIM_TIME, np.float64),
        prompt=np.array(str(obs[0][keys.OBS_PROMPT])),
        source=np.array(
            f"simulated cell, {ITEMS} {OBJECT}, seed {SEED}, reference demo policy; "
            f"calls {', '.join(str(int(i)) for i in picks)} of {len(seen)}"
        ),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    path = record(args.out, args.count)
    sys.stdout.write(f"wrote {path} ({path.stat().st_size} bytes)\n")


if __name__ == "__main__":
    main()
