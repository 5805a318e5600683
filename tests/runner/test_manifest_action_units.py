"""policy.toml's optional ``action_units`` in ``[policy]``: validated by the
units registry, refused naming the field, refused where the runner's wire
carries positions only, and found where the claim and the conformance job
read a submission's selection (the manifest as an upload stores it)."""

from __future__ import annotations

import pytest

from proctor.policywire.wire.spec import manifest_action_units
from proctor.runner.manifest import ManifestError, parse_manifest

TOML = """\
name = "acme-droid"

[runner]
framework = "command"
command = ["python", "serve.py", "--port", "{port}"]
dialect = "DIALECT"

[policy]
action_space = "joint_velocity"
chunk_length = 10
"""


def _toml(line: str = "", dialect: str = "openpi") -> str:
    return TOML.replace("DIALECT", dialect) + line


@pytest.mark.parametrize("name", ["droid", "si"])
def test_a_registered_convention_is_kept_where_the_claim_reads_it(name: str) -> None:
    m = parse_manifest(_toml(f'action_units = "{name}"\n'))
    assert m.policy.action_units == name
    # uploads store model_dump(mode="json"); the claim and the conformance job read that
    assert manifest_action_units(m.model_dump(mode="json")) == name


def test_left_out_the_metadata_decides() -> None:
    m = parse_manifest(_toml())
    assert m.policy.action_units is None
    assert manifest_action_units(m.model_dump(mode="json")) is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('action_units = "rad/s"', "must be one of si, droid"),
        ('action_units = "DROID"', "must be one of si, droid"),
        ("action_units = 1", "Input should be a valid string"),
    ],
)
def test_anything_else_is_refused_naming_the_field(line: str, message: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(_toml(line + "\n"))
    (problem,) = caught.value.problems
    assert problem.field == "policy.action_units"
    assert problem.message.startswith(message), problem.message


def test_a_positronic_runner_has_no_units_to_select() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(_toml('action_units = "si"\n', dialect="positronic_v1"))
    (problem,) = caught.value.problems
    assert problem.field == "policy.action_units"
    assert "the positronic_v1 dialect's commands are positions" in problem.message


def test_a_stored_manifest_with_a_bad_value_is_refused_on_read() -> None:
    """A manifest is read again at every claim: a value that was never validated
    (a hand-edited row) is refused naming the field, not passed to a station."""
    with pytest.raises(ValueError, match=r"^action_units: must be one of si, droid"):
        manifest_action_units({"policy": {"action_units": "fast"}})
    with pytest.raises(ValueError, match=r"^action_units: must be one of si, droid"):
        manifest_action_units({"wire": {"action_units": 3}})
    # the endpoint's wire setting comes first
    assert manifest_action_units({"wire": {"action_units": "droid"}, "policy": {}}) == "droid"
