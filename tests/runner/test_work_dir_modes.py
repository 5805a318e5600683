"""A runner host's work folder holds submitters' private checkpoints: the
folder, the downloaded archives and the unpacked checkpoints are the
worker's alone (folders 0700, files 0600; a submitter's executable 0700),
and a folder an earlier version left 0755 is tightened. The sandbox reads the
checkpoint as the same host uid through its user namespace, so it needs no
other bits (tests/runner/sandbox runs real sandboxes on such folders)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from proctor.core.artifacts.local import LocalArtifactStore
from proctor.core.settings import Settings
from proctor.runner.pipeline import ServerPipeline
from proctor.runner.worker import RunnerWorker, WorkerConfig
from tests.runner.system import tar_folder
from tests.web.submissions_support import manifest


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _worker(tmp_path: Path) -> RunnerWorker:
    settings = Settings(data_dir=tmp_path / "data", env="test")  # type: ignore[call-arg]
    store = LocalArtifactStore(tmp_path / "store")
    config = WorkerConfig.from_settings(settings, host="modes-test")
    return RunnerWorker(None, store, config)  # type: ignore[arg-type]


def test_archives_and_checkpoints_are_the_workers_alone(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    work = worker.config.pipeline.work_dir
    work.mkdir(parents=True, mode=0o755)
    work.chmod(0o755)  # as an earlier version left it
    data = tar_folder({"policy.toml": manifest(), "serve.sh": b"#!/bin/sh\n", "w.bin": b"x"})
    sha = worker.store.put_bytes(data).sha256
    old = os.umask(0o022)  # a usual umask: the modes must not depend on it
    try:
        archive = worker.fetch(sha)
        unpacked = ServerPipeline(worker.config.pipeline, worker.envs, lambda text: None).unpack(
            archive, sha
        )
    finally:
        os.umask(old)
    assert _mode(work) == 0o700
    assert _mode(work / "archives") == 0o700 and _mode(archive) == 0o600
    assert _mode(work / "checkpoints") == 0o700 and _mode(unpacked) == 0o700
    files = {p.name: _mode(p) for p in unpacked.iterdir()}
    assert files == {"policy.toml": 0o600, "serve.sh": 0o600, "w.bin": 0o600, ".complete": 0o600}
    everything = [work, *work.rglob("*")]
    assert [p for p in everything if _mode(p) & 0o077] == []


def test_the_worker_tightens_its_folder_when_it_starts(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    work = worker.config.pipeline.work_dir
    (work / "checkpoints" / "old").mkdir(parents=True)
    work.chmod(0o755)
    stop = threading.Event()
    stop.set()  # no tick: only the start
    worker.run(stop)
    assert _mode(work) == 0o700
