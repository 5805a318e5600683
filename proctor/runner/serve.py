"""``proctor runner serve PATH --port P``: a checkpoint served exactly as a
runner host serves it — the same unpacking, checks, environment, sandbox and
limits — on ``127.0.0.1:P`` until interrupted. How a submitter tries an
archive before uploading it, and how an operator reproduces a failure.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proctor.runner.envs import EnvStore
from proctor.runner.failures import classify
from proctor.runner.pipeline import Launched, PipelineConfig, PipelineFailed, ServerPipeline
from proctor.runner.sandbox.relay import Relay


@dataclass(frozen=True)
class ServeResult:
    """How a served checkpoint ended: None for an interruption, else the reason."""

    failure: str | None
    fault: str | None
    message: str
    diagnostics: dict[str, object]


def serve_checkpoint(
    path: Path,
    *,
    port: int,
    config: PipelineConfig,
    envs: EnvStore,
    say: Callable[[str], None],
    stop: threading.Event,
    latency_budget_s: float,
    on_ready: Callable[[str], None] = lambda url: None,
) -> ServeResult:
    pipeline = ServerPipeline(config, envs, lambda text: say(f"· {text}"))
    try:
        folder = _folder(pipeline, path)
        # a start that fails (or is interrupted) removes its server folder itself
        launched = pipeline.run(folder, f"serve-{port}-{secrets.token_hex(4)}", stop.is_set)
    except PipelineFailed as exc:
        return ServeResult(exc.failure.value, exc.failure.fault.value, exc.message, exc.diagnostics)
    over: list[float] = []
    try:
        relay = Relay(
            "127.0.0.1",
            port,
            launched.sandbox.wire_socket,
            latency_budget_s=latency_budget_s,
            on_latency_exceeded=over.append,
        )
    except BaseException:  # the port taken: the server ends with its folder
        launched.close()
        raise
    url = f"ws://127.0.0.1:{relay.port}"
    say(f"· serving {launched.manifest.name} on {url} ({launched.dialect}); Ctrl-C stops")
    on_ready(url)
    try:
        return _watch(launched, stop, over)
    finally:
        relay.close()
        launched.close()


def _folder(pipeline: ServerPipeline, path: Path) -> Path:
    if path.is_dir():
        return path
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return pipeline.unpack(path, digest.hexdigest())


def _watch(launched: Launched, stop: threading.Event, over: list[float]) -> ServeResult:
    while not stop.wait(0.25):
        if not launched.sandbox.running() or over:
            diag = launched.sandbox.stop()
            failure, message = classify(diag, was_ready=True, latency_exceeded=bool(over))
            return ServeResult(failure.value, failure.fault.value, message, diag.as_json())
    diag = launched.sandbox.stop()
    return ServeResult(None, None, "interrupted", diag.as_json())
