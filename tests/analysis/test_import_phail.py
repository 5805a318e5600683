"""``proctor import phail``: PhAIL's release (Positronic's dataset layout) →
the interchange file → ``proctor analyze``.

The release is written here the way Positronic's ``DiskEpisodeWriter`` and
``LocalDatasetWriter`` write one (Positronic-Robotics/positronic @ a060cbe,
``positronic/dataset/local_dataset.py``, ``vector.py``, ``edits.py``):
``{block:012d}/{episode:012d}/`` folders holding ``static.json``,
``meta.json`` and one Parquet file a signal (``timestamp``, ``value``
columns, written with pyarrow as ``SimpleSignalWriter`` does), an
``.unfinished`` marker on an episode the writer never closed, and an
``edits.jsonl`` beside a dataset. The static items are the ones PhAIL's
operator console and release configs set. The placement times come from a
Proctor annotation file: where the release keeps its own is unverified
(``proctor/analysis/importers/phail.py``).

The expected numbers are derived by hand below, not by the code under test.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from proctor.analysis.episodes import Episode
from proctor.analysis.importers import InvalidRelease
from proctor.analysis.importers.phail import (
    FileAnnotations,
    StaticAnnotations,
    import_release,
)
from proctor.analysis.interchange import read_interchange

T0 = 1_772_000_000_000_000_000  # 2026-02-25, during PhAIL's collection (ns)
CAP = 30  # eval.cap_per_item, the console's default


@dataclass
class Ep:
    """One episode of the fixture: the static items the console and the
    release configs write, and the annotation Proctor needs."""

    dataset: str
    uid: str
    model: str
    obj: str
    outcome: str
    duration: float
    placements: list[float]
    items: int = 2
    lost: int = 0
    dropped: int = 0
    tote: str = "left"
    camera: str = "right"
    extra: dict[str, Any] = field(default_factory=dict)

    def static(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "task": f"Pick all the {self.obj.lower()} one by one from transparent tote "
            "and place them into the large grey tote.",
            "model": self.model,
            "variant": "270226-ee:200000" if self.dataset == "rollouts" else "",
            "eval.object": self.obj,
            "eval.total_items": self.items,
            "eval.successful_items": len(self.placements),
            "eval.outcome": self.outcome,
            "eval.notes": "",
            "eval.duration": self.duration,
            "eval.cap_per_item": CAP,
            "eval.tote_placement": self.tote,
            "eval.external_camera": self.camera,
        }
        return {**s, **self.extra}

    def annotation(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "placements_s": self.placements,
            "lost": self.lost,
            "dropped": self.dropped,
        }


# Items 2 a episode, so budget_s = 60 s and `proctor analyze` defaults τ to 60.
EPISODES = [
    # the teleoperation set (the reference): all Success, 2 of 2
    Ep("teleoperation", "t1", "teleop", "Towels", "Success", 8.0, [3.0, 7.0]),
    Ep("teleoperation", "t2", "teleop", "Towels", "Success", 7.0, [2.0, 6.0]),
    Ep("teleoperation", "t3", "teleop", "Towels", "Success", 10.0, [4.0, 9.0]),
    Ep("teleoperation", "t4", "teleop", "Batteries", "Success", 11.0, [5.0, 10.0]),
    Ep("teleoperation", "t5", "teleop", "Batteries", "Success", 9.0, [4.0, 8.0]),
    Ep("teleoperation", "t6", "teleop", "Batteries", "Success", 13.0, [6.0, 12.0]),
    # the human baseline (phail_human_release: model "human", Success)
    Ep("human", "h1", "human", "Towels", "Success", 6.0, [2.5, 5.0]),
    Ep("human", "h2", "human", "Batteries", "Success", 7.0, [3.0, 6.5]),
    # rollouts
    Ep("rollouts", "o1", "openpi", "Towels", "Success", 26.0, [10.0, 25.0]),
    Ep("rollouts", "o2", "openpi", "Towels", "Safety", 20.0, [12.0]),
    Ep("rollouts", "o3", "openpi", "Towels", "Success", 31.0, [8.0, 30.0]),
    Ep("rollouts", "o4", "openpi", "Batteries", "Ran out of time", 60.0, [30.0]),
    Ep("rollouts", "o5", "openpi", "Batteries", "Fail", 45.0, []),
    Ep("rollouts", "o6", "openpi", "Batteries", "Ran out of time", 60.0, [15.0], lost=1),
    Ep("rollouts", "s1", "smolvla", "Towels", "Safety", 10.0, [], tote="right"),
    Ep("rollouts", "s2", "smolvla", "Towels", "Ran out of time", 60.0, [], camera="NA"),
    Ep("rollouts", "s3", "smolvla", "Towels", "Success", 51.0, [20.0, 50.0]),
    Ep("rollouts", "s4", "smolvla", "Batteries", "System", 5.0, []),
    Ep("rollouts", "s5", "smolvla", "Batteries", "Success", 56.0, [25.0, 55.0]),
    # recorded 0 of 2; the audit's edit below corrects it to 1 (cf. the
    # release's audit-corrected episodes, positronic/cfg/analysis.py)
    Ep("rollouts", "s6", "smolvla", "Batteries", "Ran out of time", 60.0, [40.0]),
]
# the recorded count the edit log corrects
RECORDED = {"s6": {"eval.successful_items": 0}}


def _signal(path: Path, timestamps: list[int], values: list[Any]) -> None:
    """A signal file as ``SimpleSignalWriter`` writes it."""
    batch = pa.record_batch(
        [pa.array(timestamps, type=pa.int64()), pa.array(values)], names=["timestamp", "value"]
    )
    with pq.ParquetWriter(path, batch.schema) as writer:
        writer.write_batch(batch)


def write_episode(
    dataset: Path,
    index: int,
    static: dict[str, Any],
    *,
    uid: str | None,
    created_ts_ns: int,
    duration_s: float,
    unfinished: bool = False,
) -> Path:
    """One episode folder, as ``DiskEpisodeWriter`` leaves it."""
    folder = dataset / f"{index // 1000 * 1000:012d}" / f"{index:012d}"
    folder.mkdir(parents=True)
    n = 5
    start = created_ts_ns + 50_000_000
    ts = [start + round(k * duration_s * 1e9 / (n - 1)) for k in range(n)]
    _signal(folder / "target_grip.parquet", ts, [0.0, 1.0, 0.0, 1.0, 0.0])
    _signal(folder / "robot_state.q.parquet", ts, [[0.1 * k] * 7 for k in range(n)])
    (folder / "static.json").write_text(json.dumps(static, indent=2), encoding="utf-8")
    meta: dict[str, Any] = {
        "schema_version": 1,
        "created_ts_ns": created_ts_ns,
        "writer": {"python": "3.11.9", "platform": "Linux", "version": "0.2.0",
                   "name": "positronic.dataset.local_dataset.DiskEpisodeWriter"},
        "path": str(folder.resolve()),
        "duration_ns": ts[-1] - ts[0],
    }  # fmt: skip
    if uid is not None:
        meta["uid"] = uid
    (folder / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    if unfinished:
        (folder / ".unfinished").write_text("unfinished", encoding="utf-8")
    return folder


def _edit(dataset: Path, record: dict[str, Any]) -> None:
    with (dataset / "edits.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def write_release(root: Path, episodes: list[Ep] = EPISODES) -> tuple[Path, Path]:
    """``v1.0/dataset/{rollouts,human,teleoperation}/`` and an annotation
    file; returns (the dataset folder, the annotation file)."""
    base = root / "v1.0" / "dataset"
    counters: dict[str, int] = {}
    for k, ep in enumerate(episodes):
        index = counters.get(ep.dataset, 0)
        counters[ep.dataset] = index + 1
        static = {**ep.static(), **RECORDED.get(ep.uid, {})}
        write_episode(
            base / ep.dataset,
            index,
            static,
            uid=ep.uid,
            created_ts_ns=T0 + k * 600_000_000_000,
            duration_s=ep.duration,
        )
    rollouts = base / "rollouts"
    if rollouts.exists():
        # a fifth object the release filters out, dropped by the edit log; an
        # episode the writer never finished; the audit's correction
        write_episode(
            rollouts, 900, {**EPISODES[8].static(), "eval.object": "Cups"},
            uid="cups", created_ts_ns=T0 - 10**12, duration_s=20.0,
        )  # fmt: skip
        write_episode(
            rollouts, 901, {"model": "openpi"}, uid="half", created_ts_ns=T0 - 10**12,
            duration_s=3.0, unfinished=True,
        )  # fmt: skip
        _edit(rollouts, {"op": "drop", "v": 1, "ep": "cups"})
        _edit(rollouts, {"op": "set_static", "v": 1, "ep": "s6",
                         "data": {"eval.successful_items": 1}})  # fmt: skip
    annotations = root / "annotations.jsonl"
    annotations.write_text(
        "".join(json.dumps(ep.annotation()) + "\n" for ep in episodes), encoding="utf-8"
    )
    return base, annotations


@pytest.fixture
def release(tmp_path: Path) -> tuple[Path, Path]:
    return write_release(tmp_path)


# -- conversion ------------------------------------------------------------------------------


def test_the_release_becomes_interchange_episodes(release: tuple[Path, Path]) -> None:
    base, annotations = release
    result = import_release(base, FileAnnotations(annotations))
    got = {e.episode_id: e for e in result.episodes}
    # the dropped fifth-object episode and the unfinished one are not there
    assert sorted(got) == sorted(ep.uid for ep in EPISODES)
    o2 = got["o2"]
    assert o2 == Episode(
        episode_id="o2", policy="openpi", object="Towels", items=2, duration_s=20.0,
        placements_s=(12.0,), lost=0, dropped=0, outcome="safety", budget_s=60.0,
        tote_placement="left", external_camera="right",
        started_at="2026-02-25T07:43:20+00:00", reference=False,
    )  # fmt: skip
    # T0 (06:13:20 UTC) + 8 × 10 min: the start is meta.json's created_ts_ns, in UTC
    assert got["o1"].started_at == "2026-02-25T07:33:20+00:00"
    # the console's labels, as docs/methods.md §1 names them
    outcomes = {e.episode_id: e.outcome for e in result.episodes}
    assert outcomes["o4"] == "ran_out_of_time"
    assert outcomes["o5"] == "operator_stop"  # Fail: the operator stopped it
    assert outcomes["s4"] == "system"
    assert got["o6"].lost == 1
    # the edit log's correction is applied: 1 success, matching its annotation
    assert got["s6"].placements_s == (40.0,)
    # "NA" is the console's "not recorded"
    assert got["s2"].external_camera is None
    # the reference is the teleoperation set; the human baseline is a policy of its own
    assert {e.policy for e in result.episodes if e.reference} == {"teleop"}
    assert got["h1"].policy == "human" and not got["h1"].reference
    assert result.notes[0] == "20 episodes: human 2, openpi 6, smolvla 6, teleop 6"


def test_the_duration_falls_back_to_the_recordings(tmp_path: Path) -> None:
    """Without ``eval.duration`` the episode's ``duration_ns`` is its length
    (release_phail.py: ``ep.get('eval.duration') or ep.duration_ns / 1e9``)."""
    ep = Ep("rollouts", "d1", "act", "Scissors", "Ran out of time", 0.0, [5.0])
    base = tmp_path / "ds"
    static = {k: v for k, v in ep.static().items() if k != "eval.duration"}
    write_episode(base, 0, static, uid="d1", created_ts_ns=T0, duration_s=42.5)
    ann = tmp_path / "a.jsonl"
    ann.write_text(json.dumps(ep.annotation()) + "\n", encoding="utf-8")
    (only,) = import_release(base, FileAnnotations(ann), reference=None).episodes
    assert only.duration_s == pytest.approx(42.5)


def test_annotations_can_ride_the_edit_log(tmp_path: Path) -> None:
    """Placement times added as static items through Positronic's own edit
    log (``set_static``), with no annotation file."""
    eps = [e for e in EPISODES if e.dataset == "rollouts"]
    base, _ = write_release(tmp_path, eps)
    rollouts = base / "rollouts"
    for ep in eps:
        _edit(rollouts, {"op": "set_static", "v": 1, "ep": ep.uid, "data": {
            "proctor.placements_s": ep.placements, "proctor.lost": ep.lost,
            "proctor.dropped": ep.dropped}})  # fmt: skip
    result = import_release(base, StaticAnnotations(), reference=None)
    assert {e.episode_id: e.placements_s for e in result.episodes} == {
        e.uid: tuple(e.placements) for e in eps
    }
    assert not any("no episodes of the reference" in n for n in result.notes)


def test_only_phails_trained_objects_by_default(tmp_path: Path) -> None:
    """The teleoperation set holds episodes of other tasks (an empty
    ``eval.object``); PhAIL's analysis keeps its four trained objects."""
    eps = [
        Ep("teleoperation", "t1", "teleop", "Towels", "Success", 8.0, [3.0, 7.0]),
        Ep("teleoperation", "u1", "teleop", "", "Success", 8.0, [3.0, 7.0]),
        Ep("rollouts", "c1", "openpi", "Cups", "Success", 9.0, [3.0, 8.0]),
    ]
    base, ann = write_release(tmp_path, eps)
    result = import_release(base, FileAnnotations(ann))
    assert [e.episode_id for e in result.episodes] == ["t1"]
    assert (
        "left out 2 episode(s) of other objects ((none) 1, Cups 1); --all-objects keeps them"
        in result.notes
    )
    # every object: the empty one is then a problem of its file
    with pytest.raises(InvalidRelease) as exc:
        import_release(base, FileAnnotations(ann), objects=None)
    assert [x.split(": ", 1)[1] for x in exc.value.lines] == [
        "eval.object: expected a name, got ''"
    ]


def test_a_model_with_two_variants_is_two_policies(tmp_path: Path) -> None:
    eps = [e for e in EPISODES if e.model == "openpi"]
    eps[0].extra = {"variant": "270226-ee:150000"}
    try:
        base, ann = write_release(tmp_path, eps)
    finally:
        eps[0].extra = {}
    result = import_release(base, FileAnnotations(ann), reference=None)
    assert {e.policy for e in result.episodes} == {
        "openpi:270226-ee:150000",
        "openpi:270226-ee:200000",
    }
    assert any("has 2 variants" in n for n in result.notes)


# -- import, then analyze --------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from proctor.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def _rmst_by_hand(times: list[float], tau: float = 60.0) -> float:
    """Kaplan–Meier RMST of a cell with no censoring: S(t) is the share of
    operations not yet done, so the area under it to τ is the mean of
    min(T, τ), a ghost (T = +∞) counting τ."""
    return sum(min(t, tau) for t in times) / len(times)


def test_import_then_analyze_gives_the_hand_derived_cells(
    release: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, annotations = release
    out = tmp_path / "phail.jsonl"
    code, stdout, err = _cli(
        capsys, "import", "phail", str(base), "--annotations", str(annotations), "-o", str(out)
    )
    assert code == 0, err
    assert "20 episodes" in stdout and f"proctor analyze {out}" in stdout
    table = read_interchange(out)
    assert table.reference == "teleop" and len(table.episodes) == 20

    result = tmp_path / "result.json"
    code, stdout, err = _cli(
        capsys, "analyze", str(out), "--bootstrap", "200", "--seed", "1", "--json", str(result)
    )
    assert code == 0, err
    doc = json.loads(result.read_text())
    assert doc["protocol"]["tau"] == 60.0  # the budget: 30 s an item × 2
    cells = {(p["policy"], o["object"]): o for p in doc["policies"] for o in p["per_object"]}
    # inter-placement times: teleop Towels 3, 4 | 2, 4 | 4, 5
    ref_towels = _rmst_by_hand([3, 4, 2, 4, 4, 5])
    assert ref_towels == pytest.approx(22 / 6)
    assert cells["teleop", "Towels"]["rmst"]["estimate"] == pytest.approx(ref_towels, abs=1e-6)
    # openpi Towels 10, 15 | 12, then the safety stop's ghost | 8, 22
    openpi_towels = _rmst_by_hand([10, 15, 12, math.inf, 8, 22])
    assert openpi_towels == pytest.approx(127 / 6)
    assert cells["openpi", "Towels"]["rmst"]["estimate"] == pytest.approx(openpi_towels, abs=1e-6)
    # HRT is the cell-wise ratio of the reference's RMST to the policy's, in %
    assert cells["openpi", "Towels"]["hrt"]["estimate"] == pytest.approx(
        100 * ref_towels / openpi_towels, rel=1e-6
    )
    # one ghost in six operations: the plateau is 5/6
    assert cells["openpi", "Towels"]["hard_failure_rate"]["estimate"] == pytest.approx(1 / 6)
    # the System episode is excluded and listed, not scored
    assert [x["episode_id"] for x in doc["excluded"]] == ["s4"]
    policies = {p["policy"]: p for p in doc["policies"]}
    assert policies["smolvla"]["episodes"] == 5
    # one safety stop in openpi's six episodes, one in smolvla's five scored
    fm = {
        k: v["failure_modes"]["safety_stops_per_episode"]["estimate"] for k, v in policies.items()
    }
    assert fm["openpi"] == pytest.approx(1 / 6) and fm["smolvla"] == pytest.approx(1 / 5)
    # Table 3: every pair of the four policies has a verdict
    assert len(doc["pairs"]) == 6
    # Table 4's detection curves run on the same file
    code, stdout, err = _cli(
        capsys, "power", "detection", str(out), "--n", "2", "--outer", "3", "--inner", "10"
    )
    assert code == 0, err
    assert "openpi vs smolvla" in stdout


# -- malformed releases ----------------------------------------------------------------------


def _problems(base: Path, ann: Path) -> list[str]:
    with pytest.raises(InvalidRelease) as exc:
        import_release(base, FileAnnotations(ann), objects=None)
    return exc.value.lines


def _one_bad(tmp_path: Path, **change: Any) -> tuple[Path, Path, Path]:
    """A release of one openpi episode with ``change`` applied to its static
    items; returns (dataset, annotations, the episode's static.json)."""
    ep = Ep("rollouts", "b1", "openpi", "Towels", "Ran out of time", 60.0, [12.0])
    base, ann = write_release(tmp_path, [ep])
    static_path = next(base.rglob("static.json"))
    static = json.loads(static_path.read_text())
    for k, v in change.items():
        key = k.replace("__", ".")
        if v is None:
            static.pop(key, None)
        else:
            static[key] = v
    static_path.write_text(json.dumps(static))
    return base, ann, static_path


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"eval__outcome": None}, "eval.outcome", "missing"),
        ({"eval__outcome": "Exploded"}, "eval.outcome", "unknown outcome 'Exploded'"),
        ({"eval__total_items": 0}, "eval.total_items", "expected a whole number ≥ 1, got 0"),
        ({"model": None}, "model", "missing"),
        ({"eval__object": 7}, "eval.object", "expected a name, got 7"),
        ({"eval__duration": -1}, "eval.duration", "expected seconds > 0, got -1"),
        ({"eval__cap_per_item": "thirty"}, "eval.cap_per_item", "expected seconds > 0"),
        ({"eval__outcome": "Success"}, "eval.successful_items", "outcome Success but 1 of 2"),
        ({"eval__duration": 10.0}, "placements_s", "is after the episode's end"),
    ],
)
def test_a_bad_static_item_is_named_with_its_file(
    tmp_path: Path, change: dict[str, Any], field: str, reason: str
) -> None:
    base, ann, static_path = _one_bad(tmp_path, **change)
    lines = _problems(base, ann)
    assert any(line.startswith(f"{static_path}: {field}: ") and reason in line for line in lines), (
        lines
    )


def test_a_count_the_annotation_contradicts_is_named(tmp_path: Path) -> None:
    base, ann, static_path = _one_bad(tmp_path, eval__successful_items=2)
    (line,) = _problems(base, ann)
    assert line.startswith(f"{ann} line 1: placements_s: 1 placement time(s) but ")
    assert "eval.successful_items is 2" in line and str(static_path) in line


def test_bad_annotation_rows_are_named_by_line(tmp_path: Path) -> None:
    base, ann, static_path = _one_bad(tmp_path)
    ann.write_text(
        '{"uid": "b1", "placements_s": [12.0], "lost": -1, "dropped": 0}\n'
        "not json\n"
        '{"placements_s": []}\n',
        encoding="utf-8",
    )
    lines = _problems(base, ann)
    assert f"{ann} line 1: lost: expected a whole number ≥ 0, got -1" in lines
    assert any(x.startswith(f"{ann} line 2: row: not valid JSON") for x in lines)
    assert f"{ann} line 3: uid: missing" in lines
    # and the episode then has no annotation
    assert f"{static_path}: annotation: no row for uid 'b1' in {ann}" in lines


def test_broken_layout_files_are_named(tmp_path: Path) -> None:
    base, ann, static_path = _one_bad(tmp_path)
    meta = static_path.parent / "meta.json"
    data = json.loads(meta.read_text())
    del data["uid"], data["created_ts_ns"]
    meta.write_text(json.dumps(data))
    _edit(base / "rollouts", {"op": "rename", "v": 1, "ep": "b1"})
    second = write_episode(base / "rollouts", 1, {}, uid="b2", created_ts_ns=T0, duration_s=1)
    (second / "static.json").write_text("{not json")
    lines = _problems(base, ann)
    assert f"{meta}: uid: missing (and no created_ts_ns)" in lines
    assert (
        f"{base / 'rollouts' / 'edits.jsonl'} line 3: op: "
        "not a set_static, drop or undrop record of version 1"
    ) in lines
    assert any(x.startswith(f"{second / 'static.json'}: file: not valid JSON") for x in lines)


def test_the_cli_writes_nothing_from_a_bad_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, ann, static_path = _one_bad(tmp_path, eval__outcome="Exploded")
    out = tmp_path / "out.csv"
    code, _, err = _cli(
        capsys, "import", "phail", str(base), "--annotations", str(ann), "-o", str(out)
    )
    assert code == 2
    assert err.startswith(f"error: {static_path}: eval.outcome: unknown outcome 'Exploded'")
    assert not out.exists()


def test_a_folder_without_episodes_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty" / "rollouts").mkdir(parents=True)
    code, _, err = _cli(capsys, "import", "phail", str(tmp_path / "empty"), "-o",
                        str(tmp_path / "o.jsonl"))  # fmt: skip
    assert code == 2 and "no Positronic episodes" in err and err.count("\n") == 1
    code, _, err = _cli(capsys, "import", "phail", str(tmp_path / "nope"), "-o",
                        str(tmp_path / "o.jsonl"))  # fmt: skip
    assert code == 2 and "no such folder" in err
    cups = [Ep("rollouts", "c1", "openpi", "Cups", "Success", 9.0, [3.0, 8.0])]
    base, ann = write_release(tmp_path / "cups", cups)
    args = [
        "import",
        "phail",
        str(base),
        "--annotations",
        str(ann),
        "-o",
        str(tmp_path / "o.jsonl"),
    ]
    code, _, err = _cli(capsys, *args)
    assert code == 2 and "left out 1 episode(s) of other objects (Cups 1)" in err
    assert not (tmp_path / "o.jsonl").exists()
    code, _, err = _cli(capsys, *args, "--all-objects")
    assert code == 0, err
    assert [e.object for e in read_interchange(tmp_path / "o.jsonl").episodes] == ["Cups"]


def test_unreadable_files_are_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, ann, _ = _one_bad(tmp_path)
    edits = base / "rollouts" / "edits.jsonl"
    edits.write_bytes(b"\xff\xfe not utf-8\n")
    lines = _problems(base, ann)
    assert lines[0].startswith(f"{edits}: file: cannot read (")
    # without its edit log the dropped fifth-object episode is back, unannotated
    assert "no row for uid 'cups'" in lines[1] and len(lines) == 2
    missing = tmp_path / "nope.jsonl"
    code, _, err = _cli(
        capsys, "import", "phail", str(base), "--annotations", str(missing), "-o",
        str(tmp_path / "o.jsonl"),
    )  # fmt: skip
    assert code == 2 and err == f"error: {missing}: no such annotation file\n"
