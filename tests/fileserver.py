"""A local HTTP file server for the dataset tests: 127.0.0.1 only, threaded, with Range requests,
and per-path faults (server errors, connections cut mid-body, slow transfers, silences before the
answer or mid-body)."""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Fault:
    status: int | None = None  # answer this HTTP status instead of the file
    cut_after: int | None = None  # close the connection after this many body bytes
    times: int = 1 << 30  # how many requests the fault applies to
    bytes_per_second: float | None = None  # throttle the body
    silent_seconds: float = 0.0  # accept the connection, then say nothing this long before answering
    stall_after: int | None = None  # send this many body bytes, then go silent for stall_seconds
    stall_seconds: float = 0.0


@dataclass
class FileServer:
    files: dict[str, bytes] = field(default_factory=dict)
    faults: dict[str, Fault] = field(default_factory=dict)
    log: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)

    def start(self) -> str:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.log.append((self.path, self.headers.get("Range")))
                fault = server.faults.get(self.path)
                if fault is not None and fault.times > 0:
                    fault.times -= 1
                else:
                    fault = Fault()
                time.sleep(fault.silent_seconds)
                if fault.status is not None:
                    self.send_error(fault.status)
                    return
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if match:
                    start = int(match.group(1))
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if fault.cut_after is not None:
                    body = body[: fault.cut_after]
                if fault.stall_after is not None:
                    self.wfile.write(body[: fault.stall_after])
                    self.wfile.flush()
                    time.sleep(fault.stall_seconds)
                    body = b""
                step = 1 << 16
                for offset in range(0, len(body), step):
                    self.wfile.write(body[offset : offset + step])
                    if fault.bytes_per_second:
                        time.sleep(step / fault.bytes_per_second)
                self.wfile.flush()
                self.close_connection = True

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietServer(ThreadingHTTPServer):
    """A server that says nothing when a client goes away mid-response (what the fault tests'
    clients do): socketserver would print the traceback to the stderr of whichever test runs then."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
