"""``policy.toml``: what a checkpoint is and how to serve it.

Pure: text in, a validated ``Manifest`` (or every problem, each naming its
field) out. The schema is documented in ``proctor/web/submissions/README.md``; the
runner section is what a later runner service reads to pick an isolated
environment per framework and start a server speaking the policy wire.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from proctor.analysis.report import RESULT_KEYS
from proctor.policywire import dialects
from proctor.policywire.wire import units
from proctor.policywire.wire.spec import ActionSpace

MANIFEST_NAME = "policy.toml"
MAX_MANIFEST_BYTES = 64 * 1024
MANIFEST_VERSION = 1
# arrays and tables inside one another: the schema needs 2 (image_size in
# [policy]); tomllib recurses once per level, so 20 000 levels exhaust the stack
MAX_NESTING = 32

# a policy's public name: shown on the leaderboard once a campaign is released
POLICY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._+()-]{1,126}[A-Za-z0-9)]$"
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
_SLUG = r"^[a-z0-9][a-z0-9_-]{0,63}$"
CAMERAS = ("exterior", "wrist")

# released policies whose submitters have not opted in to the public board
# appear as "arm A", "arm B", …: a name of that form could pass for one
_ARM_LABEL_LIKE = re.compile(r"^arm\s", re.IGNORECASE)


# words a result or a page uses for something else: a policy named like one
# could be mistaken for it (its key in the result JSON, "reference", "null", …).
# Object names are refused too, against the database (service.policy_for).
RESERVED_NAMES = RESULT_KEYS | {
    "arm",
    "withheld",
    "identity",
    "label",
    "name",
    "note",
    "null",
    "none",
    "true",
    "false",
    "nan",
    "inf",
    "infinity",
    "unknown",
    "all",
}


def _allowed_name(name: str) -> str:
    if _ARM_LABEL_LIKE.match(name):
        raise ValueError(
            "must not begin with 'arm ': that is how the leaderboard labels blinded policies"
        )
    if name.casefold() in RESERVED_NAMES:
        raise ValueError(
            f"'{name}' is a word the results use for something else (a field or a "
            "label); choose a more distinctive name"
        )
    return name


PolicyName = Annotated[
    str,
    StringConstraints(strip_whitespace=True, pattern=POLICY_NAME_PATTERN),
    AfterValidator(_allowed_name),
    Field(
        description="3–128 characters: letters, digits, space and . _ + ( ) -, "
        "starting and ending with a letter or digit, not beginning with 'arm ' "
        "(the leaderboard's blinded labels), not a word the results use for "
        "something else (a field such as 'policy' or 'estimate', 'reference', an "
        "object's name)"
    ),
]
Text = Annotated[str, StringConstraints(max_length=4000, pattern=_PRINTABLE)]
Version = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
]


def _archive_path(value: str) -> str:
    """A path inside the archive, relative to the folder holding policy.toml."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a path inside the archive")
    text = value.strip()
    if "\x00" in text or "\\" in text:
        raise ValueError("must use '/' separators and no NUL characters")
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise ValueError(f"'{text}' is absolute; give a path relative to policy.toml")
    norm = posixpath.normpath(text)
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"'{text}' points outside the archive")
    return norm.rstrip("/") if norm != "." else "."


ArchivePath = Annotated[str, Field(max_length=512)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LerobotRunner(_Section):
    framework: Literal["lerobot"]
    # the folder LeRobot's `from_pretrained` loads (config.json + model.safetensors)
    policy_path: ArchivePath
    lerobot_version: Version | None = None

    @field_validator("policy_path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _archive_path(value)

    @property
    def serves(self) -> str:
        return "openpi"

    def paths(self) -> dict[str, str]:
        return {"runner.policy_path": self.policy_path}


class OpenpiRunner(_Section):
    framework: Literal["openpi"]
    # openpi's training config the checkpoint was trained with (e.g. pi05_droid)
    config: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    checkpoint_path: ArchivePath
    openpi_version: Version | None = None

    @field_validator("checkpoint_path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _archive_path(value)

    @property
    def serves(self) -> str:
        return "openpi"

    def paths(self) -> dict[str, str]:
        return {"runner.checkpoint_path": self.checkpoint_path}


class CommandRunner(_Section):
    """Any server the submitter wrote, started as ``command`` (argv, no shell)
    in a fresh environment built from ``requirements``."""

    framework: Literal["command"]
    command: list[Annotated[str, StringConstraints(min_length=1, max_length=1024)]] = Field(
        min_length=1, max_length=64
    )
    requirements: ArchivePath | None = None
    python: Annotated[str, StringConstraints(pattern=r"^3\.(1[0-9]|[89])$")] = "3.11"
    # the wire dialect the command's server speaks: one a submission can store
    # (``EndpointDialect``, the dialects' registry's built-in names)
    dialect: str = "openpi"

    @field_validator("dialect")
    @classmethod
    def _dialect(cls, value: str) -> str:
        if value not in dialects.MODULES:
            raise ValueError(f"'{value}' is not one of {', '.join(dialects.MODULES)}")
        return value

    @field_validator("command")
    @classmethod
    def _port_placeholder(cls, value: list[str]) -> list[str]:
        if not any("{port}" in part for part in value):
            raise ValueError("must contain {port} where the runner puts the port to serve on")
        return value

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, value: str | None) -> str | None:
        return None if value is None else _archive_path(value)

    @property
    def serves(self) -> str:
        return self.dialect

    def paths(self) -> dict[str, str]:
        return {"runner.requirements": self.requirements} if self.requirements else {}


Runner = Annotated[LerobotRunner | OpenpiRunner | CommandRunner, Field(discriminator="framework")]

# the frameworks a checkpoint may name, each once: its section's ``framework``
# tag (the runner's ``FRAMEWORKS`` registry is built from these names)
RUNNER_FRAMEWORKS: tuple[str, ...] = tuple(
    get_args(section.model_fields["framework"].annotation)[0]
    for section in get_args(get_args(Runner)[0])
)


class PolicySpec(_Section):
    """What the policy consumes and produces: checked by the conformance check."""

    action_space: ActionSpace
    # actions per reply (the chunk the station runs open-loop, in part)
    chunk_length: int = Field(ge=1, le=1000)
    control_hz: float = Field(default=15.0, gt=0, le=1000)
    # (H, W) the policy's images are resized (with padding) to
    image_size: tuple[int, int] = (224, 224)
    cameras: list[Literal["exterior", "wrist"]] = Field(
        default_factory=lambda: list(CAMERAS), min_length=1, max_length=2
    )
    # the same observations always give the same actions
    deterministic: bool = False
    # what a velocity action's numbers mean (``proctor/policywire/wire/units.py``);
    # None: as the runner server's metadata says (openpi's default: DROID's units
    # when it names no action space)
    action_units: str | None = None

    @field_validator("action_units")
    @classmethod
    def _units(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return units.check(value)
        except ValueError as exc:
            # the problem's field already names it
            raise ValueError(str(exc).split(": ", 1)[-1]) from None

    @field_validator("image_size")
    @classmethod
    def _size(cls, value: tuple[int, int]) -> tuple[int, int]:
        h, w = value
        if not (8 <= h <= 4096 and 8 <= w <= 4096):
            raise ValueError(f"({h}, {w}) is out of range: each side 8–4096 pixels")
        return value

    @field_validator("cameras")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a camera twice")
        return value


PromptKey = Annotated[str, StringConstraints(pattern=_SLUG)]
Prompt = Annotated[str, StringConstraints(min_length=1, max_length=1000, pattern=_PRINTABLE)]


class Manifest(_Section):
    manifest_version: Literal[1] = 1
    name: PolicyName
    description: Text = ""
    runner: Runner
    policy: PolicySpec
    # the instruction sent with each object type ("default": any other object)
    prompts: dict[PromptKey, Prompt] = Field(default_factory=dict, max_length=256)

    def prompt_for(self, object_name: str) -> str | None:
        return self.prompts.get(object_name, self.prompts.get("default"))


@dataclass(frozen=True)
class ManifestProblem:
    field: str
    message: str

    def __str__(self) -> str:
        if self.field == MANIFEST_NAME:
            return f"{MANIFEST_NAME} {self.message}"
        return f"{MANIFEST_NAME}: {self.field}: {self.message}"


class ManifestError(ValueError):
    """policy.toml is not valid; ``problems`` names each field."""

    def __init__(self, problems: list[ManifestProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems) or f"{MANIFEST_NAME} is invalid")


def _field_path(loc: Iterable[Any], kind: str = "") -> str:
    parts = [str(p) for p in loc]
    # a discriminated union puts the chosen tag in the path: runner.openpi.config
    if len(parts) >= 2 and parts[0] == "runner" and parts[1] in RUNNER_FRAMEWORKS:
        parts = [parts[0], *parts[2:]]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("framework")
    return ".".join(parts) or MANIFEST_NAME


def _message(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field of policy.toml (check the spelling)"
    if kind == "union_tag_invalid":
        got = (err.get("ctx") or {}).get("tag")
        return f"'{got}' is not one of {', '.join(RUNNER_FRAMEWORKS)}"
    if kind == "union_tag_not_found":
        return f"is required: {', '.join(RUNNER_FRAMEWORKS[:-1])} or {RUNNER_FRAMEWORKS[-1]}"
    if kind == "enum":
        got = err.get("input")
        return f"'{got}' is not one of {', '.join(a.value for a in ActionSpace)}"
    if kind == "string_pattern_mismatch" and err.get("loc", ("",))[0] == "name":
        return "3–128 characters: letters, digits, space and . _ + ( ) -"
    msg = str(err.get("msg", "is invalid"))
    return msg.removeprefix("Value error, ")


def validate_manifest(data: dict[str, Any]) -> Manifest:
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        problems = [
            ManifestProblem(_field_path(e.get("loc", ()), e.get("type", "")), _message(dict(e)))
            for e in exc.errors()
        ]
        raise ManifestError(problems) from None
    if manifest.policy.action_units is not None and not (
        dialects.get(manifest.runner.serves).velocity_actions
    ):
        raise ManifestError(
            [
                ManifestProblem(
                    "policy.action_units",
                    f"the {manifest.runner.serves} dialect's commands are positions, which "
                    "have no units to select; leave it out",
                )
            ]
        )
    return manifest


def parse_manifest(raw: bytes | str) -> Manifest:
    """Parse and validate policy.toml's text."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            [ManifestProblem(MANIFEST_NAME, f"is larger than {MAX_MANIFEST_BYTES} bytes")]
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError([ManifestProblem(MANIFEST_NAME, "is not UTF-8 text")]) from None
    too_deep = ManifestProblem(
        MANIFEST_NAME, f"nests arrays or tables more than {MAX_NESTING} levels deep"
    )
    if _nesting(text) > MAX_NESTING:
        raise ManifestError([too_deep])
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError([ManifestProblem(MANIFEST_NAME, f"is not valid TOML: {exc}")]) from None
    except RecursionError:  # the scan above should make this unreachable
        raise ManifestError([too_deep]) from None
    return validate_manifest(parsed)


def _nesting(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings and comments: a
    linear scan, so the parser is never handed a document deep enough to
    exhaust the stack. Invalid TOML may be counted loosely (the parser
    refuses it anyway)."""
    deepest = depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if c in "\"'":
            i = _skip_string(text, i)
            continue
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def _skip_string(text: str, i: int) -> int:
    """The index just past the string that opens at ``text[i]`` (basic or
    literal, one line or multi-line); the end of the text if it never closes."""
    quote = text[i]
    escapes = quote == '"'  # only basic strings have backslash escapes
    n = len(text)
    if text.startswith(quote * 3, i):
        j = i + 3
        while j < n:
            if escapes and text[j] == "\\":
                j += 2
                continue
            if text.startswith(quote * 3, j):
                j += 3
                # one or two more quotes right before the closing three are content
                for _ in range(2):
                    if j < n and text[j] == quote:
                        j += 1
                return j
            j += 1
        return n
    j = i + 1
    while j < n and text[j] != "\n":
        if escapes and text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            return j + 1
        j += 1
    return j


def check_paths(manifest: Manifest, root: str, members: Iterable[str]) -> list[ManifestProblem]:
    """The runner's paths must name files or folders in the archive; paths
    are relative to the folder that holds policy.toml (``root``)."""
    names = set(members)
    folders = {posixpath.dirname(n) for n in names}
    # every ancestor of a member is a folder too
    for n in list(folders):
        while n:
            n = posixpath.dirname(n)
            folders.add(n)
    problems = []
    for field, rel in manifest.runner.paths().items():
        full = posixpath.normpath(posixpath.join(root, rel)) if root else rel
        full = "" if full == "." else full
        if full not in names and full not in folders:
            problems.append(ManifestProblem(field, f"'{rel}' is not in the archive"))
    return problems
