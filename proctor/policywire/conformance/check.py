"""The conformance check: does a policy server speak the protocol the
station needs, the way its submitter declared?

It talks to the server over a real WebSocket — first raw (to check the wire
conventions openpi's server keeps: metadata sent first, unasked, as a binary
msgpack-numpy frame; errors as a text frame before closing), then through
the station's own ``PolicyClient`` — and sends observations recorded once
from the simulated cell (``observations.npz``, written by
``proctor/station/tools/record_conformance.py``), built for the server's dialect and image size
by the station's ``build_observation``. It verifies the metadata, the
replies' keys, dtypes and shapes against the action space and the declared
chunk length, the latency percentiles against the station's timeout, the
determinism of repeated inputs (when declared), how a fresh connection and
a RoboArena ``reset`` behave, and that the metadata names no one (it
reaches the station through the gateway, so a name there unblinds). A
Positronic v1 server is held to its own wire: readiness through its
keepalive call where it has one, the status handshake within the load
limit, its ``meta``, replies of waypoints the station can run (the action
space is what its commands say, a control mode run or refused by name),
errors as ``{"error": …}``.

The result is a ``Report`` of findings written as advice to the submitter.
It never contains the endpoint's URL or API key. This module runs in a
worker process or the CLI, never in the web server.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from proctor.policywire import dialects
from proctor.policywire.conformance import dialects as dialect_checks
from proctor.policywire.conformance.exchange import ExchangeChecks
from proctor.policywire.conformance.observations import recorded_observations
from proctor.policywire.conformance.state import (
    CheckOptions,
    Expectations,
    Finding,
    Status,
    jsonable,
    percentiles,
)
from proctor.policywire.conformance.wire import WireChecks
from proctor.policywire.handshake import public_info

REPORT_FORMAT = "proctor.conformance/1"

__all__ = [
    "REPORT_FORMAT",
    "CheckOptions",
    "Expectations",
    "Finding",
    "Report",
    "Status",
    "check_endpoint",
    "format_report",
]


@dataclass(frozen=True)
class Report:
    verdict: Status  # passed or failed
    summary: str
    findings: tuple[Finding, ...]
    dialect: str | None
    server: dict[str, Any] | None
    declared: dict[str, Any]
    latency_ms: dict[str, float] | None
    observations: dict[str, Any]
    checked_at: str
    duration_s: float

    @property
    def passed(self) -> bool:
        return self.verdict == Status.passed

    def to_json(self) -> dict[str, Any]:
        counts = {s.value: sum(1 for f in self.findings if f.status == s) for s in Status}
        return {
            "format": REPORT_FORMAT,
            "verdict": self.verdict.value,
            "summary": self.summary,
            "checked_at": self.checked_at,
            "duration_s": round(self.duration_s, 3),
            "dialect": self.dialect,
            "server": self.server,
            "declared": self.declared,
            "latency_ms": self.latency_ms,
            "observations": self.observations,
            "counts": counts,
            "findings": [
                {**asdict(f), "status": f.status.value, "details": jsonable(f.details)}
                for f in self.findings
            ],
        }


class Check(WireChecks, ExchangeChecks):
    pass


def check_endpoint(
    url: str,
    *,
    expect: Expectations | None = None,
    options: CheckOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run the conformance check against the policy server at ``url``."""
    expect = expect or Expectations()
    options = options or CheckOptions()
    started = time.monotonic()
    checked_at = datetime.now(UTC).isoformat(timespec="seconds")
    # the URL as the dialect dials it; an unusable one is reported by the handshake
    with contextlib.suppress(ValueError):
        url = dialects.get_or_detected(options.dialect).dial_url(url)
    c = Check(url, expect, options, progress)
    if c.handshake():
        c.extra_checks()
        c.progress("sending recorded observations")
        first = c.episode()
        if first is not None:
            c.judge_replies(first)
            c.progress("repeating them on a fresh connection")
            again = c.episode(" (on a second connection)")
            if again is not None:
                c.judge_repeat(first, again, how="on a fresh connection", check="determinism")
                dialect_checks.of(c).check_reset(c, first)
            c.judge_latency()
        c.progress("probing how errors are reported")
        c.error_convention()
    verdict = Status.failed if c.failed() else Status.passed
    failures = [f for f in c.findings if f.status == Status.failed]
    warnings = [f for f in c.findings if f.status == Status.warning]
    if failures:
        first = failures[0].message
        first = first.split(". ")[0].rstrip(".") + "."
        summary = f"Failed: {first}" + (
            f" ({len(failures) - 1} more problem{'s' if len(failures) > 2 else ''} below.)"
            if len(failures) > 1
            else ""
        )
    else:
        summary = "Passed: the station can run your policy" + (
            f" ({len(warnings)} warning{'s' if len(warnings) != 1 else ''} below)."
            if warnings
            else "."
        )
    _, _, source = recorded_observations()
    info = c.info
    return Report(
        verdict=verdict,
        summary=summary,
        findings=tuple(c.findings),
        dialect=info.dialect.value
        if info
        else (options.dialect.value if options.dialect else None),
        server=public_info(info) if info else None,
        declared={
            "action_space": expect.action_space.value if expect.action_space else None,
            "chunk_length": expect.chunk_length,
            "deterministic": expect.deterministic,
        },
        latency_ms=percentiles(c.latencies),
        observations={
            "count": len(recorded_observations()[0][: options.observations or None]),
            "source": source,
            "sim_keys": options.sim_keys,
            "image_size": list(info.image_size) if info and info.image_size else None,
        },
        checked_at=checked_at,
        duration_s=time.monotonic() - started,
    )


def format_report(report: Report) -> Iterable[str]:
    """The report as plain lines (the CLI prints them)."""
    marks = {
        Status.passed: "ok  ",
        Status.failed: "FAIL",
        Status.warning: "warn",
        Status.skipped: "--  ",
    }
    yield report.summary
    for f in report.findings:
        yield f"  [{marks[f.status]}] {f.title}: {f.message}"
        err = f.details.get("server_error")
        if err and f.status != Status.passed:
            for line in str(err).splitlines()[-8:]:
                yield f"         | {line}"
    if report.latency_ms:
        lat = report.latency_ms
        yield (
            f"  latency over {lat['count']} requests: p50 {lat['p50']} ms, p90 {lat['p90']} ms, "
            f"p99 {lat['p99']} ms, max {lat['max']} ms"
        )
