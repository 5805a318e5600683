"""The notes that name policies: rendered from one registry, and relabelled
by their exact shape — never by finding a name inside other text."""

from __future__ import annotations

from proctor.analysis.notes import (
    NOT_COMPARED,
    POLICY_NOTES,
    REFERENCE_UNSCORED,
    REFERENCES_IN_SCOPE,
    relabel_note,
)

LABELS = {"common": "arm A", "x and y": "arm B", "x": "arm C", "human": "human"}


def test_a_note_about_policies_names_their_labels() -> None:
    note = NOT_COMPARED.render(a="x and y", b="common")
    assert note == "x and y and common were run on no common object: not compared"
    assert (
        relabel_note(note, LABELS) == "arm B and arm A were run on no common object: not compared"
    )
    unscored = REFERENCE_UNSCORED.render(reference="common", stream="reviewed_only")
    assert relabel_note(unscored, LABELS) == (
        "the reference arm A has no scored episodes in stream reviewed_only"
    )
    # a list of names: relabelled, then sorted by label (the order of the names tells nothing)
    many = REFERENCES_IN_SCOPE.render(references={"x", "common"})
    assert many == "more than one reference policy in scope: ['common', 'x']"
    assert (
        relabel_note(many, LABELS) == "more than one reference policy in scope: ['arm A', 'arm C']"
    )


def test_other_text_is_left_as_written() -> None:
    for text in (
        "not run on common: macro scores average the other objects",  # a word, not a name
        "median not reached: F stays below 0.5",
        "zz and x were run on no common object: not compared",  # zz is no policy of these
        "more than one reference policy in scope: ['x', 'zz']",
        "more than one reference policy in scope: not a list",
        "",
    ):
        assert relabel_note(text, LABELS) == text
    assert relabel_note(NOT_COMPARED.render(a="x", b="common"), {}) == (
        "x and common were run on no common object: not compared"
    )


def test_every_note_in_the_registry_round_trips() -> None:
    values = {"a": "x", "b": "common", "reference": "x and y", "stream": "auto_and_reviewed"}
    for note in POLICY_NOTES:
        slots = {k: v for k, v in values.items() if "{" + k + "}" in note.template}
        for name in note.lists:
            slots[name] = ["x", "common"]
        text = note.render(**slots)
        relabelled = relabel_note(text, LABELS)
        assert relabelled != text, note.template
        assert not any(n in relabelled for n in ("x and y", "'x'", "'common'")), relabelled
