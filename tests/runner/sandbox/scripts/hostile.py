"""What a hostile checkpoint would try, run inside the sandbox by the tests.

    python hostile.py probes CONFIG_JSON   # escape attempts, one JSON line each
    python hostile.py fork                 # forks until refused
    python hostile.py memory MIB           # allocates (and touches) MIB
    python hostile.py cpu                  # spins until stopped
    python hostile.py spam                 # floods stdout, with escape sequences
    python hostile.py disk FOLDER          # writes 200 files of 1 MiB into FOLDER

Each probe writes {"probe": NAME, "result": ...} on stdout; the test decides
what counts as contained.
"""

import json
import os
import socket
import sys
import time
from pathlib import Path


def report(probe: str, result: object) -> None:
    sys.stdout.write(json.dumps({"probe": probe, "result": result}) + "\n")
    sys.stdout.flush()


def attempt(action):  # type: ignore[no-untyped-def]
    try:
        return {"ok": True, "value": action()}
    except Exception as exc:  # the failure is the finding
        return {"ok": False, "error": type(exc).__name__}


def talk(host: str, port: int, payload: bytes) -> str:
    with socket.create_connection((host, port), timeout=2) as conn:
        conn.sendall(payload)
        return conn.recv(64).hex()


def read(path: str) -> str:
    with Path(path).open("rb") as f:
        return f.read(64).hex()


def write(path: str) -> str:
    with Path(path).open("w") as f:
        f.write("pwned")
    return path


def probes(config: dict) -> None:
    ssl_request = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
    report("postgres", attempt(lambda: talk("127.0.0.1", 5432, ssl_request)))
    report("host_web_loopback", attempt(lambda: talk("127.0.0.1", config["web_port"], b"GET /")))
    for address in config["host_addresses"]:
        report(
            f"host_web_{address}", attempt(lambda a=address: talk(a, config["web_port"], b"GET /"))
        )
    report("dns", attempt(lambda: socket.getaddrinfo("example.com", 443)))
    for path in config["read"]:
        report(f"read {path}", attempt(lambda p=path: read(p)))
    for path in config["write"]:
        report(f"write {path}", attempt(lambda p=path: write(p)))
    report("secret_env", os.environ.get("PROCTOR_SECRET_KEY"))
    report("env_names", sorted(os.environ))
    report("uid", os.getuid())
    report("pids_visible", len([p for p in Path("/proc").iterdir() if p.name.isdigit()]))
    report("own_checkpoint", attempt(lambda: read("/checkpoint/hostile.py")))
    report("tmp_writable", attempt(lambda: write("/tmp/mine")))


def fork() -> None:
    children = []
    try:
        for _ in range(10_000):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children.append(pid)
        report("fork", {"refused": False, "children": len(children)})
    except OSError as exc:
        report("fork", {"refused": True, "children": len(children), "error": exc.errno})
    for pid in children:
        os.kill(pid, 9)
    sys.exit(3)


def memory(mib: int) -> None:
    hold = []
    for i in range(mib // 16):
        hold.append(b"\x01" * (16 << 20))
        report("allocated_mib", (i + 1) * 16)
    report("memory", "not stopped")


def cpu() -> None:
    while True:
        pass


def disk(folder: str) -> None:
    chunk = b"\x01" * 2**20
    written = 0
    try:
        for i in range(200):
            with Path(folder, f"junk-{i}").open("wb") as out:
                out.write(chunk)
            written += 1
        report("disk", {"written": written, "error": None})
    except OSError as exc:
        report("disk", {"written": written, "error": type(exc).__name__})


def spam() -> None:
    line = "\x1b[31mred\x1b[0m spam \x07 line" + "x" * 100 + "\n"
    for i in range(200_000):
        sys.stdout.write(f"{i} {line}")
    sys.stdout.write("the end\n")
    sys.stdout.flush()


MODES = {"fork": fork, "cpu": cpu, "spam": spam}

if __name__ == "__main__":
    if sys.argv[1] == "probes":
        probes(json.loads(sys.argv[2]))
    elif sys.argv[1] == "memory":
        memory(int(sys.argv[2]))
    elif sys.argv[1] == "disk":
        disk(sys.argv[2])
    else:
        MODES[sys.argv[1]]()
