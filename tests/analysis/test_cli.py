"""``proctor analyze`` and ``proctor power`` as a user runs them: real
subprocesses on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from proctor.analysis.interchange import write_interchange
from proctor.analysis.synthetic import cohort, phail_like_models
from tests.analysis.cli_support import in_process

OBJECTS = {"spoons": ("rigid",), "towels": ("deformable",)}


def proctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture(scope="module")
def episodes_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    eps = cohort(
        phail_like_models()[:3], OBJECTS, episodes_per_cell=10, rng=np.random.default_rng(21)
    )
    path = tmp_path_factory.mktemp("cli") / "episodes.csv"
    write_interchange(eps, path)
    return path


def test_analyze_prints_writes_json_and_figures(episodes_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    plots = tmp_path / "figures"
    r = proctor(
        "analyze", str(episodes_csv), "--bootstrap", "200", "--seed", "3", "--json", str(out),
        "--plots", str(plots),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for text in ("Leaderboard", "human", "alpha", "beta", "HRT", "Pairwise verdicts", "τ = 300"):
        assert text in r.stdout
    js = json.loads(out.read_text())
    assert js["protocol"]["bootstrap"] == 200 and js["protocol"]["seed"] == 3
    assert js["protocol"]["reference"] == "human"
    assert js["data_version"] and js["code_version"].startswith("proctor-")
    assert {p["policy"] for p in js["policies"]} == {"human", "alpha", "beta"}
    names = {p.name for p in plots.iterdir()}
    for stem in ("cdf_spoons", "pp_towels", "qq_spoons", "rmst_grid", "tau_sweep"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
    assert (plots / "rmst_grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (plots / "cdf_towels.svg").read_bytes()[:2000]


def test_bad_file_one_line_per_problem_exit_2_nothing_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "episode_id,policy,object,items,duration_s,placements_s,lost,dropped,outcome\n"
        "a,p,o,2,10,5 3,0,0,ran_out_of_time\n"
        "b,p,o,2,10,1,0,0,unknown\n"
    )
    out = tmp_path / "r.json"
    plots = tmp_path / "plots"
    r = proctor("analyze", str(bad), "--json", str(out), "--plots", str(plots))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"error: {bad} line 2 (episode a): placements_s:")
    assert lines[1].startswith(f"error: {bad} line 3 (episode b): outcome:")
    assert "Traceback" not in r.stderr
    assert not out.exists() and not plots.exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--bootstrap", "0"], "bootstrap"),
        (["--alpha", "2"], "alpha"),
        (["--tau", "-5"], "tau"),
        (["--json", "/nonexistent-dir/x.json"], "does not exist"),
        (["--at", "ten"], "--at"),
        # float() takes these; they used to be computed with, then fail
        # writing the JSON (exit 1) or print a leaderboard (exit 0)
        (["--at", "nan"], "--at: values must be finite and positive, got nan"),
        (["--at", "10,inf"], "--at: values must be finite and positive, got inf"),
        (["--at", "0"], "--at: values must be finite and positive"),
        (["--tau", "nan"], "--tau: "),
        (["--tau", "inf"], "--tau: "),
        (["--alpha", "nan"], "--alpha: "),
        (["--ks-resamples", "0"], "--ks-resamples: "),
        (["--seed", "-1"], "--seed: must be a non-negative integer, got -1"),
    ],
)
def test_bad_options_exit_2(
    episodes_csv: Path,
    args: list[str],
    fragment: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    json_out = tmp_path / "r.json"
    if "--json" not in args:
        args = [*args, "--json", str(json_out)]
    code, out, err = in_process(capsys, "analyze", str(episodes_csv), *args)
    assert code == 2, out
    assert err.startswith("error: ") and fragment in err
    assert len(err.strip().splitlines()) == 1
    # named as the user typed it, not as the AnalysisProtocol field
    assert "success_at" not in err and "ks_resamples" not in err
    assert not json_out.exists() and "Leaderboard" not in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["pair", "{csv}", "--tau", "nan"], "--tau: must be a finite positive number, got nan"),
        (["pair", "{csv}", "--tau", "inf"], "--tau: must be a finite positive number, got inf"),
        (["detection", "{csv}", "--tau", "-3"], "--tau: must be a finite positive number"),
        (
            ["detection", "{csv}", "--at", "nan"],
            "--at: values must be finite and positive, got nan",
        ),
        (["pair", "{csv}", "--alpha", "nan"], "--alpha: "),
        (["pair", "{csv}", "--rho", "nan"], "--rho: "),
        (["pair", "{csv}", "--power", "inf"], "--power: "),
        (["pair", "{csv}", "--sims", "5"], "--sims: must be at least 10, got 5"),
        (["calibrate", "{csv}", "--outer", "0"], "--outer and --inner must be positive"),
        (["wilson", "--halfwidth", "nan"], "--halfwidth: "),
        (["wilson", "--halfwidth", "0.1", "--p", "nan"], "--p: must be in [0, 1], got nan"),
        (["wilson", "--halfwidth", "0.1", "--p", "1.5"], "--p: must be in [0, 1], got 1.5"),
        (["pair", "{csv}", "--seed", "-1"], "--seed: must be a non-negative integer, got -1"),
        (["connor", "--delta", "0.1", "--psi", "nan"], "--psi: "),
    ],
)
def test_power_rejects_non_finite_options(
    episodes_csv: Path,
    args: list[str],
    fragment: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    json_out = tmp_path / "p.json"
    args = [a.format(csv=episodes_csv) for a in args]
    code, out, err = in_process(capsys, "power", *args, "--json", str(json_out))
    assert code == 2, out
    assert err.startswith("error: ") and fragment in err, err
    assert len(err.strip().splitlines()) == 1
    assert not json_out.exists()


@pytest.mark.parametrize("umask", [0o027, 0o002])
def test_outputs_get_the_mode_the_umask_gives(
    episodes_csv: Path, tmp_path: Path, umask: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from proctor.analysis.interchange import read_interchange

    result, power_out, copy = tmp_path / "r.json", tmp_path / "p.json", tmp_path / "copy.jsonl"
    old = os.umask(umask)
    try:
        code, _, err = in_process(
            capsys, "analyze", str(episodes_csv), "--bootstrap", "20", "--json", str(result)
        )
        assert code == 0, err
        code, _, err = in_process(
            capsys, "power", "wilson", "--halfwidth", "0.1", "--json", str(power_out)
        )
        assert code == 0, err
        write_interchange(read_interchange(episodes_csv).episodes, copy)
    finally:
        os.umask(old)
    for path in (result, power_out, copy):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


def test_power_planning_formulas(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = in_process(capsys, "power", "wilson", "--halfwidth", "0.05")
    assert code == 0, err
    assert "n ≈ 385" in out
    out_json = tmp_path / "connor.json"
    code, out, err = in_process(
        capsys, "power", "connor", "--delta", "0.05", "--psi", "0.2,0.5", "--json", str(out_json)
    )
    assert code == 0, err
    assert "n = 626 pairs" in out and "n = 1568 pairs" in out
    assert [row["n"] for row in json.loads(out_json.read_text())["connor"]] == [626, 1568]
    code, _, err = in_process(capsys, "power", "wilson")
    assert code == 2 and "--halfwidth" in err


def test_power_is_a_group_whose_subcommands_take_only_their_own_options(
    episodes_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seven jobs, seven subcommands: an option of one job is refused by another,
    and the old flat form is answered with the subcommand that replaced it."""
    from proctor.cli import load_service_command

    group = load_service_command("power")
    assert sorted(group.commands) == [
        "calibrate", "connor", "detection", "pair", "sequential", "step", "wilson",
    ]  # fmt: skip
    options = {
        name: {o for p in cmd.params for o in p.opts if o.startswith("--")}
        for name, cmd in group.commands.items()
    }
    assert "--wilson" not in set().union(*options.values())
    assert "--outer" not in options["pair"] and "--sims" not in options["detection"]
    assert options["wilson"] == {"--halfwidth", "--p", "--alpha", "--json"}
    code, _, err = in_process(capsys, "power", "wilson", "--halfwidth", "0.1", "--outer", "3")
    assert code == 2 and "--outer" in err
    for flat, new in (
        (["--wilson", "0.05"], "proctor power wilson --halfwidth"),
        (["--connor-delta", "0.05"], "proctor power connor --delta"),
        ([str(episodes_csv), "--detection"], "proctor power detection FILE"),
        ([str(episodes_csv), "--calibrate"], "proctor power calibrate FILE"),
        ([str(episodes_csv)], "proctor power pair FILE"),
    ):
        code, out, err = in_process(capsys, "power", *flat)
        assert code == 2, out
        assert err.startswith("error: ") and new in err, err
        assert len(err.strip().splitlines()) == 1


def test_power_from_episodes_with_detection_and_calibration(
    episodes_csv: Path, tmp_path: Path
) -> None:
    out = tmp_path / "power.json"
    r = proctor(
        "power", "pair", str(episodes_csv), "--pair", "alpha,beta", "--sims", "300",
        "--json", str(out), "--plots", str(tmp_path / "fig"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "alpha vs beta" in r.stdout
    js = json.loads(out.read_text())
    (pair,) = js["pairs"]
    assert pair["a"] == "alpha" and pair["b"] == "beta"
    assert pair["n_needed_per_cell"] is None or pair["n_needed_per_cell"] >= 1
    r = proctor(
        "power", "detection", str(episodes_csv), "--pair", "alpha,beta",
        "--outer", "20", "--inner", "20", "--n", "3,6", "--json", str(out),
        "--plots", str(tmp_path / "fig"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "alpha vs beta" in r.stdout and "detection rate" in r.stdout
    (det,) = json.loads(out.read_text())["detection"]
    assert det["n"] == [3, 6] and set(det["rate"]) == {"macro_ks", "rmst", "binary@30", "binary@60"}
    assert (tmp_path / "fig" / "detection_alpha_vs_beta.svg").is_file()
    r = proctor(
        "power", "calibrate", str(episodes_csv), "--pair", "alpha,beta",
        "--outer", "20", "--inner", "20", "--json", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Null calibration" in r.stdout
    js = json.loads(out.read_text())
    assert {row["setup"] for row in js["null_calibration"]} >= {"split", "reference split"}
    r = proctor("power", "pair", str(episodes_csv), "--pair", "alpha,nobody")
    assert r.returncode == 2 and "no policy 'nobody'" in r.stderr


def test_power_reads_an_analysis_result(episodes_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert (
        proctor("analyze", str(episodes_csv), "--bootstrap", "100", "--json", str(out)).returncode
        == 0
    )
    r = proctor("power", "pair", str(out))
    assert r.returncode == 0, r.stderr
    assert "Power of unresolved pairs" in r.stdout
    # the experiments resample episodes, which a result does not carry
    r = proctor("power", "detection", str(out))
    assert r.returncode == 2 and "an analysis result has no episodes" in r.stderr, r.stderr


def test_analyze_and_power_with_a_policy_that_never_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22: this file made `proctor analyze` exit 2 with "attempt to get
    argmax of an empty sequence"."""
    path = tmp_path / "never.csv"
    path.write_text(
        "episode_id,policy,object,items,duration_s,placements_s,lost,dropped,outcome,budget_s\n"
        "h1,human,o,2,20,5 10,0,0,success,60\n"
        "h2,human,o,2,25,6 12,0,0,success,60\n"
        "a1,stuck,o,2,60,,0,0,ran_out_of_time,60\n"
        "a2,stuck,o,2,60,,0,0,ran_out_of_time,60\n"
    )
    out = tmp_path / "r.json"
    code, stdout, err = in_process(
        capsys, "analyze", str(path), "--reference", "human", "--bootstrap", "50",
        "--json", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "stuck" in stdout
    stuck = next(p for p in json.loads(out.read_text())["policies"] if p["policy"] == "stuck")
    assert stuck["rmst"] == {"estimate": 60.0, "ci": [60.0, 60.0]}  # τ = the budget
    assert stuck["median"]["estimate"] is None
    code, stdout, err = in_process(capsys, "power", "pair", str(path), "--sims", "50")
    assert code == 0, err
    assert "human vs stuck" in stdout or "stuck vs human" in stdout


SPLIT_OBJECTS = (
    "episode_id,policy,object,items,duration_s,placements_s,lost,dropped,outcome,budget_s\n"
    "a1,A,o1,1,5,2,0,0,success,60\n"
    "a2,A,o1,1,5,3,0,0,success,60\n"
    "b1,B,o2,1,5,2,0,0,success,60\n"
    "b2,B,o2,1,75,,0,0,ran_out_of_time,60\n"
    "c1,C,o1,1,5,4,0,0,success,60\n"
    "c2,C,o2,1,5,4,0,0,success,60\n"
)


def test_power_leaves_out_a_pair_with_no_shared_object_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the leaderboard does; it used to fail the whole command (exit 2)."""
    path = tmp_path / "split.csv"
    path.write_text(SPLIT_OBJECTS)
    out = tmp_path / "p.json"
    code, stdout, err = in_process(
        capsys, "power", "pair", str(path), "--sims", "50", "--json", str(out)
    )
    assert code == 0, err
    assert "note: A and B were run on no common object: not compared" in stdout
    js = json.loads(out.read_text())
    assert [(p["a"], p["b"]) for p in js["pairs"]] == [("A", "C"), ("B", "C")]
    assert js["notes"] == ["A and B were run on no common object: not compared"]
    # asking for that pair by name is still an error
    code, _, err = in_process(capsys, "power", "pair", str(path), "--pair", "A,B", "--sims", "50")
    assert code == 2 and "--pair A,B: the two policies share no object" in err


def test_analyze_notes_episodes_past_their_budget_when_tau_is_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "split.csv"
    path.write_text(SPLIT_OBJECTS)
    out = tmp_path / "r.json"
    code, stdout, err = in_process(
        capsys, "analyze", str(path), "--bootstrap", "20", "--json", str(out)
    )
    assert code == 0, err
    note = (
        "1 episode(s) ran past their budget_s (longest: b2, 75 s of 60 s); τ defaulted to "
        "the budget, 60 s, so time after it is not scored (pass --tau to choose)"
    )
    assert note in json.loads(out.read_text())["notes"]
    assert "ran past their budget_s" in stdout
    # τ given: nothing defaulted, no note
    code, stdout, err = in_process(capsys, "analyze", str(path), "--bootstrap", "20", "--tau", "60")
    assert code == 0, err
    assert "ran past" not in stdout


def test_scoring_does_not_import_scipy_stats() -> None:
    """scipy.stats costs `proctor analyze` about half a second of start-up (more
    on a loaded machine) for four functions scipy.special has: structural,
    not timed."""
    code = (
        "import sys; import proctor.analysis.leaderboard, proctor.analysis.cli; "
        "import proctor.analysis.store; "
        "print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
