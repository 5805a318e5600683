"""The uplink's outbox: what the server confirmed survives a restart (and a
kill -9), revisions grow only when the content changes, abandon reports and
claim counters are kept; and the snapshot of a ledger episode."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from proctor.core.db import session_scope
from proctor.station import episodes
from proctor.station.uplink import snapshot
from proctor.station.uplink.outbox import Outbox
from tests.station.uplink.uplink_support import Ledger, close_episode, write_episode


def test_the_outbox_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "uplink.db"
    box = Outbox(path)
    assert box.stamp("u1", "d1").rev == 1
    assert box.stamp("u1", "d1").rev == 1  # unchanged content, same revision
    assert box.stamp("u1", "d2").rev == 2
    box.confirm("u1", 1)
    box.begin_upload("u1", "a" * 64, "up-9")
    box.register("u1", "b" * 64)
    key = box.queue_abandon("R-1", "pre-flight failed")
    box.advance("claim:c", 0)
    box.close()

    again = Outbox(path)
    mark = again.episode("u1")
    assert mark is not None and (mark.rev, mark.confirmed_rev, mark.digest) == (2, 1, "d2")
    assert again.unconfirmed() == 1
    assert again.upload_id("u1", "a" * 64) == "up-9"
    assert again.registered("u1") == {"b" * 64}
    assert [(p.key, p.run_code) for p in again.pending_abandons()] == [(key, "R-1")]
    assert again.counter("claim:c") == 1
    again.advance("claim:c", 0)  # a second advance past the same value does not move it
    assert again.counter("claim:c") == 1
    again.confirm("u1", 1)  # never moves back
    again.confirm("u1", 2)
    again.confirm("u1", 1)
    assert again.episode("u1").confirmed_rev == 2  # type: ignore[union-attr]
    again.close()


def test_each_change_is_committed_before_a_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "uplink.db"
    script = (
        "import os, signal, sys\n"
        "from proctor.station.uplink.outbox import Outbox\n"
        f"box = Outbox({str(path)!r})\n"
        "box.stamp('u1', 'd1'); box.confirm('u1', 1); box.stamp('u1', 'd2')\n"
        "box.queue_abandon('R-2', 'no policy'); box.advance('claim:c', 4)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=Path.cwd(), timeout=60)
    assert proc.returncode == -signal.SIGKILL
    box = Outbox(path)
    mark = box.episode("u1")
    assert mark is not None and (mark.rev, mark.confirmed_rev) == (2, 1)
    assert [p.run_code for p in box.pending_abandons()] == ["R-2"]
    assert box.counter("claim:c") == 5
    box.close()


def test_a_snapshot_numbers_events_in_ledger_order_and_its_digest_follows_changes(
    tmp_path: Path,
) -> None:
    ledger = Ledger.open(tmp_path)
    box = Outbox(tmp_path / "uplink.db")
    uid = write_episode(ledger, "R-SNAP", close=False)

    def fields() -> dict:
        with session_scope(ledger.sessions) as s:
            return snapshot.content(s, episodes.get_episode(s, uid))

    first = fields()
    kinds = [e.kind for e in first["events"]]
    assert kinds == ["armed", "started", "finished"]
    assert [e.seq for e in first["events"]] == [0, 1, 2]
    assert first["state"] == "awaiting_log" and first["run_code"] == "R-SNAP"
    assert first["object"] == "towels"
    rev1 = box.stamp(uid, snapshot.digest(first)).rev
    assert box.stamp(uid, snapshot.digest(fields())).rev == rev1  # nothing changed

    close_episode(ledger, uid, operator_label="cell-a:alice")  # as at the console
    closed = fields()
    assert box.stamp(uid, snapshot.digest(closed)).rev == rev1 + 1
    assert closed["state"] == "closed" and closed["placed"] == 2
    assert closed["operator_notes"] == "both towels in"
    # who logged it rides in the log event and reaches the wire as a label, never an id
    assert closed["operator_label"] == "cell-a:alice" and "operator_id" not in closed
    assert [e.seq for e in closed["events"]] == [0, 1, 2, 3]
    wire = snapshot.snapshot(closed, rev=2, clock_offset_s=0.25)
    assert wire.events[-1].kind == "operator_log" and wire.clock_offset_s == 0.25

    # an artifact the server registered changes the digest too (the final snapshot)
    assert snapshot.digest(closed, ["c" * 64]) != snapshot.digest(closed)
    box.close()
