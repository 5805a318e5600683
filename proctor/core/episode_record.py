"""What an episode's record says that both a station and the server read: the
operator's log and its validation, who logged it, the cap on a stored reason,
and the fault names the scheduler charges to a policy.

The station writes these (``proctor.station.episodes``); the server's station
API validates what a station sends with them (``proctor.scheduler.station_api``),
the review queue re-validates a corrected log (``proctor.annotator.review``),
the scheduler counts the faults (``proctor.scheduler.claims``). Below both,
in the kernel, so that neither reaches into the other's package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proctor.core.domain import Outcome
from proctor.core.errors import FieldError

# The longest outcome reason or event message the station stores. Operators
# and reviewers read both before a campaign is released; station messages
# never quote a policy server's text (``proctor.policywire.wire.spec.peer_value``),
# and this cap is the second line: whatever slips through cannot carry much.
MAX_REASON_CHARS = 300


# A ``system_fault`` event's ``details["fault"]`` when the policy server broke
# the protocol (a malformed reply or metadata): the scheduler counts these per
# policy and, past a free allowance, charges them to the policy.
FAULT_POLICY_PROTOCOL = "policy_protocol"
# … and when an arm fault the attribution gives the station (a limit, an
# unreachable or singular target, a refused command) followed the policy's
# own motion: without a charge, a policy losing its episode could drive a
# joint into its limit and have the episode re-run for free (hardware
# review #4)
FAULT_POLICY_MOTION = "policy_motion"


def bounded(text: str) -> str:
    """``text`` cut to ``MAX_REASON_CHARS`` characters (an ellipsis marks the cut)."""
    if len(text) <= MAX_REASON_CHARS:
        return text
    return text[: MAX_REASON_CHARS - 1] + "…"


class LogRejected(FieldError):
    """The operator's log failed validation in one field."""


@dataclass(frozen=True)
class OperatorLog:
    placed: int
    lost: int
    dropped: int
    outcome: Outcome
    notes: str = ""

    @classmethod
    def parse(cls, data: dict[str, Any]) -> OperatorLog:
        """Validate a form or JSON body field by field."""
        values: dict[str, int] = {}
        for name in ("placed", "lost", "dropped"):
            raw = data.get(name)
            if raw is None or raw == "":
                raise LogRejected(name, "required")
            if isinstance(raw, bool):
                raise LogRejected(name, f"must be a whole number, got {raw!r}")
            try:
                value = int(raw)
            except (TypeError, ValueError):
                raise LogRejected(name, f"must be a whole number, got {raw!r}") from None
            if isinstance(raw, float) and raw != value:
                raise LogRejected(name, f"must be a whole number, got {raw!r}")
            if value < 0:
                raise LogRejected(name, f"must be 0 or more, got {value}")
            values[name] = value
        raw_outcome = data.get("outcome")
        try:
            outcome = Outcome(str(raw_outcome))
        except ValueError:
            known = ", ".join(o.value for o in Outcome)
            raise LogRejected("outcome", f"must be one of {known}, got {raw_outcome!r}") from None
        notes = data.get("notes") or ""
        if not isinstance(notes, str):
            raise LogRejected("notes", "must be text")
        if len(notes) > 4000:
            raise LogRejected("notes", f"at most 4000 characters, got {len(notes)}")
        return cls(values["placed"], values["lost"], values["dropped"], outcome, notes.strip())

    def check_against(self, items: int) -> None:
        handled = self.placed + self.lost + self.dropped
        if handled > items:
            raise LogRejected(
                "placed + lost + dropped",
                f"{self.placed} + {self.lost} + {self.dropped} = "
                f"{handled} is more than the {items} items set out",
            )
        if self.outcome == Outcome.success and handled != items:
            raise LogRejected(
                "outcome",
                f"'success' means all {items} items were handled, but placed + lost + "
                f"dropped = {handled}; choose another outcome or correct the counts",
            )


# the operator_log event's detail that names who logged it, as text
OPERATOR_LABEL_KEY = "operator_label"
# an operator label's length limit (the wire's and the server's too)
OPERATOR_LABEL_MAX = 128
# what a console may send as the operator's local account name
OPERATOR_NAME_MAX = 64


def operator_label(station: str, name: str) -> str:
    """Who logged an episode, as the server may see it: the station and the
    operator's account on the station host (``cell-a:alice``). A label, never
    an id: the station host's accounts are its own, not the server's users."""
    return f"{station}:{name}"[:OPERATOR_LABEL_MAX]


def check_operator_name(value: object) -> str | None:
    """The console's ``operator_name``: a local account's name, or absent."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise LogRejected("operator_name", "must be the operator's account name (text)")
    if len(value) > OPERATOR_NAME_MAX or not value.isprintable():
        raise LogRejected("operator_name", f"at most {OPERATOR_NAME_MAX} printable characters")
    return value.strip()
