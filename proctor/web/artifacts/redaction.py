"""What operators and reviewers see of an unreleased episode's policy.

Before release, staff other than admins (``EpisodeAccess.redacted``) work
with episodes whose policy is not named. The station's records say more
than a name, though: which dialect the policy spoke, its action space, the
image size and session flag it declared (the ``policy_connected`` event and
the manifest's ``policy`` block), and how fast it answered (latency figures,
call counts; the telemetry's per-step columns). Any of these can single out
an arm — the only Positronic policy in a campaign, or a submitter's chosen
odd image size used as a beacon. So every view of an episode that such staff
can read goes through here:

* events: a message that describes the policy is replaced by a fixed text;
* the manifest artifact: served without its ``policy`` block;
* telemetry (the JSON columns, the Parquet artifact, the ``.rrd``): served
  without the policy's timing columns.

Nothing stored changes: the analysis, admins, and everyone after release
get the records in full.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from proctor.core.domain import ArtifactKind
from proctor.station import keys

# telemetry columns that time the policy's calls
POLICY_TIMING_COLUMNS: tuple[str, ...] = (keys.POLICY_LATENCY, keys.POLICY_CALLS)
# manifest keys that describe the policy (its declared metadata, calls and latency)
POLICY_MANIFEST_KEYS: tuple[str, ...] = ("policy",)
# event kinds whose message describes the policy → what redacted staff read instead
EVENT_MESSAGES: dict[str, str] = {"policy_connected": "policy answered"}
# artifact kinds served to redacted staff as a redacted copy
REDACTED_KINDS = frozenset({ArtifactKind.manifest, ArtifactKind.telemetry})


def event_message(kind: str, message: str, *, redacted: bool) -> str:
    if redacted and kind in EVENT_MESSAGES:
        return EVENT_MESSAGES[kind]
    return message


def telemetry_columns(names: tuple[str, ...], *, redacted: bool) -> tuple[str, ...]:
    if not redacted:
        return names
    return tuple(n for n in names if n not in POLICY_TIMING_COLUMNS)


def telemetry_table(table: pa.Table, *, redacted: bool) -> pa.Table:
    if not redacted:
        return table
    return table.drop_columns([c for c in POLICY_TIMING_COLUMNS if c in table.column_names])


def manifest(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in POLICY_MANIFEST_KEYS}


def artifact_bytes(kind: ArtifactKind, data: bytes) -> bytes:
    """A redacted copy of a ``REDACTED_KINDS`` artifact's bytes."""
    if kind == ArtifactKind.manifest:
        doc = json.loads(data)
        return json.dumps(manifest(doc), indent=2, sort_keys=True).encode()
    if kind == ArtifactKind.telemetry:
        table = telemetry_table(pq.read_table(io.BytesIO(data)), redacted=True)
        out = io.BytesIO()
        pq.write_table(table, out)
        return out.getvalue()
    raise ValueError(f"kind: {kind.value} has no redacted form")
