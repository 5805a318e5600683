"""The sandbox's door: runs INSIDE the sandbox with the environment's Python
(stdlib only; it never imports proctor).

    python bridge.py --socket-fd 3 --report-fd 4 --port 8000 -- SERVER ARGV...

Starts the server as its child, accepts on the listening Unix socket the
host made and handed in as ``--socket-fd`` (the only way out of the
sandbox; its file lives in a host folder the sandbox cannot see or write)
and joins each connection to 127.0.0.1:PORT inside the sandbox's own
network namespace, retrying while the server is not up yet. Forwards
SIGTERM and SIGINT to the server and exits with its exit code (128+signal
when a signal ended it), after reporting how it ended.

Tripwires: it also listens on well-known loopback ports (databases, web,
the station API) and reports every connection to one ("connect
127.0.0.1:5432 at 2026-01-01T00:00:00Z"), then closes it: nothing real
listens there inside, and the admin sees what the code tried to reach.

Reports are JSON lines on ``--report-fd``, a pipe the host reads with a
cap: ``{"attempt": LINE}`` and, last, ``{"exit": {...}}``. Nothing the
sandbox writes lands on the host's disk but its capped output log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable

# a connection's handler, as asyncio.start_server calls it
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

# postgres, mysql, redis, web, web, the station API
DEFAULT_TRIPWIRES = "5432,3306,6379,8000,8080,8100"
CHUNK = 1 << 18
# the host keeps only so many: a connect loop must not flood the report
MAX_ATTEMPT_LINES = 1000
# a connection that arrives while the server loads waits for it, trying
# again at growing intervals: a readiness probe every few seconds over a
# ten-minute model load must not cost the server's CPU
CONNECT_RETRY_S = (0.05, 0.5)


class Bridge:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.child: asyncio.subprocess.Process | None = None
        self.attempt_lines = 0
        self.tripwires: list[asyncio.AbstractServer] = []
        # the event loop holds tasks only weakly: a connection whose reading
        # is paused (flow control, a large frame) is referenced by nothing
        # else, and would be collected mid-transfer, its sockets closed
        self.open: set[asyncio.Task[None]] = set()

    async def run(self) -> int:
        # a full pipe drops a report rather than stalling every connection
        os.set_blocking(self.args.report_fd, False)
        await self._tripwires()
        listener = socket.socket(fileno=self.args.socket_fd)
        server = await asyncio.start_unix_server(self._on_wire, sock=listener)
        self.child = await asyncio.create_subprocess_exec(*self.args.argv)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._forward, sig)
        returncode = await self.child.wait()
        server.close()
        code = 128 - returncode if returncode < 0 else returncode
        self._write_exit(returncode)
        return code

    def _forward(self, sig: int) -> None:
        # os.kill, not send_signal: that polls first, and a server that the
        # same signal (sent to the whole sandbox) already ended would be
        # reaped there, leaving asyncio's child watcher to report 255
        if self.child is not None and self.child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child.pid, sig)

    def _write_exit(self, returncode: int) -> None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        record = {
            "exit_code": returncode if returncode >= 0 else None,
            "signal": -returncode if returncode < 0 else None,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        }
        self._report({"exit": record})

    def _report(self, item: dict[str, object]) -> None:
        # a host that stopped reading (it stops the sandbox) must not stop the bridge
        with contextlib.suppress(OSError):
            os.write(self.args.report_fd, (json.dumps(item) + "\n").encode())

    async def _tripwires(self) -> None:
        for text in self.args.tripwires.split(","):
            port = int(text) if text.strip() else 0
            if not port or port == self.args.port:
                continue
            # a port the server itself needs later would fail it; the wire
            # port is left out above, and a taken port is skipped
            with contextlib.suppress(OSError):
                self.tripwires.append(
                    await asyncio.start_server(self._tripped(port), "127.0.0.1", port)
                )

    def _tripped(self, port: int) -> Handler:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()
            if self.attempt_lines >= MAX_ATTEMPT_LINES:
                return
            self.attempt_lines += 1
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self._report({"attempt": f"connect 127.0.0.1:{port} at {stamp}"})

        return on_connect

    async def _connect_server(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        deadline = time.monotonic() + self.args.connect_timeout
        pause, longest = CONNECT_RETRY_S
        while time.monotonic() < deadline:
            if self.child is not None and self.child.returncode is not None:
                return None
            try:
                return await asyncio.open_connection("127.0.0.1", self.args.port)
            except OSError:
                await asyncio.sleep(pause)
                pause = min(2 * pause, longest)
        return None

    async def _on_wire(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        held = {task} if task is not None else set()
        self.open |= held
        try:
            await self._join(reader, writer)
        finally:
            self.open -= held

    async def _join(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect_server()
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


def parse(argv: list[str]) -> argparse.Namespace:
    if "--" not in argv:
        raise SystemExit("bridge: the server's argv follows '--'")
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="bridge")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tripwires", default=DEFAULT_TRIPWIRES)
    parser.add_argument("--connect-timeout", type=float, default=60.0)
    args = parser.parse_args(argv[:cut])
    args.argv = argv[cut + 1 :]
    if not args.argv:
        raise SystemExit("bridge: no server argv after '--'")
    return args


def main() -> None:
    sys.exit(asyncio.run(Bridge(parse(sys.argv[1:])).run()))


if __name__ == "__main__":
    main()
