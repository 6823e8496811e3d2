"""The sandbox's egress proxy: what it adds to one HTTP request, against the same request sent
directly to the same local server (127.0.0.2), in the same run. Each request opens its own
connection, as `urllib` does: directly a TCP connection; through the proxy the call's path, a
unix socket, a CONNECT, and the proxy's own connection to the server, secret filled in."""

from __future__ import annotations

__all__ = ["rows"]

import http.client
import http.server
import socket
import ssl
import threading
import time
from typing import Any

from turnstile.executors.sandbox import Egress, Secret
from turnstile.executors.sandbox._egress import Proxy
from turnstile.executors.sandbox._tunnel import install

from ._measure import repeat

Row = tuple[str, str, str, str, str]
HOST = "api.example.com"
_plain = socket.create_connection


class _Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _ms_per_request(connect: Any, port: int, n: int, token: str) -> float:
    start = time.perf_counter()
    for _ in range(n):
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.sock = connect()
        conn.request("GET", "/v1/ping", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        assert response.status == 200, response.status
        response.read()
        conn.close()
    return (time.perf_counter() - start) / n * 1000


def rows(sizes: list[int], times: int) -> list[Row]:
    n = 20 if max(sizes) < 1000 else 200
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    route = Egress("127.0.0.2", (port,), tls=False)
    proxy = Proxy({HOST: route}, {"KEY": Secret("sk-bench", HOST)})
    wrap = ssl.SSLContext.wrap_socket  # what a tunnel's first use changes, given back below
    install(proxy.path)  # create_connection now goes through the proxy, as in a call
    tunnel, direct_to = socket.create_connection, ("127.0.0.2", port)
    socket.create_connection = _plain
    placeholder = proxy.placeholders["KEY"]
    try:
        direct = repeat(
            lambda: _ms_per_request(lambda: _plain(direct_to), port, n, "sk-bench"),
            times,
            warm_up=True,
        )
        proxied = repeat(
            lambda: _ms_per_request(lambda: tunnel((HOST, port)), port, n, placeholder),
            times,
            warm_up=True,
        )
    finally:
        ssl.SSLContext.wrap_socket = wrap  # type: ignore[method-assign]
        proxy.close()
        server.shutdown()
        server.server_close()
    added = proxied.median - direct.median
    return [
        ("HTTP request direct to a local server, ms", str(n), str(direct), "baseline", ""),
        ("the same through the egress proxy, ms", str(n), str(proxied),
         f"+{added:.2f} ms (×{proxied.median / direct.median:.1f})", ""),
    ]  # fmt: skip


if __name__ == "__main__":
    for row in rows([10, 100, 1000], 5):
        print(" | ".join(row))
