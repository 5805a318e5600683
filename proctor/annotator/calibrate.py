"""Calibrate the detector's thresholds on the simulated cell's ground truth.

    proctor calibrate                            # simulate, sweep, write thresholds.toml
    proctor calibrate --episodes 120 --dry-run
    proctor calibrate --keep /tmp/corpus         # keep the simulated episodes
    proctor calibrate --corpus /tmp/corpus       # sweep an earlier corpus again

``proctor calibrate`` (``proctor/calibrate_cli.py``, the composition root)
hands ``run`` the station's corpus simulator: the annotator itself never
imports the station, so ``python -m proctor.annotator.calibrate --corpus DIR``
sweeps only a corpus folder made earlier.

Simulates episodes across every demo policy profile and object (telemetry
only, ``proctor.demo.simulated_episodes``), then sweeps the thresholds one at a time
(coordinate descent, two passes) for the best F1 of placements (ties: the
smaller 95th-percentile and median timestamp errors; on a tie the current
value stays), each candidate value judged with each event kind's lag set
to cancel its median signed timing error, and writes the file
with the figures it reached. The calibration seed is deliberately not the
acceptance test's, so the test measures on episodes calibration never saw.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from proctor.annotator.config import (
    DEFAULT_PATH,
    FORMAT,
    ClassifierThresholds,
    DetectorThresholds,
    Thresholds,
)
from proctor.annotator.evaluation import CorpusEpisode, evaluate, load_corpus
from proctor.annotator.scoring import DetectorScore
from proctor.core.errors import FieldError

CALIBRATION_SEED = 7_700_001
DEFAULT_EPISODES = 240

# the values each threshold is tried at
SWEEP: dict[tuple[str, str], tuple[float, ...]] = {
    ("detector", "release_open"): (0.005, 0.01, 0.02, 0.03, 0.04, 0.06),
    ("detector", "slump_rise"): (0.002, 0.005, 0.01, 0.02, 0.04),
    ("detector", "min_hold_s"): (0.05, 0.1, 0.2, 0.3, 0.5),
    ("detector", "plateau_tol"): (0.001, 0.002, 0.004, 0.008, 0.016),
    ("detector", "settle_s"): (0.2, 0.4, 0.6, 1.0),
    ("classifier", "rim_margin"): (0.0, 0.005, 0.01, 0.02, 0.03),
}


def _objective(score: DetectorScore) -> tuple[float, float, float]:
    r, p = score.recall, score.precision
    f1 = 0.0 if r + p == 0 else 2 * r * p / (r + p)
    # larger is better: F1 first, then small timing errors
    return (round(f1, 6), -round(score.p95_abs_error_s, 4), -round(score.median_abs_error_s, 4))


def _with(th: Thresholds, section: str, name: str, value: Any) -> Thresholds:
    part = getattr(th, section)
    return dataclasses.replace(th, **{section: dataclasses.replace(part, **{name: value})})


def sweep(
    corpus: Sequence[CorpusEpisode], start: Thresholds, passes: int = 2, log: Any = None
) -> Thresholds:
    best = start
    for n in range(passes):
        changed = False
        for (section, name), values in SWEEP.items():
            current = getattr(getattr(best, section), name)
            results = []
            for v in values:
                # each candidate value with its own lags: timing and the features
                # read at the event's time are judged as they would ship
                th = set_lags(corpus, _with(best, section, name, v))
                score, _ = evaluate(corpus, th)
                results.append((_objective(score), v == current, v, th, score))
            # the best objective; on a tie keep the current value
            results.sort(key=lambda r: (r[0], r[1]), reverse=True)
            obj, _, v, th, score = results[0]
            if v != current:
                changed = True
                if log is not None:
                    log(f"pass {n + 1}: {section}.{name} {current} → {v} (F1 {obj[0]:.4f})")
            best = th
        if not changed:
            break
    return best


def set_lags(corpus: Sequence[CorpusEpisode], th: Thresholds) -> Thresholds:
    """Each event kind's lag: minus its median signed timing error (1 ms steps)."""
    from proctor.annotator.pipeline import analyze_signals
    from proctor.annotator.scoring import match_times

    errors: dict[str, list[float]] = {"release": [], "slump": []}
    base = dataclasses.replace(
        th, detector=dataclasses.replace(th.detector, release_lag_s=0.0, slump_lag_s=0.0)
    )
    for ep in corpus:
        classified = [
            c
            for c in analyze_signals(
                ep.signals, items=ep.items, layout=ep.layout(base), thresholds=base
            )
            if c.is_success
        ]
        pairs = match_times(ep.true_s, [c.candidate.t_s for c in classified])
        for i, j in pairs:
            errors[classified[j].candidate.kind].append(classified[j].candidate.t_s - ep.true_s[i])
    lags = {k: (-round(float(np.median(v)), 3) + 0.0 if v else 0.0) for k, v in errors.items()}
    return dataclasses.replace(
        base,
        detector=dataclasses.replace(
            base.detector,
            release_lag_s=lags["release"],
            slump_lag_s=lags["slump"],
        ),
    )


_COMMENTS: dict[str, str] = {
    "target_closed": "gripper target (0 open … 1 closed) above which the fingers are told to close",
    "band_low": "finger position above which the fingers can be stopped on an item",
    "closed_band": "finger position at or above which the fingers closed on nothing",
    "plateau_tol": "a plateau: the fingers moved less than this …",
    "plateau_window_s": "… over this long (s)",
    "min_hold_s": "an item counts as held only after this long (s)",
    "release_open": "the item leaves once the fingers opened this far below the plateau",
    "settle_s": "after a release command the fingers must open within this window (s)",
    "slump_rise": "the fingers rising this far above the plateau without a release: a slip",
    "release_lag_s": "added to a release's crossing time (s): cancels its median timing error",
    "slump_lag_s": "added to a slip's time (s): cancels its median timing error",
    "rim_margin": "a landing this close to the target bin's rim (m) is a coin toss: unknown",
    "item_drop_offset": "the item's height below the tool centre point (m), for the fall",
    "use_landing": "decide the zone by the ballistic landing point (else: under the tool)",
    "bin_centre_x": "bins' centre, m in front of the robot base",
    "bin_offset_y": "bins' centres, m to either side (target on the tote side; +y is left)",
    "bin_half_x": "bins' inner half length along x, m",
    "bin_half_y": "bins' inner half width along y, m",
    "rim_height": "bins' wall height, m",
}


SECTION_NOTES = {
    "cell": "the fallback for recordings whose manifest records no `layout`",
}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    if isinstance(v, int):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_toml(th: Thresholds) -> str:
    lines = [
        "# The annotator's thresholds, calibrated on the simulated cell's ground truth.",
        "# Regenerate with `proctor calibrate`; see proctor/annotator/config.py.",
        f'format = "{FORMAT}"',
        f"version = {_toml_value(th.version)}",
        "",
    ]
    for section, obj in (
        ("detector", th.detector),
        ("classifier", th.classifier),
        ("cell", th.cell),
    ):
        note = SECTION_NOTES.get(section)
        lines.append(f"[{section}]" + (f"  # {note}" if note else ""))
        for f in dataclasses.fields(obj):
            comment = _COMMENTS.get(f.name, "")
            lines.append(
                f"{f.name} = {_toml_value(getattr(obj, f.name))}"
                + (f"  # {comment}" if comment else "")
            )
        lines.append("")
    if th.calibration:
        lines.append("[calibration]  # how these values were reached (informational)")
        for k, v in th.calibration.items():
            lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines)


def _version(th: Thresholds) -> str:
    payload = repr((th.detector, th.classifier, th.cell)).encode()
    return f"cal-{datetime.now(UTC):%Y%m%d}-{hashlib.sha256(payload).hexdigest()[:6]}"


def open_corpus(folder: Path) -> list[CorpusEpisode]:
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db.engine import make_engine, make_session_factory, session_scope

    engine = make_engine(f"sqlite:///{folder / 'corpus.db'}")
    try:
        with session_scope(make_session_factory(engine)) as s:
            return load_corpus(s, store=LocalArtifactStore(folder / "artifacts"))
    finally:
        engine.dispose()


def calibrate(
    corpus: Sequence[CorpusEpisode], log: Any = None
) -> tuple[Thresholds, DetectorScore, DetectorScore]:
    start = Thresholds(detector=DetectorThresholds(), classifier=ClassifierThresholds())
    before, _ = evaluate(corpus, start)
    th = sweep(corpus, start, log=log)
    th = set_lags(corpus, th)
    after, _ = evaluate(corpus, th)
    th = dataclasses.replace(th, version=_version(th))
    th = dataclasses.replace(
        th,
        calibration={
            "episodes": after.episodes,
            "placements": after.true_placements,
            "recall": round(after.recall, 4),
            "precision": round(after.precision, 4),
            "median_abs_error_s": round(after.median_abs_error_s, 4),
            "p95_abs_error_s": round(after.p95_abs_error_s, 4),
            "review_share": round(after.review_share, 4),
            "calibrated_on": datetime.now(UTC).strftime("%Y-%m-%d"),
        },
    )
    return th, before, after


# simulate_corpus(folder, episodes, seed): the station's simulator, handed in
SimulateCorpus = Callable[[Path, int, int], None]
MIN_EPISODES = 24  # one per demo profile × object


def run(
    *,
    episodes: int = DEFAULT_EPISODES,
    seed: int = CALIBRATION_SEED,
    out: Path = DEFAULT_PATH,
    dry_run: bool = False,
    keep: Path | None = None,
    corpus: Path | None = None,
    simulate_corpus: SimulateCorpus | None = None,
) -> None:
    """Simulate (or reuse) a corpus, sweep, print the figures and write the file.
    A bad option raises ``FieldError`` naming it."""
    from rich.console import Console

    say = Console(highlight=False, soft_wrap=True).print
    if episodes < MIN_EPISODES:
        raise FieldError("--episodes", f"at least {MIN_EPISODES} (one per demo profile × object)")
    if corpus is not None:
        if not (corpus / "corpus.db").is_file():
            raise FieldError("--corpus", f"{corpus} holds no corpus.db (make one with --keep)")
        episodes_read = open_corpus(corpus)
    elif simulate_corpus is None:
        raise FieldError(
            "--corpus", "give a corpus folder, or run `proctor calibrate`, which simulates one"
        )
    else:
        with tempfile.TemporaryDirectory(prefix="proctor-calibrate-") as tmp:
            folder = keep or Path(tmp)
            simulate_corpus(folder, episodes, seed)
            episodes_read = open_corpus(folder)
    placements = sum(len(e.true_s) for e in episodes_read)
    say(f"corpus: {len(episodes_read)} episodes, {placements} true placements")
    th, before, after = calibrate(episodes_read, log=say)
    say("defaults:")
    for line in before.lines():
        say("  " + line)
    say(f"calibrated ({th.version}):")
    for line in after.lines():
        say("  " + line)
    text = render_toml(th)
    if dry_run:
        say(text, markup=False)
    else:
        out.write_text(text, encoding="utf-8")
        say(f"wrote {out}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m proctor.annotator.calibrate --corpus DIR``: sweep a corpus
    made earlier (``proctor calibrate --keep DIR``) without the station."""
    parser = argparse.ArgumentParser(
        prog="python -m proctor.annotator.calibrate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_PATH, help="thresholds file to write")
    parser.add_argument("--dry-run", action="store_true", help="print the figures, write nothing")
    parser.add_argument(
        "--corpus", type=Path, required=True, help="a corpus folder made with --keep"
    )
    args = parser.parse_args(argv)
    try:
        run(out=args.out, dry_run=args.dry_run, corpus=args.corpus)
    except FieldError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
