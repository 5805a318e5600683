"""The notes of a result that name policies, defined once.

A result's notes are free text, but a few of them are about policies and
name them. Whoever relabels a result (the leaderboard's blinding, the
export) must rename exactly those names and nothing else: replacing a name
wherever it occurs as text would rewrite words that merely look like it (a
policy called ``common`` in "run on no common object") and so tell anyone
which label hides which name. Each note that names policies is therefore a
:class:`PolicyNote`: the analysis renders it through the registry, and a
relabeller recognises it by its exact shape (:func:`relabel_note`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from string import Formatter
from typing import Any


@dataclass(frozen=True)
class PolicyNote:
    """A note with slots: ``names`` hold one policy name each, ``lists`` a
    sorted list of names (written as Python writes a list of strings); any
    other slot holds one word (a label stream, …)."""

    template: str
    names: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()

    def render(self, **values: Any) -> str:
        return self.template.format(
            **{k: (str(sorted(v)) if k in self.lists else v) for k, v in values.items()}
        )

    def relabel(self, text: str, labels: Mapping[str, str]) -> str | None:
        """``text`` with its names replaced by their labels, if it is this
        note about policies ``labels`` knows (every slot a known name); else None."""
        known = sorted(labels, key=len, reverse=True)
        if not known:
            return None
        pattern = []
        for literal, slot, _spec, _conv in Formatter().parse(self.template):
            pattern.append(re.escape(literal))
            if slot is None:
                continue
            if slot in self.names:
                body = "|".join(re.escape(n) for n in known)
            elif slot in self.lists:
                body = r"\[.*\]"
            else:
                body = r"\S+"
            pattern.append(f"(?P<{slot}>{body})")
        m = re.fullmatch("".join(pattern), text)
        if m is None:
            return None
        values: dict[str, Any] = {}
        for slot, value in m.groupdict().items():
            if slot in self.names:
                values[slot] = labels[value]
            elif slot in self.lists:
                try:
                    names = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    return None
                if not isinstance(names, list) or not all(n in labels for n in names):
                    return None
                values[slot] = [labels[n] for n in names]
            else:
                values[slot] = value
        return self.render(**values)


NOT_COMPARED = PolicyNote(
    "{a} and {b} were run on no common object: not compared", names=("a", "b")
)
REFERENCE_UNSCORED = PolicyNote(
    "the reference {reference} has no scored episodes in stream {stream}", names=("reference",)
)
REFERENCES_IN_SCOPE = PolicyNote(
    "more than one reference policy in scope: {references}", lists=("references",)
)

# every note of a result that names policies
POLICY_NOTES: tuple[PolicyNote, ...] = (NOT_COMPARED, REFERENCE_UNSCORED, REFERENCES_IN_SCOPE)


def relabel_note(text: str, labels: Mapping[str, str]) -> str:
    """A note with the policy names it was written with replaced by their
    labels (``labels``: name → label); any other note is returned unchanged."""
    for note in POLICY_NOTES:
        relabelled = note.relabel(text, labels)
        if relabelled is not None:
            return relabelled
    return text
