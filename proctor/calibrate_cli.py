"""``proctor calibrate``: re-calibrate the annotator's thresholds on simulated
episodes.

The composition root joins the two sides the layers keep apart: the
simulated corpus (``proctor.demo.simulated_episodes``: the station's runner,
a campaign of its own) and the
annotator's sweep (``proctor.annotator.calibrate``), which never imports the
station.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from proctor.annotator.calibrate import CALIBRATION_SEED, DEFAULT_EPISODES, DEFAULT_PATH, run
from proctor.demo.simulated_episodes import simulate_corpus


def calibrate(
    episodes: Annotated[int, typer.Option(help="Episodes to simulate.")] = DEFAULT_EPISODES,
    seed: Annotated[int, typer.Option(help="The corpus's seed.")] = CALIBRATION_SEED,
    out: Annotated[Path, typer.Option(help="Thresholds file to write.")] = DEFAULT_PATH,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the figures, write nothing.")
    ] = False,
    keep: Annotated[
        Path | None, typer.Option(help="Simulate into this folder and keep it.")
    ] = None,
    corpus: Annotated[
        Path | None, typer.Option(help="Sweep a corpus folder made with --keep again.")
    ] = None,
) -> None:
    """Re-calibrate the annotator's thresholds on simulated episodes (thresholds.toml).

    Simulates episodes across every demo profile and object through the
    station's real runner (telemetry only), sweeps the detector's thresholds
    for the best F1, and writes the file with the figures it reached.
    """
    run(
        episodes=episodes,
        seed=seed,
        out=out,
        dry_run=dry_run,
        keep=keep,
        corpus=corpus,
        simulate_corpus=simulate_corpus,
    )
