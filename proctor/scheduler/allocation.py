"""The allocation: a pure function (seed, protocol) → ordered slots.

No database, no clock, no global randomness: everything random comes from
the campaign's allocation seed through a SHA-256 counter stream, so anyone
holding the revealed seed and the published protocol can re-derive the
allocation with a few lines of code in any language. ``proctor/scheduler/README.md``
spells the derivation out step by step; keep the two in sync, and bump
``ALGORITHM`` whenever the derivation changes (old campaigns keep verifying
under the version recorded with them).

Design (TRI LBM "test bundles", PhAIL App. G):

* a **block** is one (object, spatial configuration) with every policy —
  the human reference included — exactly once, in a random order, so drift
  over the day hits all policies alike;
* a **round** is one block for every (object, configuration) pair, in a
  random order, so after every complete round all cells are exactly balanced;
* each object needs ``episodes_per_cell`` blocks; ``episodes_per_cell // C``
  full rounds, then a partial round in which each object takes
  ``episodes_per_cell % C`` configurations, rotated Latin-square fashion
  through a random permutation so that per-configuration totals differ by at
  most one across objects as well.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from proctor.core.domain import Side

ALGORITHM = "proctor-blocks-v1"
_T = TypeVar("_T")
_TWO_64 = 1 << 64


@dataclass(frozen=True, order=True)
class SpatialConfig:
    """Outbound tote side × external camera side (PhAIL App. G)."""

    tote: Side
    camera: Side

    @property
    def label(self) -> str:
        return f"tote {self.tote.value} / camera {self.camera.value}"

    def as_dict(self) -> dict[str, str]:
        return {"tote": self.tote.value, "camera": self.camera.value}


ALL_CONFIGS: tuple[SpatialConfig, ...] = tuple(
    SpatialConfig(tote, camera) for tote in Side for camera in Side
)


@dataclass(frozen=True)
class AllocationProtocol:
    """Exactly what the derivation reads, in canonical order.

    ``policies`` and ``objects`` are database ids sorted ascending;
    ``configs`` are sorted by (tote, camera). Frozen into the campaign when
    it starts, so later changes (a policy deactivated) cannot alter it.
    """

    policies: tuple[int, ...]
    objects: tuple[int, ...]
    configs: tuple[SpatialConfig, ...]
    episodes_per_cell: int
    algorithm: str = ALGORITHM
    # the adaptive rule (proctor.scheduler.adaptive_rule), validated there; it
    # changes only which policy later slots go to, never the blocks
    adaptive: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        problems = []
        if not self.policies:
            problems.append("policies: at least one is needed")
        if len(set(self.policies)) != len(self.policies):
            problems.append("policies: listed more than once")
        if not self.objects:
            problems.append("objects: at least one is needed")
        if len(set(self.objects)) != len(self.objects):
            problems.append("objects: listed more than once")
        if not self.configs:
            problems.append("spatial_configs: at least one is needed")
        if len(set(self.configs)) != len(self.configs):
            problems.append("spatial_configs: listed more than once")
        if self.episodes_per_cell < 1:
            problems.append("episodes_per_cell: must be at least 1")
        if self.algorithm != ALGORITHM:
            problems.append(f"algorithm: {self.algorithm!r} is not {ALGORITHM!r}")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def canonical(
        cls,
        policies: Sequence[int],
        objects: Sequence[int],
        configs: Sequence[SpatialConfig],
        episodes_per_cell: int,
        adaptive: dict[str, Any] | None = None,
    ) -> AllocationProtocol:
        return cls(
            policies=tuple(sorted(policies)),
            objects=tuple(sorted(objects)),
            configs=tuple(sorted(configs)),
            episodes_per_cell=episodes_per_cell,
            adaptive=adaptive,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "policies": list(self.policies),
            "objects": list(self.objects),
            "spatial_configs": [c.as_dict() for c in self.configs],
            "episodes_per_cell": self.episodes_per_cell,
        }
        # absent, not null, when fixed: older campaigns' digests stay as published
        if self.adaptive is not None:
            out["adaptive"] = self.adaptive
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AllocationProtocol:
        try:
            return cls(
                policies=tuple(int(p) for p in data["policies"]),
                objects=tuple(int(o) for o in data["objects"]),
                configs=tuple(
                    SpatialConfig(Side(c["tote"]), Side(c["camera"]))
                    for c in data["spatial_configs"]
                ),
                episodes_per_cell=int(data["episodes_per_cell"]),
                algorithm=str(data["algorithm"]),
                adaptive=dict(data["adaptive"]) if data.get("adaptive") is not None else None,
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an allocation protocol: {exc!r}") from None

    def digest(self) -> str:
        """SHA-256 of the canonical JSON: published with the commitment."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def block_count(self) -> int:
        return len(self.objects) * self.episodes_per_cell

    @property
    def slot_count(self) -> int:
        return self.block_count * len(self.policies)


@dataclass(frozen=True)
class Slot:
    sequence: int  # global order, 0-based
    block_index: int
    slot: int  # position within the block
    policy_id: int
    object_type_id: int
    config: SpatialConfig


def commitment(seed: str) -> str:
    """The published commitment: SHA-256 (hex) of the seed's ASCII text."""
    return hashlib.sha256(seed.encode("ascii")).hexdigest()


def verify_commitment(seed: str, published: str) -> bool:
    return hmac.compare_digest(commitment(seed), published.lower())


class SeedStream:
    """Uniform integers from a seed, by SHA-256 in counter mode.

    Draw *k* under label *L* is the first 8 bytes, big-endian, of
    ``SHA-256(ascii(f"{seed}/{L}/{k}"))``; each label has its own counter from 0.
    ``below(n)`` rejects draws ≥ the largest multiple of n under 2**64, so
    every integer in [0, n) is exactly equally likely.
    """

    def __init__(self, seed: str) -> None:
        if not seed or not seed.isascii():
            raise ValueError("the allocation seed must be non-empty ASCII text")
        self._seed = seed
        self._counters: dict[str, int] = {}

    def _draw(self, label: str) -> int:
        k = self._counters.get(label, 0)
        self._counters[label] = k + 1
        digest = hashlib.sha256(f"{self._seed}/{label}/{k}".encode("ascii")).digest()
        return int.from_bytes(digest[:8], "big")

    def below(self, n: int, label: str) -> int:
        if n < 1:
            raise ValueError("n must be positive")
        limit = _TWO_64 - (_TWO_64 % n)
        while True:
            u = self._draw(label)
            if u < limit:
                return u % n

    def shuffle(self, items: Sequence[_T], label: str) -> list[_T]:
        """Fisher–Yates (Durstenfeld): for i = n−1 … 1, swap i with below(i+1)."""
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1, label)
            out[i], out[j] = out[j], out[i]
        return out


def block_cells(stream: SeedStream, protocol: AllocationProtocol) -> list[tuple[int, int]]:
    """The blocks in order, as (object index, config index) into the protocol."""
    n_obj, n_cfg = len(protocol.objects), len(protocol.configs)
    full_rounds, remainder = divmod(protocol.episodes_per_cell, n_cfg)
    blocks: list[tuple[int, int]] = []
    for r in range(full_rounds):
        cells = [(o, c) for o in range(n_obj) for c in range(n_cfg)]
        blocks.extend(stream.shuffle(cells, f"round:{r}"))
    if remainder:
        perm = stream.shuffle(list(range(n_cfg)), "remainder-configs")
        cells = [(o, perm[(o + k) % n_cfg]) for o in range(n_obj) for k in range(remainder)]
        blocks.extend(stream.shuffle(cells, f"round:{full_rounds}"))
    return blocks


def derive_allocation(seed: str, protocol: AllocationProtocol) -> list[Slot]:
    """Every slot of the campaign, in the order stations claim them."""
    stream = SeedStream(seed)
    slots: list[Slot] = []
    n_pol = len(protocol.policies)
    for b, (o, c) in enumerate(block_cells(stream, protocol)):
        order = stream.shuffle(list(range(n_pol)), f"block:{b}")
        for s, p in enumerate(order):
            slots.append(
                Slot(
                    sequence=b * n_pol + s,
                    block_index=b,
                    slot=s,
                    policy_id=protocol.policies[p],
                    object_type_id=protocol.objects[o],
                    config=protocol.configs[c],
                )
            )
    return slots
