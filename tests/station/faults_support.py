"""The work a fault-injection test arms the station with."""

from __future__ import annotations

from proctor.core.domain import Side
from proctor.core.work import Work


def fault_work(url: str) -> Work:
    return Work(
        run_code="R-FAULT1",
        object_name="towels",
        items=2,
        per_item_cap_s=30.0,
        tote_side=Side.left,
        camera_side=Side.left,
        policy_url=url,
        sim_seed=1,
    )
