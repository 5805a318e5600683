"""Run with the LeRobot environment's python: load an exported dataset with
``LeRobotDataset``, iterate every frame (decoding the videos) and print what
the test compares with the recording, as JSON. Arguments: the dataset folder
and, optionally, a stride (every n-th frame; default every frame)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lerobot.datasets.lerobot_dataset import LeRobotDataset

CODE_BITS = 10  # tests/web/recordings.py: frame index as stripes, LSB left


def code(image) -> int:  # (C, H, W) floats in [0, 1]
    _, height, width = image.shape
    stripe = width // CODE_BITS
    row = image[:, height // 3, :].mean(dim=0)
    return sum(1 << i for i in range(CODE_BITS) if float(row[i * stripe + stripe // 2]) > 0.5)


def main(root: Path, stride: int) -> None:
    # pyav: torchcodec (LeRobot's default) needs FFmpeg's libraries on the system,
    # PyAV brings its own
    ds = LeRobotDataset("proctor/export-test", root=root, video_backend="pyav")
    frames = []
    for i in range(0, len(ds), stride):
        item = ds[i]
        frames.append(
            {
                "index": int(item["index"]),
                "episode_index": int(item["episode_index"]),
                "frame_index": int(item["frame_index"]),
                "timestamp": float(item["timestamp"]),
                "task": item["task"],
                "state": item["observation.state"].tolist(),
                "capture_time": float(item["observation.capture_time"]),
                "action": item["action"].tolist(),
                "requested": item["action.requested"].tolist(),
                "placement": int(item["annotation.placement"]),
                "operator_event": int(item["annotation.operator_event"]),
                "envelope_event": int(item["annotation.envelope_event"]),
                "outcome": int(item["annotation.outcome"]),
                "exterior": code(item["observation.images.exterior"]),
                "wrist": code(item["observation.images.wrist"]),
                "shape": list(item["observation.images.exterior"].shape),
            }
        )
    summary = {
        "fps": ds.fps,
        "num_frames": ds.num_frames,
        "num_episodes": ds.num_episodes,
        "lengths": [int(ep["length"]) for ep in ds.meta.episodes],
        "uids": [ep["proctor/episode_uid"] for ep in ds.meta.episodes],
        "policies": [ep["proctor/policy"] for ep in ds.meta.episodes],
        "video_keys": ds.meta.video_keys,
        "stats_keys": sorted(ds.meta.stats),
        "frames": frames,
        # every frame's placement count (from the table: no video decoding)
        "placements": [int(x) for x in ds.hf_dataset["annotation.placement"]],
        "episode_of": [int(x) for x in ds.hf_dataset["episode_index"]],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
