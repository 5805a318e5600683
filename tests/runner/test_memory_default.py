"""The sandbox's memory limit by default: a share of the host's memory
split among the servers it runs at once, so that every sandbox at its limit
fits together (the review's host had 23 GiB, and two 16 GiB defaults)."""

from __future__ import annotations

from pathlib import Path

from proctor.core.settings import Settings
from proctor.runner.worker import (
    HOST_MEMORY_SHARE,
    WorkerConfig,
    default_memory_bytes,
    host_memory_bytes,
)

GIB = 2**30


def _limit(tmp_path: Path, **runner: object) -> int:
    settings = Settings(data_dir=tmp_path, env="test", runner=runner)  # type: ignore[call-arg, arg-type]
    return WorkerConfig.from_settings(settings, host="mem").pipeline.limits.memory_bytes


def test_the_default_shares_the_hosts_memory_among_its_servers(tmp_path: Path) -> None:
    total = host_memory_bytes()
    for servers in (1, 2, 4):
        limit = _limit(tmp_path, max_servers=servers)
        # every server at its limit, together, within the share
        assert limit * servers <= total * HOST_MEMORY_SHARE
        assert limit == default_memory_bytes(servers)


def test_the_reviewed_host_gets_two_limits_that_fit() -> None:
    total = 23 * GIB + 600 * 2**20  # the review's 23.5 GiB host, max_servers = 2
    each = default_memory_bytes(2, total)
    assert 2 * each <= total and each == int(total * 0.75) // 2  # 8.8 GiB, not 16


def test_a_set_limit_wins_and_a_tiny_host_still_gets_the_floor(tmp_path: Path) -> None:
    assert _limit(tmp_path, memory_bytes=3 * GIB) == 3 * GIB
    assert default_memory_bytes(64, 1 * GIB) == 64 * 2**20
