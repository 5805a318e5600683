"""Serve a LeRobot checkpoint over the openpi wire (runs inside the sandbox).

Runs in the LeRobot environment with its own packages only (stdlib, numpy,
torch, lerobot, msgpack, websockets): it never imports proctor. The wire is
the one the station's policy client and openpi_client speak:

* on connect, the metadata: a msgpack map ``{"action_space", "action_horizon"}``;
* then each binary frame is an observation (msgpack-numpy, openpi's DROID
  keys) and each reply ``{"actions": (chunk_length, D) float32,
  "server_timing": {"infer_ms": …}}``;
* a request that fails is answered as openpi's server does: the error's
  text as a text frame, then close code 1011.

Arrays are msgpack maps ``{b"__ndarray__": True, b"data", b"dtype",
b"shape"}`` with bytes keys (openpi's msgpack_numpy); object, void and
complex dtypes are refused both ways (how pickle gets in).

The batch: ``observation.state`` = the 7 joint positions then the gripper's
position; ``observation.images.<camera>`` = the station's image for that
camera, resized to the feature's (H, W), as float CHW in [0, 1]; the task is
the prompt. With LeRobot's saved processors in the folder they normalise the
batch and unnormalise the actions; without them the policy sees the batch as
is (identity normalisation). Each request is answered from its observation
alone: the policy is reset first (a policy with ``n_obs_steps`` > 1 sees the
observation repeated, as LeRobot does at an episode's start), then
``select_action`` is called ``chunk_length`` times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import torch
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

log = logging.getLogger("lerobot_server")

STATE = "observation.state"
IMAGE_PREFIX = "observation.images."
# the station's (openpi DROID) observation keys
CAMERA_KEYS = {
    "exterior": "observation/exterior_image_1_left",
    "wrist": "observation/wrist_image_left",
}
JOINTS = "observation/joint_position"
GRIPPER = "observation/gripper_position"
PROMPT = "prompt"
_REFUSED_KINDS = ("O", "V", "c")


# -- msgpack-numpy ------------------------------------------------------------
def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in _REFUSED_KINDS:
            raise ValueError(f"refusing to send a {obj.dtype} array")
        arr = np.ascontiguousarray(obj)
        return {
            b"__ndarray__": True,
            b"data": arr.tobytes(),
            b"dtype": arr.dtype.str,
            b"shape": list(arr.shape),
        }
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _get(obj: dict[Any, Any], key: bytes) -> Any:
    return obj[key] if key in obj else obj.get(key.decode())


def _hook(obj: dict[Any, Any]) -> Any:
    if _get(obj, b"__ndarray__") is True:
        dtype = np.dtype(_get(obj, b"dtype"))
        if dtype.kind in _REFUSED_KINDS:
            raise ValueError(f"refusing an array of dtype kind '{dtype.kind}'")
        shape = tuple(int(s) for s in _get(obj, b"shape"))
        data = _get(obj, b"data")
        if not isinstance(data, bytes | bytearray):
            raise ValueError("malformed array: data is not bytes")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if _get(obj, b"__npgeneric__") is True:
        dtype = np.dtype(_get(obj, b"dtype"))
        if dtype.kind in _REFUSED_KINDS:
            raise ValueError(f"refusing a scalar of dtype kind '{dtype.kind}'")
        return dtype.type(_get(obj, b"data"))
    return obj


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_hook, raw=False, strict_map_key=False)


# -- the policy ---------------------------------------------------------------
class Served:
    """The loaded policy and how to turn a station observation into its batch."""

    def __init__(self, folder: Path, args: argparse.Namespace) -> None:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        config = PreTrainedConfig.from_pretrained(folder, local_files_only=True)
        if args.device:
            config.device = args.device
        self.device = torch.device(config.device or "cpu")
        self.policy = get_policy_class(config.type).from_pretrained(
            folder, config=config, local_files_only=True
        )
        self.policy.to(self.device)
        self.policy.eval()
        self.chunk_length = args.chunk_length
        self.cameras = {
            name.removeprefix(IMAGE_PREFIX): tuple(ft.shape)
            for name, ft in config.input_features.items()
            if name.startswith(IMAGE_PREFIX)
        }
        self.has_state = STATE in config.input_features
        self.prompts: dict[str, str] = json.loads(args.prompts or "{}")
        self.preprocess = self.postprocess = None
        if (folder / "policy_preprocessor.json").is_file():
            overrides = {"device_processor": {"device": str(self.device)}}
            self.preprocess, self.postprocess = make_pre_post_processors(
                config,
                pretrained_path=str(folder),
                preprocessor_overrides=overrides,
                postprocessor_overrides={"device_processor": {"device": "cpu"}},
            )
        log.info(
            "loaded a %s policy on %s (processors: %s)",
            config.type,
            self.device,
            "saved" if self.preprocess else "none, identity normalisation",
        )

    def _image(self, observation: dict[str, Any], camera: str, shape: tuple[int, ...]) -> Any:
        key = CAMERA_KEYS[camera]
        if key not in observation:
            raise KeyError(f"the observation has no '{key}' (camera {camera})")
        image = np.asarray(observation[key])
        if image.ndim != 3 or image.shape[-1] != 3:
            raise ValueError(f"'{key}' has shape {image.shape}; expected (H, W, 3)")
        tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float() / 255.0
        _, h, w = shape
        if tensor.shape[1:] != (h, w):
            tensor = torch.nn.functional.interpolate(
                tensor[None], size=(h, w), mode="bilinear", align_corners=False, antialias=True
            )[0]
        return tensor

    def batch(self, observation: dict[str, Any]) -> dict[str, Any]:
        batch: dict[str, Any] = {}
        if self.has_state:
            joints = np.asarray(observation[JOINTS], dtype=np.float32).reshape(-1)
            gripper = np.asarray(observation[GRIPPER], dtype=np.float32).reshape(-1)
            state = np.concatenate([joints, gripper])
            if state.shape != (8,):
                raise ValueError(f"the state has {state.shape[0]} values; expected 7 joints + 1")
            batch[STATE] = torch.from_numpy(state)
        for camera, shape in self.cameras.items():
            batch[IMAGE_PREFIX + camera] = self._image(observation, camera, shape)
        prompt = str(observation.get(PROMPT, ""))
        task = self.prompts.get(prompt, prompt)
        # every tensor gets the batch dimension and goes to the policy's device
        batch = {k: v[None].to(self.device) for k, v in batch.items()}
        batch["task"] = [task]
        return batch

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        batch = self.batch(observation)
        with torch.no_grad():
            if self.preprocess is not None:
                batch = self.preprocess(batch)
            self.policy.reset()
            rows = []
            for _ in range(self.chunk_length):
                action = self.policy.select_action(batch)
                if self.postprocess is not None:
                    action = self.postprocess(action)
                rows.append(action.reshape(-1).float().cpu().numpy())
        return np.stack(rows).astype(np.float32)


# -- the wire -----------------------------------------------------------------
class Server:
    def __init__(self, served: Served, metadata: dict[str, Any]) -> None:
        self.served = served
        self.metadata = metadata
        # one inference at a time: the model is shared by every connection
        self.lock = asyncio.Lock()

    async def handler(self, ws: ServerConnection) -> None:
        await ws.send(packb(self.metadata))
        while True:
            try:
                raw = await ws.recv()
            except ConnectionClosed:
                return
            try:
                if isinstance(raw, str):
                    raise ValueError("expected a binary msgpack message, got text")
                observation = unpackb(raw)
                if not isinstance(observation, dict):
                    raise ValueError(f"expected a map, got {type(observation).__name__}")
                start = time.monotonic()
                async with self.lock:
                    actions = await asyncio.to_thread(self.served.infer, observation)
                infer_ms = (time.monotonic() - start) * 1000.0
                await ws.send(packb({"actions": actions, "server_timing": {"infer_ms": infer_ms}}))
            except ConnectionClosed:
                return
            except Exception:
                text = traceback.format_exc()
                log.error("request failed:\n%s", text)
                try:
                    await ws.send(text)
                    await ws.close(CloseCode.INTERNAL_ERROR, "internal error; traceback sent")
                except ConnectionClosed:
                    pass
                return


async def _serve(server: Server, host: str, port: int) -> None:
    async with serve(server.handler, host, port, compression=None, max_size=None) as ws_server:
        log.info("serving on ws://%s:%d", host, port)
        await ws_server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", required=True, type=Path)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--chunk-length", required=True, type=int)
    parser.add_argument("--action-space", required=True)
    parser.add_argument("--cameras", default="exterior,wrist")
    parser.add_argument("--prompts", default="{}")
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    served = Served(args.policy, args)
    metadata = {"action_space": args.action_space, "action_horizon": args.chunk_length}
    asyncio.run(_serve(Server(served, metadata), args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
