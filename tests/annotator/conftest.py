"""The simulated corpus the acceptance tests measure the annotator on, and
the figures they print.

The corpus: ``CORPUS_EPISODES`` episodes over every demo policy profile and
object (telemetry only: ``proctor.demo.simulated_episodes``), each run through the real
episode runner on the simulated cell and closed with the station's labelled
ground-truth log. Simulating costs minutes of CPU, so the finished corpus
(a SQLite file and an artifact folder) is kept in the system's temporary
folder under a key that hashes everything that determines it — the
simulated cell's, runner's, recorder's and policy wire's source code,
the schema and the plan (``_KEY_SOURCES``) — so any change there simulates
afresh; the annotator's own code is not in
the key (it is what is measured, every run). Each test session works on a
copy of the database. ``PROCTOR_ANNOTATOR_CORPUS_CACHE=0`` disables the
cache (the corpus is then simulated into the session's tmp folder).

Every test that uses the corpus, directly or through another fixture, is
marked ``slow`` (on a cold cache, about 80 s of simulation on an idle 2-core
machine, one worker process per CPU: ``simulate_corpus``): the inner loop
``./run test -m "not slow"`` leaves them out.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proctor.demo.simulated_episodes import EpisodeSpec, corpus_plan

ROOT = Path(__file__).resolve().parents[2]
CORPUS_EPISODES = 216  # 9 per (profile, object) cell
CORPUS_SEED = 20_250_707  # not the calibration's seed: measured on unseen episodes
FIGURES = pytest.StashKey[list[str]]()


@dataclass(frozen=True)
class Corpus:
    db_path: Path  # this session's copy
    artifacts: Path
    plan: tuple[EpisodeSpec, ...]

    @property
    def url(self) -> str:
        return f"sqlite:///{self.db_path}"


# What determines a telemetry-only simulated episode: the simulated cell
# (cameras off), the runner, recorder and archive, the policy wire and
# the demo policies, the schema. Hardware drivers, twin/real profiles,
# teleop, the daemon and the conformance checks never run in it.
_KEY_SOURCES = (
    "proctor/station/sim/*.py",
    "proctor/station/profiles/__init__.py",
    "proctor/station/profiles/sim.py",
    "proctor/station/drivers/*/base.py",
    "proctor/core/registry.py",
    "proctor/policywire/client.py",
    "proctor/policywire/wire/*.py",
    "proctor/policywire/serving/demo.py",
    "proctor/policywire/observation.py",
    "proctor/policywire/serving/openpi.py",
    "proctor/station/*.py",
    "proctor/station/control/*.py",
    "proctor/policywire/dialects/*.py",
    "proctor/policywire/handshake.py",
    "proctor/core/clock.py",
    "proctor/core/geometry.py",
    "proctor/core/recording/*.py",
    "proctor/core/migrations/versions/*.py",
    "proctor/core/db/**/*.py",
    "proctor/core/artifacts/*.py",
    "proctor/core/domain.py",
    "proctor/core/work.py",
    "proctor/demo/simulated_episodes.py",
)
_NOT_IN_KEY = {
    "proctor/station/sim/render.py",
    "proctor/station/sim/camera.py",
    "proctor/station/camerahub.py",
    "proctor/station/console_api.py",
    "proctor/station/cli.py",
    "proctor/station/daemon.py",
    "proctor/station/preflight.py",
    "proctor/station/recovery.py",
}


def _key(plan: list[EpisodeSpec]) -> str:
    h = hashlib.sha256()
    sources = sorted(
        {
            p
            for pattern in _KEY_SOURCES
            for p in ROOT.glob(pattern)
            if p.relative_to(ROOT).as_posix() not in _NOT_IN_KEY
        }
    )
    for path in sources:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    h.update(repr(plan).encode())
    return h.hexdigest()[:20]


def _simulate(folder: Path, plan: list[EpisodeSpec]) -> None:
    from proctor.demo.simulated_episodes import simulate_corpus

    # the plan proctor calibrate builds from the same count and seed, in
    # worker processes (one per CPU)
    assert plan == corpus_plan(CORPUS_EPISODES, seed=CORPUS_SEED)
    simulate_corpus(folder, CORPUS_EPISODES, CORPUS_SEED, show=False)


def _cached_corpus(plan: list[EpisodeSpec], tmp: Path) -> Path:
    if os.environ.get("PROCTOR_ANNOTATOR_CORPUS_CACHE", "1") == "0":
        folder = tmp / "corpus"
        folder.mkdir()
        _simulate(folder, plan)
        return folder
    cache = Path(tempfile.gettempdir()) / "proctor-test-cache"
    key = _key(plan)
    final = cache / f"annotator-corpus-{key}"
    if (final / "complete").is_file():
        final.touch()  # in use: not pruned
        return final
    cache.mkdir(parents=True, exist_ok=True)
    # one session simulates, any other waits for it rather than doing it twice
    with (cache / f"annotator-corpus-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "complete").is_file():
            return final
        building = cache / f".building-{uuid.uuid4().hex[:8]}"
        building.mkdir()
        try:
            _simulate(building, plan)
            (building / "complete").write_text("ok\n")
            shutil.rmtree(final, ignore_errors=True)  # a half-built leftover
            building.rename(final)
            _prune(cache, keep=final)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return final


def _prune(cache: Path, keep: Path, older_than_s: float = 3600.0) -> None:
    """Corpora of older code (≈ 100 MB each) go once nobody has used them for an hour."""
    now = time.time()
    for old in cache.glob("annotator-corpus-*"):
        if old == keep or not old.is_dir():
            continue
        if now - old.stat().st_mtime > older_than_s:
            shutil.rmtree(old, ignore_errors=True)
            old.with_name(old.name + ".lock").unlink(missing_ok=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # by the fixture, not by file: a new test on the corpus is slow without
    # anyone remembering to say so (every item passes here, not only ours)
    for item in items:
        if "sim_corpus" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def sim_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    plan = corpus_plan(CORPUS_EPISODES, seed=CORPUS_SEED)
    tmp = tmp_path_factory.mktemp("annotator-corpus")
    source = _cached_corpus(plan, tmp)
    copy = tmp / "session.db"
    # the backup API copies a consistent image, WAL content included
    with sqlite3.connect(source / "corpus.db") as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    from proctor.core.db import migrate

    migrate.upgrade(f"sqlite:///{copy}")  # a corpus cached before a new migration
    yield Corpus(db_path=copy, artifacts=source / "artifacts", plan=tuple(plan))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section("annotator acceptance figures")
        for line in lines:
            terminalreporter.write_line(line)


def report(config: pytest.Config, *lines: str) -> None:
    """Figures for the end of the run (shown under -q too) and for -s now."""
    config.stash.setdefault(FIGURES, []).extend(lines)
    for line in lines:
        print(line)  # pytest -s shows the figures as they are measured
