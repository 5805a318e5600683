"""Pairing by design (proctor/analysis/pairing.py, docs/methods.md §10, §11):
within block by (block, sequence), bet in block order, one function for the
CLI, the board and the adaptive rule; the interchange file carries block and
sequence (format 2) and a format-1 file falls back to start order, saying so.
And the direction of a sequential verdict (§10 "Direction"): named by the
confidence sequence on δ, not by the sign of the bets."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from proctor.analysis.episodes import Episode
from proctor.analysis.interchange import read_interchange, write_interchange
from proctor.analysis.pairing import BY_DESIGN, BY_START, pair_episodes
from proctor.analysis.resolution import Outcome, pair_crossings
from proctor.analysis.sequential import episode_scores, sequential_pair, start_times

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def ep(eid: str, policy: str, per_item: float, *, block: int | None, seq: int | None,
       minute: int, outcome: str = "success", obj: str = "spoons") -> Episode:  # fmt: skip
    placements = () if outcome == "system" else tuple(per_item * k for k in range(1, 4))
    return Episode(
        eid, policy, obj, 3, placements[-1] if placements else 1.0, placements, 0, 0, outcome,
        started_at=(T0 + timedelta(minutes=minute)).isoformat(), block=block, sequence=seq,
    )  # fmt: skip


def requeued_campaign() -> list[Episode]:
    """Three blocks of one A and one B; B's block-0 run ends as a system
    fault and its replacement (same block, the next free sequence) runs
    after every other slot, as proctor.scheduler.claims does."""
    return [
        ep("a0", "A", 1.0, block=0, seq=1, minute=0),
        ep("b0x", "B", 1.0, block=0, seq=2, minute=1, outcome="system"),
        ep("a1", "A", 2.0, block=1, seq=3, minute=2),
        ep("b1", "B", 2.0, block=1, seq=4, minute=3),
        ep("b2", "B", 3.0, block=2, seq=6, minute=4),
        ep("a2", "A", 3.0, block=2, seq=5, minute=5),
        ep("b0", "B", 1.0, block=0, seq=7, minute=6),
    ]


def _ids(pairing: object) -> list[tuple[str, str]]:
    eps = pairing.episodes  # type: ignore[attr-defined]
    return [(eps[i].episode_id, eps[j].episode_id) for i, j in pairing.pairs]  # type: ignore[attr-defined]


def test_a_replacement_pairs_inside_its_block_by_design_and_not_by_start() -> None:
    eps = requeued_campaign()
    by_design = pair_episodes("A", "B", eps)
    assert by_design.basis == BY_DESIGN and by_design.note is None
    assert _ids(by_design) == [("a0", "b0"), ("a1", "b1"), ("a2", "b2")]
    # the bets are placed in block order: every pair's episodes share a block
    assert [by_design.episodes[i].block for i, _ in by_design.pairs] == [0, 1, 2]
    # start order (what the CLI did before, and the fallback): the replacement
    # ran last, so every pair straddles two blocks
    no_design = [dataclasses.replace(e, block=None, sequence=None) for e in eps]
    by_start = pair_episodes("A", "B", no_design, start_times(no_design))
    assert by_start.basis == BY_START and "start order" in (by_start.note or "")
    assert _ids(by_start) == [("a0", "b1"), ("a1", "b2"), ("a2", "b0")]


def test_a_block_with_more_of_one_policy_holds_as_many_pairs_as_the_fewer() -> None:
    # after a shift, A runs three slots of block 0 and B one: one pair, A's first
    eps = [
        ep("a0", "A", 1.0, block=0, seq=3, minute=0),
        ep("b0", "B", 1.0, block=0, seq=1, minute=1),
        ep("a0'", "A", 1.0, block=0, seq=2, minute=2),
        ep("a0''", "A", 1.0, block=0, seq=4, minute=3),
        ep("a1", "A", 1.0, block=1, seq=5, minute=4),
        ep("b1", "B", 1.0, block=1, seq=6, minute=5),
    ]
    assert _ids(pair_episodes("A", "B", eps)) == [("a0'", "b0"), ("a1", "b1")]


def test_two_episodes_with_one_block_and_sequence_are_refused() -> None:
    eps = requeued_campaign()
    eps[-1] = dataclasses.replace(eps[-1], sequence=1)
    with pytest.raises(ValueError, match="share block 0 and sequence 1"):
        pair_episodes("A", "B", eps)


def drifting_adaptive_outcomes(rng: np.random.Generator) -> list[Outcome]:
    """Policy 1 (A) and 2 (B), B four times slower, 40 blocks on one object
    with A given three slots of every block from block 10 on."""
    out: list[Outcome] = []
    seq = 0
    for b in range(40):
        n_a = 1 if b < 10 else 3
        for pol, n in (("1", n_a), ("2", 1)):
            for _ in range(n):
                seq += 1
                times = np.cumsum(rng.exponential(2.0 if pol == "1" else 8.0, 3))
                e = Episode(f"e{seq}", pol, "7", 3, float(times[-1]),
                            tuple(float(t) for t in times), 0, 0, "success")  # fmt: skip
                out.append(Outcome(b, seq, e))
    return out


def test_the_adaptive_rule_does_not_skip_a_pair_whose_data_is_faulty() -> None:
    """A pair without shared episodes yet is no pair to stop; two episodes in
    one (block, sequence) are a fault in the data: the rule says so instead
    of never stopping that pair without a word."""
    outcomes = drifting_adaptive_outcomes(np.random.default_rng(5))
    assert pair_crossings([1, 3], [7], 0.05, outcomes) == []  # policy 3 never ran
    twin = outcomes[1]
    clash = [*outcomes, Outcome(twin.block_index, twin.sequence, twin.episode)]
    with pytest.raises(ValueError, match="share block"):
        pair_crossings([1, 2], [7], 0.05, clash)


def test_the_board_and_the_cli_read_one_e_process() -> None:
    """pair_crossings (the board, the adaptive rule) and the CLI's
    sequential_pair on the same episodes with block and sequence: one
    crossing, at the same wealth and in the same block."""
    outcomes = drifting_adaptive_outcomes(np.random.default_rng(5))
    (stop,) = pair_crossings([1, 2], [7], 0.05, outcomes)
    eps = [
        dataclasses.replace(o.episode, block=o.block_index, sequence=o.sequence) for o in outcomes
    ]
    run = sequential_pair("1", "2", eps, None, alpha=0.05, comparisons=1)
    assert run.pairing == BY_DESIGN and run.rejected
    assert run.e_value == pytest.approx(stop.e_value, rel=1e-12)
    assert run.stopped_at is not None
    assert eps_in_order(eps)[run.stopped_at - 1].block == stop.block
    # one pair per block however many slots A had: the bets count the blocks
    assert run.matched_pairs == 40


def eps_in_order(eps: list[Episode]) -> list[Episode]:
    return sorted(eps, key=lambda e: (e.block or 0, e.sequence or 0))


def test_block_and_sequence_round_trip_and_a_format_1_file_falls_back(tmp_path: Path) -> None:
    eps = requeued_campaign()
    for name in ("f.csv", "f.jsonl"):
        write_interchange(eps, tmp_path / name)
        back = read_interchange(tmp_path / name).episodes
        assert [(e.block, e.sequence) for e in back] == [(e.block, e.sequence) for e in eps]
    assert "block,sequence" in (tmp_path / "f.csv").read_text().splitlines()[0]
    # a format-1 file: the same columns less block and sequence
    lines = (tmp_path / "f.csv").read_text().splitlines()
    old = tmp_path / "old.csv"
    old.write_text("\n".join(line.rsplit(",", 2)[0] for line in lines) + "\n")
    table = read_interchange(old)
    assert all(e.block is None and e.sequence is None for e in table.episodes)
    run = sequential_pair("A", "B", table.episodes, start_times(table.episodes), alpha=0.05,
                          comparisons=1)  # fmt: skip
    assert run.pairing == BY_START and "start order" in (run.note or "")


def test_block_and_sequence_come_together(tmp_path: Path) -> None:
    from proctor.analysis.interchange import InvalidFile

    eps = requeued_campaign()
    write_interchange([dataclasses.replace(eps[0], sequence=None), *eps[1:]], tmp_path / "x.csv")
    with pytest.raises(InvalidFile, match="block and sequence come together"):
        read_interchange(tmp_path / "x.csv")


# --- the direction --------------------------------------------------------------


def test_episode_score_by_hand() -> None:
    # placements 2, 5, 40 s of 4 items, τ = 10: min(2, 10) + min(3, 10) +
    # min(35, 10) + 10 (the fourth item, not placed) = 25 → 25 / 40 = 0.625
    e = Episode("x", "A", "o", 4, 50.0, (2.0, 5.0, 40.0), 0, 0, "ran_out_of_time")
    assert episode_scores([e], 10.0)[0] == pytest.approx(0.625)


def streaky_vs_steady(rng: np.random.Generator, blocks: int) -> list[Episode]:
    """The review's hidden null: both policies' operations have one marginal
    law (3 s × Gamma(1) frailty × LogNormal(0, 0.3)); the streaky policy
    draws its frailty once per episode, the steady one per operation. Equal
    per-operation CDFs, so δ = 0, but the episodes are not exchangeable."""
    out = []
    for b in range(blocks):
        for k, (pol, streaky) in enumerate((("S", True), ("T", False))):
            w = rng.gamma(1.0, 1.0, size=1 if streaky else 6)
            gaps = 3.0 * w * rng.lognormal(0.0, 0.3, size=6)
            t = tuple(float(x) for x in np.cumsum(gaps))
            out.append(Episode(f"{pol}{b}", pol, "o", 6, t[-1], t, 0, 0, "success",
                               block=b, sequence=2 * b + k))  # fmt: skip
    return out


def test_on_the_hidden_null_the_e_process_rejects_but_no_direction_is_named() -> None:
    """Streaky vs steady with equal per-operation CDFs: the e-process
    rejects (its null, exchangeable episodes, is false), yet the confidence
    sequence on δ names a direction in at most α of the streams (+2 SE).
    Before, the sign of the bets named the streaky policy every time."""
    rng = np.random.default_rng(21)
    streams, alpha = 150, 0.05
    rejected = named = 0
    for _ in range(streams):
        run = sequential_pair("S", "T", streaky_vs_steady(rng, 200), None, alpha=alpha,
                              comparisons=1, tau=60.0)  # fmt: skip
        rejected += run.rejected
        named += run.favours is not None
    assert rejected / streams > 0.3  # the hidden null bites the e-process
    assert named / streams <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / streams), named


def test_a_real_speed_difference_is_named_the_right_way() -> None:
    rng = np.random.default_rng(22)
    named_right = named_wrong = 0
    for _ in range(40):
        eps = streaky_vs_steady(rng, 150)
        # the steady policy 2× slower: δ > 0 for S (τ = 15 s, 5× the mean
        # operation: the sequence's width scales with the range τ of the score)
        eps = [
            dataclasses.replace(e, placements_s=tuple(2.0 * t for t in e.placements_s),
                                duration_s=2.0 * e.duration_s) if e.policy == "T" else e
            for e in eps
        ]  # fmt: skip
        run = sequential_pair("S", "T", eps, None, alpha=0.05, comparisons=1, tau=15.0)
        named_right += run.favours == "S"
        named_wrong += run.favours == "T"
    assert named_wrong == 0 and named_right >= 36


def test_analyze_sequential_pairs_a_format_2_file_by_design(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`proctor analyze --sequential` on a file with block and sequence:
    no start times are needed, the pairs are the board's, and the verdict
    names a direction only through the confidence sequence."""
    from proctor.cli import main

    eps = [
        dataclasses.replace(e, started_at=None, block=e.block, sequence=e.sequence)
        for e in streaky_vs_steady(np.random.default_rng(8), 60)
    ]
    # T 2× slower, as in the power test above
    eps = [
        dataclasses.replace(e, placements_s=tuple(2.0 * t for t in e.placements_s),
                            duration_s=2.0 * e.duration_s) if e.policy == "T" else e
        for e in eps
    ]  # fmt: skip
    path, out = tmp_path / "f.csv", tmp_path / "r.json"
    write_interchange(eps, path)
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(path), "--sequential", "--tau", "15", "--bootstrap", "50",
              "--json", str(out)])  # fmt: skip
    stdout, err = capsys.readouterr()
    assert int(exit_.value.code or 0) == 0, err
    assert "paired by block and sequence" in stdout and "start order" not in stdout
    import json

    (pair,) = json.loads(out.read_text())["pairs"]
    seq = pair["sequential"]
    assert seq["pairing"] == "block" and seq["tau"] == 15.0
    direct = sequential_pair("S", "T", eps, None, alpha=0.05, comparisons=1, tau=15.0)
    assert seq["e_value"] == pytest.approx(direct.e_value)
    assert seq["delta_s"] == pytest.approx(list(direct.delta_s or ()))
    assert seq["verdict"] == direct.verdict


def test_matched_z_is_the_diagonal_of_pair_z() -> None:
    """The one-pass bets of matched pairs equal pair_z's (checked by hand and
    against the stratum log-rank in test_sequential.py), on PhAIL-like
    episodes with ghosts, safety stops and censored tails."""
    from proctor.analysis.episodes import scored
    from proctor.analysis.operations import extract_operations
    from proctor.analysis.sequential import matched_z, pad_operations, pair_z
    from proctor.analysis.synthetic import cohort, phail_like_models

    eps, _ = scored(
        cohort(phail_like_models()[1:3], {"spoons": ()}, episodes_per_cell=40,
               rng=np.random.default_rng(9), configurations=False)
    )  # fmt: skip
    names = sorted({e.policy for e in eps})
    a = pad_operations(extract_operations([e for e in eps if e.policy == names[0]][:40]))
    b = pad_operations(extract_operations([e for e in eps if e.policy == names[1]][:40]))
    assert not np.isfinite(a.time[a.present]).all()  # ghosts are in
    assert matched_z(a, b) == pytest.approx(np.diag(pair_z(a, b)), abs=1e-12)
    assert matched_z(b, a) == pytest.approx(-matched_z(a, b), abs=1e-12)
