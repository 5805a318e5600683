"""A TCP echo server (stdlib only) run inside the sandbox by the tests.

    python echo_server.py PORT

Echoes every byte back; a message starting with b"slow:" is echoed after a
0.6 s pause (the relay's latency budget tests).
"""

import socket
import sys
import threading
import time


def serve(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(1 << 18):
            if data.startswith(b"slow:"):
                time.sleep(0.6)
            conn.sendall(data)


def main() -> None:
    listener = socket.create_server(("127.0.0.1", int(sys.argv[1])))
    sys.stdout.write(f"echo server listening on {sys.argv[1]}\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


main()
