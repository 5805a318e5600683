"""Reading and writing the interchange file (docs/methods.md §8)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from proctor.analysis.interchange import InvalidFile, read_interchange, write_interchange
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models
from proctor.core.errors import UsageError

HEADER = "episode_id,policy,object,items,duration_s,placements_s,lost,dropped,outcome"


def test_csv_and_jsonl_round_trip(tmp_path: Path) -> None:
    eps = cohort(phail_like_models()[:2], PHAIL_OBJECTS, episodes_per_cell=3,
                 rng=np.random.default_rng(0))  # fmt: skip
    for name in ("e.csv", "e.jsonl"):
        write_interchange(eps, tmp_path / name)
        table = read_interchange(tmp_path / name)
        assert list(table.episodes) == eps
        assert table.reference == "human"


def test_minimal_csv_with_optional_columns(tmp_path: Path) -> None:
    f = tmp_path / "x.csv"
    f.write_text(
        HEADER + ",tote_placement,external_camera,reference,object_tags,extra\n"
        "a,human,cup,3,9.5,1.5 3 4.25,0,0,success,left,right,true,rigid small,?\n"
        "b,bot,cup,3,90,,1,0,ran_out_of_time,,,,,\n"
    )
    table = read_interchange(f)
    a, b = table.episodes
    assert a.placements_s == (1.5, 3.0, 4.25) and a.reference and a.configuration
    assert a.object_tags == ("rigid", "small")
    assert b.placements_s == () and b.tote_placement is None and not b.reference
    assert table.reference == "human"
    assert table.notes == ("ignored unknown columns: extra",)


def test_every_problem_is_reported_with_line_episode_and_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(
        HEADER + "\n"
        "e1,p,o,3,10,4 2,0,0,ran_out_of_time\n"  # line 2: not increasing
        "e2,p,o,two,10,,0,0,ran_out_of_time\n"  # line 3: items not an integer
        "e3,p,o,2,10,1,0,0,success\n"  # line 4: success with an item left
        "e4,p,o,2,10,1,0,0,exploded\n"  # line 5: unknown outcome
        "e1,p,o,2,10,1,0,0,ran_out_of_time\n"  # line 6: duplicate id
        "e6,p,o,2,10,1 2 3,0,0,ran_out_of_time\n"  # line 7: 3 placed of 2 items
        "e7,p,o,2,,1,0,0,ran_out_of_time\n"  # line 8: duration missing
    )
    with pytest.raises(InvalidFile) as err:
        read_interchange(f)
    lines = err.value.lines
    assert len(lines) == 7
    expected = [
        ("line 2 (episode e1): placements_s:", "not strictly increasing"),
        ("line 3 (episode e2): items:", "expected an integer, got 'two'"),
        ("line 4 (episode e3): outcome:", "'success' but 1 of 2 items are unhandled"),
        ("line 5 (episode e4): outcome:", "unknown outcome 'exploded'"),
        ("line 6 (episode e1): episode_id:", "duplicate (first on line 2)"),
        ("line 7 (episode e6): items:", "exceeds items = 2"),
        ("line 8 (episode e7): duration_s:", "missing"),
    ]
    for line, (where, why) in zip(lines, expected, strict=True):
        assert line.startswith(f"{f} {where}"), line
        assert why in line


def test_missing_columns_and_bad_json(tmp_path: Path) -> None:
    f = tmp_path / "cols.csv"
    f.write_text("episode_id,policy,object,items\na,p,o,1\n")
    with pytest.raises(InvalidFile) as err:
        read_interchange(f)
    assert [ln.split(": ")[1] for ln in err.value.lines] == [
        "duration_s", "placements_s", "lost", "dropped", "outcome"
    ]  # fmt: skip
    j = tmp_path / "bad.jsonl"
    good = {"episode_id": "a", "policy": "p", "object": "o", "items": 1, "duration_s": 2,
            "placements_s": [1.0], "lost": 0, "dropped": 0, "outcome": "success"}  # fmt: skip
    j.write_text(
        json.dumps(good) + "\n{not json\n[1, 2]\n"
        + json.dumps(good | {"episode_id": "b", "reference": "maybe"}) + "\n"
    )  # fmt: skip
    with pytest.raises(InvalidFile) as err:
        read_interchange(j)
    assert [ln.split(f"{j} ")[1].split(":")[0] for ln in err.value.lines] == [
        "line 2", "line 3", "line 4 (episode b)"
    ]  # fmt: skip
    assert "not valid JSON" in err.value.lines[0]
    assert "reference: expected true or false" in err.value.lines[2]


def test_reference_conflicts_and_empty_files(tmp_path: Path) -> None:
    f = tmp_path / "r.csv"
    f.write_text(HEADER + ",reference\na,h,o,1,2,1,0,0,success,true\nb,m,o,1,2,1,0,0,success,\n")
    with pytest.raises(InvalidFile, match="--reference names 'm'"):
        read_interchange(f, reference="m")
    assert read_interchange(f, reference="h").reference == "h"
    empty = tmp_path / "e.csv"
    empty.write_text(HEADER + "\n")
    with pytest.raises(InvalidFile, match="no episodes"):
        read_interchange(empty)
    with pytest.raises(UsageError, match="no such file"):
        read_interchange(tmp_path / "missing.csv")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", ": empty file"),
        ("\n  \n", ": empty file"),
        (
            HEADER.replace(",", ";") + "\na;p;o;1;2;1;0;0;success\n",
            " line 1: the header looks ';'-separated; the interchange CSV is comma-separated",
        ),
        (
            HEADER.replace(",", "\t") + "\na\tp\to\t1\t2\t1\t0\t0\tsuccess\n",
            " line 1: the header looks tab-separated",
        ),
        ("name,age\nx,3\n", " line 1: no required column in the header"),
    ],
)
def test_a_file_that_is_not_an_interchange_file_is_one_line(
    tmp_path: Path, content: str, message: str
) -> None:
    """Used to be nine "required column missing" lines."""
    f = tmp_path / "x.csv"
    f.write_text(content)
    with pytest.raises(UsageError) as err:
        read_interchange(f)
    assert not isinstance(err.value, InvalidFile)  # one line, not one per column
    assert str(err.value).startswith(f"{f}{message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_a_folder_is_not_a_missing_file(tmp_path: Path) -> None:
    folder = tmp_path / "episodes.csv"
    folder.mkdir()
    with pytest.raises(UsageError, match="is a directory, not an interchange file"):
        read_interchange(folder)


def test_many_bad_rows_keep_only_the_reported_problems(tmp_path: Path) -> None:
    """Problems past MAX_REPORTED are counted, not kept: 20 000 rows with two
    problems each leave 100 problem objects and one line for the rest."""
    from proctor.analysis.interchange import MAX_REPORTED

    rows = 20_000
    f = tmp_path / "bad.csv"
    with f.open("w") as fh:
        fh.write(HEADER + "\n")
        for k in range(rows):
            fh.write(f"e{k},p,o,two,ten,,0,0,ran_out_of_time\n")
    with pytest.raises(InvalidFile) as err:
        read_interchange(f)
    exc = err.value
    assert exc.total == 2 * rows
    assert len(exc.problems) == MAX_REPORTED
    assert len(exc.lines) == MAX_REPORTED + 1
    assert exc.lines[0] == f"{f} line 2 (episode e0): items: expected an integer, got 'two'"
    assert exc.lines[-1] == f"{f}: … and {2 * rows - MAX_REPORTED} more problems"


def test_envelope_interventions_column_round_trips_and_empty_is_unknown(tmp_path: Path) -> None:
    f = tmp_path / "env.csv"
    f.write_text(
        HEADER + ",envelope_interventions\n"
        "a,bot,cup,3,90,,1,0,ran_out_of_time,4\n"
        "b,bot,cup,3,90,,1,0,ran_out_of_time,\n"
        "c,bot,cup,3,90,,1,0,ran_out_of_time,0\n"
    )
    table = read_interchange(f)
    assert [e.envelope_interventions for e in table.episodes] == [4, None, 0]
    for name in ("out.csv", "out.jsonl"):
        write_interchange(table.episodes, tmp_path / name)
        assert read_interchange(tmp_path / name).episodes == table.episodes
    assert ",4,,,\n" in (tmp_path / "out.csv").read_text()  # policy_fault, block, sequence follow
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["envelope_interventions"] for r in rows] == [4, None, 0]


def test_a_bad_envelope_count_names_the_field(tmp_path: Path) -> None:
    f = tmp_path / "bad-env.csv"
    f.write_text(
        HEADER + ",envelope_interventions\n"
        "a,bot,cup,3,90,,1,0,ran_out_of_time,-2\n"
        "b,bot,cup,3,90,,1,0,ran_out_of_time,1.5\n"
    )
    with pytest.raises(InvalidFile) as err:
        read_interchange(f)
    a, b = err.value.lines
    assert "(episode a): envelope_interventions: must not be negative, got -2" in a
    assert "(episode b): envelope_interventions: expected an integer, got '1.5'" in b


def test_the_policy_fault_column_round_trips_and_an_unknown_class_is_refused(
    tmp_path: Path,
) -> None:
    f = tmp_path / "faults.csv"
    f.write_text(
        HEADER + ",policy_fault\n"
        "a,bot,cup,3,90,,0,0,system,policy_motion\n"
        "b,bot,cup,3,90,,1,0,ran_out_of_time,\n"
    )
    table = read_interchange(f)
    assert [e.policy_fault for e in table.episodes] == ["policy_motion", None]
    for name in ("out.csv", "out.jsonl"):
        write_interchange(table.episodes, tmp_path / name)
        assert read_interchange(tmp_path / name).episodes == table.episodes
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + ",policy_fault\na,bot,cup,3,90,,0,0,system,the_weather\n")
    with pytest.raises(InvalidFile) as exc:
        read_interchange(bad)
    assert "policy_fault: unknown fault class 'the_weather'" in exc.value.lines[0]
