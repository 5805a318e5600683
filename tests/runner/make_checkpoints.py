"""Make tiny, randomly initialised LeRobot checkpoints with LeRobot itself.

Run by the LeRobot environment's python (tests/runner/conftest.py): an ACT
policy saved with its pre/post-processors (unit normalisation stats, actions
around ACTION_MEAN) and a
diffusion policy saved without (the server's identity path). Features are the
station's mapping (proctor/runner/README.md). Nothing is downloaded: no
pretrained backbone, HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
from lerobot.policies.factory import make_pre_post_processors

IMAGE = (3, 64, 48)


def features(state: int = 8, action: int = 8) -> tuple[dict, dict]:
    inputs = {
        "observation.state": PolicyFeature(FeatureType.STATE, (state,)),
        "observation.images.exterior": PolicyFeature(FeatureType.VISUAL, IMAGE),
        "observation.images.wrist": PolicyFeature(FeatureType.VISUAL, IMAGE),
    }
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (action,))}
    return inputs, outputs


# the ACT checkpoint's actions are unnormalised around this: a reply near it
# shows the saved post-processor ran
ACTION_MEAN = 100.0
GENTLE_STD = 0.05


def stats(action_mean: float = ACTION_MEAN, action_std: float = 1.0) -> dict:
    def unit(shape: tuple[int, ...], mean: float = 0.0, std: float = 1.0) -> dict:
        return {"mean": torch.full(shape, mean), "std": torch.full(shape, std)}

    image = {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)}
    return {
        "observation.state": unit((8,)),
        "observation.images.exterior": image,
        "observation.images.wrist": image,
        "action": unit((8,), action_mean, action_std),
    }


def make_act(out: Path, action_mean: float = ACTION_MEAN, action_std: float = 1.0) -> None:
    inputs, outputs = features()
    config = ACTConfig(
        input_features=inputs,
        output_features=outputs,
        device="cpu",
        chunk_size=10,
        n_action_steps=10,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    torch.manual_seed(0)
    policy = ACTPolicy(config)
    policy.save_pretrained(out)
    pre, post = make_pre_post_processors(config, dataset_stats=stats(action_mean, action_std))
    pre.save_pretrained(out)
    post.save_pretrained(out)


def make_diffusion(out: Path) -> None:
    inputs, outputs = features()
    config = DiffusionConfig(
        input_features=inputs,
        output_features=outputs,
        device="cpu",
        n_obs_steps=2,
        horizon=8,
        n_action_steps=4,
        down_dims=(16, 32),
        kernel_size=3,
        n_groups=4,
        diffusion_step_embed_dim=16,
        spatial_softmax_num_keypoints=4,
        num_train_timesteps=10,
        num_inference_steps=2,
        crop_shape=None,
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    torch.manual_seed(0)
    DiffusionPolicy(config).save_pretrained(out)


if __name__ == "__main__":
    root = Path(sys.argv[1])
    make_act(root / "act")
    # small joint velocities around zero (rad/s): a random policy that can run
    # whole episodes on the simulated cell without the envelope stopping it
    make_act(root / "act-gentle", action_mean=0.0, action_std=GENTLE_STD)
    make_diffusion(root / "diffusion")
    print("made", root)
