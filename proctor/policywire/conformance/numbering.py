"""Which exterior camera numbering a server reads.

DROID policies read ``observation/exterior_image_1_left``; RoboArena's test
script and vLLM-Omni's DreamZero send ``…_0_left``. A server written for the
other numbering than the endpoint's gets no exterior image: it fails on
every call (a ``KeyError``) or, reading the key with a default, runs blind.
The probe sends one recorded observation under each numbering on its own
connection: twice as it is (does the server answer, and the same way?), then
with the exterior image inverted (do the actions change?). A server that
answers under one numbering and fails under the other, or whose actions
follow the image under one only, reads that one; the finding says which and
what to change when it is not the endpoint's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from proctor.core.recording import keys
from proctor.policywire.client import PolicyError
from proctor.policywire.conformance.observations import observations_for
from proctor.policywire.conformance.state import ATOL, RTOL, CheckState, Status
from proctor.policywire.handshake import dialect_of
from proctor.policywire.wire import keys as wire_keys

TITLE = "Exterior camera numbering"


class Outcome(StrEnum):
    failed = "failed"  # the server refused or broke off
    ignored = "ignored"  # it answered, the same whatever the exterior image
    read = "read"  # its actions follow the exterior image
    unclear = "unclear"  # it answered, but differently to the same observation


@dataclass(frozen=True)
class Probe:
    outcome: Outcome
    key: str  # the first exterior camera's key under this numbering
    error: str = ""


def _inverted(obs: dict[str, Any], exterior: list[str]) -> dict[str, Any]:
    out = dict(obs)
    for key in exterior:
        out[key] = (255 - np.asarray(obs[key], dtype=np.uint8)).astype(np.uint8)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, atol=ATOL, rtol=RTOL))


def probe(check: CheckState, numbering: int) -> Probe:
    """One connection under ``numbering``: the first observation twice, then inverted."""
    client = check.client(exterior_numbering=numbering)
    timeout = check.options.request_timeout_s
    key = wire_keys.exterior_image(numbering)
    try:
        info = client.connect()
        exterior = [
            k for k, cam in dialect_of(info).image_keys(info).items() if cam == keys.CAMERA_EXTERIOR
        ]
        obs = observations_for(info, check.options)[0]
        client.reset(timeout)
        first = client.infer(dict(obs), timeout).actions
        again = client.infer(dict(obs), timeout).actions
        inverted = client.infer(_inverted(obs, exterior), timeout).actions
    except PolicyError as exc:
        return Probe(Outcome.failed, key, str(exc))
    finally:
        client.close()
    if not _same(first, again):
        return Probe(Outcome.unclear, key)
    return Probe(Outcome.ignored if _same(first, inverted) else Outcome.read, key)


def check_numbering(check: CheckState) -> None:
    """The numbering finding, for a server that gets an exterior camera in numbered keys."""
    info = check.info
    if info is None or not dialect_of(info).numbers_exterior_cameras or info.n_external_cameras < 1:
        return
    check.progress("probing which exterior camera numbering your server reads")
    chosen = info.exterior_first_index
    other = next(n for n in wire_keys.EXTERIOR_NUMBERINGS if n != chosen)
    mine, theirs = probe(check, chosen), probe(check, other)
    details = {
        "station_sends": mine.key,
        "numbering": chosen,
        "outcomes": {str(chosen): mine.outcome.value, str(other): theirs.outcome.value},
    }
    status, message = _judge(mine, theirs, chosen, other)
    check.add("exterior_numbering", TITLE, status, message, **details)


def _judge(mine: Probe, theirs: Probe, chosen: int, other: int) -> tuple[Status, str]:
    sends = f"The station numbers exterior cameras from {chosen}: it sends {mine.key}"
    good = (Outcome.read, Outcome.unclear)
    if mine.outcome == Outcome.failed and theirs.outcome != Outcome.failed:
        return Status.failed, (
            f"{sends}, and your server failed on it ({mine.error}), but answered when the "
            f"image came as {theirs.key}. {_change(other, mine.key)}"
        )
    if mine.outcome == Outcome.ignored and theirs.outcome == Outcome.read:
        return Status.failed, (
            f"{sends}, and your server's actions do not change with it, but they do when "
            f"the image comes as {theirs.key}: your server reads that key and would run "
            f"blind. {_change(other, mine.key)}"
        )
    if mine.outcome in good and theirs.outcome in (Outcome.failed, Outcome.ignored):
        return Status.passed, f"{sends}, the key your server reads."
    if mine.outcome == Outcome.failed:
        return Status.skipped, (
            f"{sends}. Your server failed under both numberings ({mine.error}): the "
            "findings below say why."
        )
    if mine.outcome == Outcome.ignored and theirs.outcome == Outcome.ignored:
        # a scripted or blind policy: nothing to tell the numberings apart by
        return Status.skipped, (
            f"{sends}. Your server's actions did not change when the exterior image did, "
            f"whether it came as {mine.key} or {theirs.key}. If your policy uses an "
            "exterior camera, check the key it reads."
        )
    return Status.passed, (
        f"{sends}. Your server answered under both numberings ({mine.key} and "
        f"{theirs.key}); the check could not tell one from the other."
    )


def _change(other: int, key: str) -> str:
    return (
        f"Register the endpoint again with exterior_numbering = {other} (the station will "
        f"then send {wire_keys.exterior_image(other)}), or make your server read {key}."
    )
