"""Running an asyncio WebSocket server on this thread or in a background one.

The policy servers the demo and the tests start (``openpi.PolicyServer`` on
the openpi wire, ``positronic.PositronicServer`` on Positronic's)
share this lifecycle: ``start()`` serves in a daemon thread and returns once
the port is bound, ``stop()`` cancels every open connection's handler and
then the server, ``serve_forever()`` serves on the calling thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Self


class BackgroundServer:
    """Subclasses implement ``_serve(started)`` (bind, call ``started()``,
    serve until cancelled), call ``_init_serving()`` when constructed and
    ``_track_handler()`` at the top of each connection's handler."""

    thread_name = "policy-server"

    def _init_serving(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._main: asyncio.Task[None] | None = None

    async def _serve(self, started: Callable[[], None]) -> None:
        raise NotImplementedError

    def _track_handler(self) -> None:
        """Remember the running connection handler, so ``stop`` can cancel it
        (a drilled hang sleeps for an hour)."""
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    def serve_forever(self, started: Callable[[], None] | None = None) -> None:
        """Serve on this thread until interrupted."""
        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(self._serve(started or (lambda: None)))

    def start(self) -> Self:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._main = loop.create_task(self._serve(self._ready.set))
                loop.run_until_complete(self._main)
            except asyncio.CancelledError:
                pass
            except BaseException as exc:
                self._startup_error = exc
                self._ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.thread_name} did not start within 10 s")
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():

            def shutdown() -> None:
                # handlers first, then the serving task; websockets' own closing
                # task must be left to finish
                for task in list(self._handlers):
                    task.cancel()
                if self._main is not None:
                    self._main.cancel()

            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(shutdown)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
