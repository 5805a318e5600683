"""Pre-registered interaction tests: does a scene factor change a pair's
effect, or a policy's HRT? (docs/methods.md, "Where a policy is weak").

A *factor* labels each episode with a level: the tote side, the external
camera's side, the station, or — for an object tag ``object_tag:<tag>`` —
whether the episode's object carries the tag. For one pair (A, B) the
*effect at a level* is the macro RMST difference over the shared objects,
each object's RMST computed on that level's episodes only
(``rmst_difference``); for a policy against the reference it is the HRT,
100 · RMST_ref / RMST_policy per object, averaged (``hrt``). The statistic
is the spread of the effect across levels (its variance, unweighted); the
p-value is a permutation test with the +1 correction, ``(1 + #{S* ≥ S}) /
(1 + K)``:

* an episode-level factor is permuted among the episodes of each
  (policy, object) cell — the level counts of every cell are kept, so the
  test is exact under the null that the factor changes neither policy's
  times (the sharp null; a factor that shifts both policies alike is not
  guaranteed to be held at α, docs/methods.md says what that means);
* an object-level factor (a tag) is permuted among the shared objects, one
  permutation for both policies (with few objects the p-value is coarse:
  at least 1 / (number of distinct assignments)).

The factors to test are named in the protocol before the data are seen
(``AnalysisProtocol.interaction_factors``: pre-registered); only those are tested.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from proctor.analysis.episodes import Episode
from proctor.analysis.km import risk_set, rmst, survival
from proctor.analysis.operations import extract_operations

EPISODE_UNIT = "episode"
OBJECT_UNIT = "object"


@dataclass(frozen=True)
class Factor:
    name: str
    unit: str  # EPISODE_UNIT | OBJECT_UNIT
    level: Callable[[Episode], str | None]  # None: unknown (the episode is left out)


def _tote(_: str) -> Factor:
    return Factor("tote_side", EPISODE_UNIT, lambda e: e.tote_placement)


def _camera(_: str) -> Factor:
    return Factor("camera_side", EPISODE_UNIT, lambda e: e.external_camera)


def _station(_: str) -> Factor:
    return Factor("station", EPISODE_UNIT, lambda e: e.station)


def _object_tag(tag: str) -> Factor:
    if not tag:
        raise ValueError("factor object_tag: name the tag, e.g. object_tag:deformable")
    return Factor(
        f"object_tag:{tag}",
        OBJECT_UNIT,
        lambda e: tag if tag in e.object_tags else f"not {tag}",
    )


# a factor's kind -> its constructor (given what follows "kind:")
FACTOR_KINDS: dict[str, Callable[[str], Factor]] = {
    "tote_side": _tote,
    "camera_side": _camera,
    "station": _station,
    "object_tag": _object_tag,
}


def factor_named(name: str) -> Factor:
    kind, _, arg = name.partition(":")
    make = FACTOR_KINDS.get(kind)
    if make is None:
        raise ValueError(
            f"interaction factor {name!r}: unknown (known: {', '.join(FACTOR_KINDS)}; "
            "object_tag takes the tag, object_tag:TAG)"
        )
    return make(arg)


@dataclass(frozen=True)
class InteractionResult:
    factor: str
    effect: str  # "rmst_difference" (a pair) | "hrt" (a policy against the reference)
    policies: tuple[str, str]  # (a, b); for "hrt": (policy, reference)
    objects: tuple[str, ...]
    levels: tuple[str, ...]
    per_level: tuple[float | None, ...]  # the effect at each level
    statistic: float
    p: float
    permutations: int
    note: str | None = None


def _level_rmst(eps: list[Episode], labels: np.ndarray, n_levels: int, tau: float) -> np.ndarray:
    """(levels, K + 1) RMST of the cell's episodes at each level, per
    labelling (columns); NaN where a labelling leaves a level empty."""
    rs = risk_set(extract_operations(eps), t_max=tau)
    out = np.full((n_levels, labels.shape[1]), np.nan)
    for li in range(n_levels):
        w = (labels == li).astype(float)
        has = w.sum(axis=0) > 0
        if not has.any():
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            r = rmst(rs.grid, survival(rs, w[:, has]), tau)
        out[li, has] = r
    return out


def _effects(
    effect: str, r_a: list[np.ndarray], r_b: list[np.ndarray]
) -> np.ndarray:  # (levels, K + 1)
    a, b = np.stack(r_a), np.stack(r_b)  # (objects, levels, K + 1)
    with np.errstate(divide="ignore", invalid="ignore"), _quiet():
        per_object = a - b if effect == "rmst_difference" else 100.0 * b / a
        return np.nanmean(per_object, axis=0)


@contextmanager
def _quiet() -> Iterator[None]:
    """np.nanmean warns on an all-NaN slice; an empty level is expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _spread(effects: np.ndarray) -> np.ndarray:
    with _quiet():
        return np.nanvar(effects, axis=0)


EFFECTS = ("rmst_difference", "hrt")


def _labels(
    factor: Factor,
    cells: dict[tuple[str, str], list[Episode]],
    objects: list[str],
    levels: list[str],
    permutations: int,
    rng: np.random.Generator,
) -> dict[tuple[str, str], np.ndarray]:
    index = {lv: i for i, lv in enumerate(levels)}
    out = {}
    if factor.unit == EPISODE_UNIT:
        for key, eps in cells.items():
            obs = np.array([index[str(factor.level(e))] for e in eps])
            cols = [obs] + [rng.permutation(obs) for _ in range(permutations)]
            out[key] = np.stack(cols, axis=1)
        return out
    # an object's level is the same in every one of its episodes (the factor is the object's)
    first = {k[1]: v[0] for k, v in cells.items()}
    obj_level = np.array([index[str(factor.level(first[o]))] for o in objects])
    perms = [np.arange(len(objects))] + [rng.permutation(len(objects)) for _ in range(permutations)]
    per_object = np.stack([obj_level[p] for p in perms], axis=1)  # (objects, K + 1)
    for key, eps in cells.items():
        row = per_object[objects.index(key[1])]
        out[key] = np.tile(row, (len(eps), 1))
    return out


def interaction_test(
    episodes: Sequence[Episode],
    *,
    policies: tuple[str, str],
    factor: str,
    effect: str,
    tau: float,
    permutations: int,
    rng: np.random.Generator,
) -> InteractionResult | None:
    """The test for one pair (``rmst_difference``) or one policy against the
    reference (``hrt``: ``policies`` = (policy, reference)). None when the
    factor has fewer than two known levels on the pair's shared objects."""
    if effect not in EFFECTS:
        raise ValueError(f"effect: {effect!r} is not one of {', '.join(EFFECTS)}")
    if permutations < 1:
        raise ValueError(f"permutations: must be at least 1, got {permutations}")
    f = factor_named(factor)
    a, b = policies
    cells: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    unknown = 0
    for e in episodes:
        if e.policy not in policies:
            continue
        if f.level(e) is None:
            unknown += 1
            continue
        cells[(e.policy, e.object)].append(e)
    objects = sorted({o for p, o in cells if p == a} & {o for p, o in cells if p == b})
    cells = defaultdict(list, {k: v for k, v in cells.items() if k[1] in objects})
    levels = sorted({str(f.level(e)) for v in cells.values() for e in v})
    if len(levels) < 2 or not objects:
        return None
    labels = _labels(f, cells, objects, levels, permutations, rng)
    r = {k: _level_rmst(v, labels[k], len(levels), tau) for k, v in cells.items()}
    eff = _effects(effect, [r[(a, o)] for o in objects], [r[(b, o)] for o in objects])
    s = _spread(eff)
    observed = float(s[0])
    exceed = int(np.sum(s[1:] >= observed - 1e-12 * max(1.0, abs(observed))))
    note = f"{unknown} episode(s) with no {f.name} recorded were left out" if unknown else None
    return InteractionResult(
        factor=f.name,
        effect=effect,
        policies=(a, b),
        objects=tuple(objects),
        levels=tuple(levels),
        per_level=tuple(None if math.isnan(x) else float(x) for x in eff[:, 0]),
        statistic=observed,
        p=(1 + exceed) / (1 + permutations),
        permutations=permutations,
        note=note,
    )
