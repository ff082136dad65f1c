"""A tiny HTTP proxy in front of the test server that injects faults on chosen requests:
lost responses (the server did the work, the client never hears back), 503 and 429 answers,
and refused connections ("down"). It records every request it saw."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional
from urllib.parse import urlsplit

Plan = Callable[[str, str, Dict[str, str]], str]  # (method, path, headers) -> "pass" | "drop" | "503" | "429"


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.plan: Plan = lambda m, p, h: "pass"
        self.log: List[Dict[str, object]] = []
        self.lock = threading.Lock()
        self.retry_after = "0"  # sent with injected 503/429 answers
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:  # quiet
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                hdrs = {k: v for k, v in self.headers.items()}
                action = proxy.plan(self.command, self.path, hdrs)
                rec: Dict[str, object] = {"method": self.command, "path": self.path, "action": action,
                                          "key": hdrs.get("Idempotency-Key"), "status": None, "replayed": False}
                with proxy.lock:
                    proxy.log.append(rec)
                if action in ("503", "429"):
                    payload = b'{"title":"injected","status":%s,"detail":"injected by the test proxy"}' % action.encode()
                    self.send_response(int(action))
                    self.send_header("Content-Type", "application/problem+json")
                    self.send_header("Retry-After", proxy.retry_after)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    rec["status"] = int(action)
                    return
                conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=30)
                fwd = {k: v for k, v in hdrs.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=fwd)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                rec["status"] = resp.status
                rec["replayed"] = resp.getheader("Idempotent-Replayed") == "true"
                if action == "drop":
                    self.close_connection = True
                    return  # the server did it; the client hears nothing
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def requests(self, path_part: str, method: Optional[str] = None) -> List[Dict[str, object]]:
        with self.lock:
            return [r for r in self.log if path_part in str(r["path"]) and (method is None or r["method"] == method)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
