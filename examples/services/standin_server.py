"""A stand-in service for hpcplace's services examples and tests: a real HTTP server (a reward model's
/get_reward, a judge's /judge, a readiness path) or a TCP echo server (a sandbox), on the port it is given.

    python examples/services/standin_server.py --port PORT [--kind http|tcp] [--warmup S] [--ready-path /health]

--warmup: seconds during which the readiness path answers 503 (a model still loading), then 200.
SIGTERM: it says so on stderr and exits 0 (a graceful stop).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def http_server(port: int, warmup: float, ready_path: str) -> ThreadingHTTPServer:
    start = time.monotonic()
    name = os.environ.get("HPCPLACE_SERVICE_NAME", "service")
    replica = os.environ.get("HPCPLACE_SERVICE_REPLICA", "0")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == ready_path:
                ready = time.monotonic() - start >= warmup
                self._answer(200 if ready else 503, {"ready": ready})
            else:
                self._answer(404, {"error": self.path})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            queries = request.get("query") or []
            # a reward per query: its length, so a caller can check the answer is computed from its input
            self._answer(200, {"rewards": [float(len(q)) for q in queries], "service": name, "replica": replica})

        def log_message(self, format: str, *args: object) -> None:
            print(f"{name}[{replica}] {self.address_string()} {format % args}", file=sys.stderr, flush=True)

    return ThreadingHTTPServer(("", port), Handler)


def tcp_server(port: int) -> socketserver.ThreadingTCPServer:
    class Echo(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                self.wfile.write(b"echo " + line)

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    return socketserver.ThreadingTCPServer(("", port), Echo)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=("http", "tcp"), default="http")
    parser.add_argument("--warmup", type=float, default=0.0)
    parser.add_argument("--ready-path", default="/health")
    args = parser.parse_args()
    server = tcp_server(args.port) if args.kind == "tcp" else http_server(args.port, args.warmup, args.ready_path)
    stopped = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        print(f"standin_server: {signal.Signals(signum).name}: stopping", file=sys.stderr, flush=True)
        stopped.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(
        f"standin_server: {args.kind} on {socket.gethostname()}:{args.port}" + (f" with GPUs {gpus}" if gpus else ""),
        file=sys.stderr,
        flush=True,
    )
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
