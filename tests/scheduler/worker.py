"""A station's work loop in its own process, for the restart test.

    python -m tests.scheduler.worker DATABASE_URL CAMPAIGN_ID STATION_NAME

Uses the campaign work source exactly as the station daemon does. Before
each claim it prints ``ready`` and after it ``claimed CODE``, each time
waiting for a line on stdin, so the test decides precisely where a SIGKILL
lands; then it runs the (instant, recorded-as-success) episode and prints
``done CODE``.
"""

from __future__ import annotations

import secrets
import sys

import sqlalchemy as sa

from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import Episode, ObjectType
from proctor.core.domain import EpisodeState, Outcome
from proctor.scheduler.campaign_work_source import campaign_work_source


def main(url: str, campaign_id: str, station: str) -> None:
    source = campaign_work_source(
        campaign=int(campaign_id), station=station, gateway="ws://gateway.test", database_url=url
    )
    factory = make_session_factory(make_engine(url))
    while True:
        print("ready", flush=True)
        if not sys.stdin.readline():
            return
        work = source.claim()
        if work is None:
            break
        print(f"claimed {work.run_code}", flush=True)
        if not sys.stdin.readline():
            return
        uid = secrets.token_hex(8)
        with session_scope(factory) as s:
            obj = s.scalar(sa.select(ObjectType.id).where(ObjectType.name == work.object_name))
            s.add(
                Episode(
                    uid=uid,
                    station_id=source.station_id,
                    object_type_id=obj,
                    items=work.items,
                    budget_s=work.budget_s,
                    tote_side=work.tote_side,
                    camera_side=work.camera_side,
                    run_code=work.run_code,
                    state=EpisodeState.closed,
                    outcome=Outcome.success,
                    placed=work.items,
                    lost=0,
                    dropped=0,
                )
            )
        source.completed(work, episode_uid=uid, outcome=Outcome.success)
        print(f"done {work.run_code}", flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
