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

* events: a message that describes the policy is replaced by a fixed text —
  among them the safety envelope's interventions, whose messages may quote
  the command as the policy asked for it (its action space), and whose
  reason is withheld too;
* the manifest artifact: served without its ``policy`` block, and its
  ``envelope`` block without the count by reason;
* telemetry (the JSON columns, the Parquet artifact, the ``.rrd``): served
  without the policy's timing columns;
* the per-call table (the ``policy_calls`` event): its message replaced, and
  the explorer's breakdown of it withheld.

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
from proctor.core.recording import keys

# telemetry columns that time the policy's calls
POLICY_TIMING_COLUMNS: tuple[str, ...] = (keys.POLICY_LATENCY, keys.POLICY_CALLS)
# manifest keys that describe the policy (its declared metadata, calls and latency)
POLICY_MANIFEST_KEYS: tuple[str, ...] = ("policy",)
# the manifest's envelope block keeps its count and limits; its reasons, like the
# envelope events' (below), are withheld
ENVELOPE_MANIFEST_KEY = "envelope"
ENVELOPE_WITHHELD_KEYS = frozenset({"by_reason"})
# event kinds whose message describes the policy → what redacted staff read instead
EVENT_MESSAGES: dict[str, str] = {
    "policy_connected": "policy answered",
    keys.ENVELOPE_EVENT: "the safety envelope intervened",
    # its count of calls (and the explorer's per-call breakdown, withheld) time the policy
    keys.POLICY_CALLS_EVENT: "the policy's calls were tabled",
}
# the longest envelope reason shown: a word from the envelope's vocabulary, not a message
MAX_REASON = 64
# artifact kinds served to redacted staff as a redacted copy
REDACTED_KINDS = frozenset({ArtifactKind.manifest, ArtifactKind.telemetry})


def event_message(kind: str, message: str, *, redacted: bool) -> str:
    if redacted and kind in EVENT_MESSAGES:
        return EVENT_MESSAGES[kind]
    return message


def envelope_reason(kind: str, details: dict[str, Any] | None, *, redacted: bool) -> str | None:
    """An envelope intervention's reason (``details["reason"]``, a short word such
    as "workspace" or "speed"); None for other events, a reason that is not a
    short text, and redacted staff."""
    if redacted or kind != keys.ENVELOPE_EVENT or not isinstance(details, dict):
        return None
    reason = details.get("reason")
    if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON:
        return None
    return reason


def telemetry_columns(names: tuple[str, ...], *, redacted: bool) -> tuple[str, ...]:
    if not redacted:
        return names
    return tuple(n for n in names if n not in POLICY_TIMING_COLUMNS)


def telemetry_table(table: pa.Table, *, redacted: bool) -> pa.Table:
    if not redacted:
        return table
    return table.drop_columns([c for c in POLICY_TIMING_COLUMNS if c in table.column_names])


def manifest(doc: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k not in POLICY_MANIFEST_KEYS}
    envelope = out.get(ENVELOPE_MANIFEST_KEY)
    if isinstance(envelope, dict):
        out[ENVELOPE_MANIFEST_KEY] = {
            k: v for k, v in envelope.items() if k not in ENVELOPE_WITHHELD_KEYS
        }
    return out


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
