"""Secrets and egress: a call's only network is an HTTP proxy on the host, through a unix socket.

The call's own network namespace stays empty; the proxy's socket is bound into its root, and
the call's environment names it (`TURNSTILE_EGRESS`) and holds a placeholder for each secret.
The proxy reads every request it forwards (the call's side is plain HTTP: see `_tunnel`), so it
can hold each to its rules:

- a request reaches only a host of the routes (`Egress`), on one of its ports, at the address
  the route gives (else resolved here, never by the call);
- CONNECT opens a tunnel to that host only: every request in it must name that host (its
  target and `Host`), never CONNECT again; TLS from the call is refused (the proxy makes the
  TLS itself, and verifies the host, where the route says `tls`);
- a secret's placeholder becomes its value only in requests to the host the secret is bound
  to (target, headers, a Basic authorization's credentials, body); every secret's value in a
  response becomes its placeholder.
"""

from __future__ import annotations

__all__ = ["ENV", "Egress", "Proxy", "Secret"]

import base64
import binascii
import contextlib
import os
import secrets as random
import shutil
import socket
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._http import (
    Refused,
    Request,
    Stream,
    path_of,
    read_request,
    read_response,
    refusal,
    target_of,
)

ENV = "TURNSTILE_EGRESS"
"""The environment variable that holds the proxy's socket path in the call."""
_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Secret:
    """A secret the call sees only as a placeholder, which the egress proxy replaces by `value`
    in requests to `host` (a name of the sandbox's `egress`), and in no other."""

    value: str = field(repr=False)
    host: str


@dataclass(frozen=True)
class Egress:
    """How the proxy reaches a host the call may reach: at `address` (None: the host's own
    resolver, at each connection; the call never resolves a name), on `ports`; with `tls`, the
    proxy speaks TLS to it and verifies its certificate for its name (with `ca_file`, else the
    host's trust store), while the call speaks plain HTTP to the proxy."""

    address: str | None = None
    ports: tuple[int, ...] = (443,)
    tls: bool = True
    ca_file: str | None = None


def _swap(data: bytes, pairs: list[tuple[bytes, bytes]]) -> bytes:
    for old, new in pairs:
        data = data.replace(old, new)
    return data


def _fill_basic(request: Request, fills: list[tuple[bytes, bytes]]) -> None:
    """Fill placeholders in a Basic authorization too, where they are base64'd."""
    for i, (name, value) in enumerate(request.headers):
        if fills and name.lower() == b"authorization" and value[:6].lower() == b"basic ":
            try:
                decoded = base64.b64decode(value[6:], validate=True)
            except binascii.Error:
                continue
            request.headers[i] = (name, b"Basic " + base64.b64encode(_swap(decoded, fills)))


def _lower(host: str) -> str:
    return host.rstrip(".").lower()


class Proxy:
    """The egress proxy of one sandbox: listens on a unix socket (`path`) in a directory only
    this user can enter, one thread per connection; `env` is what each call's environment
    gets (the socket's path and the placeholders). `close` stops it."""

    def __init__(self, routes: Mapping[str, Egress], secrets: Mapping[str, Secret]) -> None:
        self._routes = {_lower(host): route for host, route in routes.items()}
        for name, secret in secrets.items():
            if _lower(secret.host) not in self._routes:
                raise ValueError(f"secret {name!r} is bound to {secret.host!r}, not in egress")
            if not secret.value:
                raise ValueError(f"secret {name!r} is empty")
        for host, route in self._routes.items():
            if not route.ports or not all(0 < p < 65536 for p in route.ports):
                raise ValueError(f"egress to {host!r} needs ports in 1-65535")
        self.placeholders = {name: f"turnstile-secret-{random.token_hex(16)}" for name in secrets}
        self._fill: dict[str, list[tuple[bytes, bytes]]] = {}
        self._hide: list[tuple[bytes, bytes]] = []
        for name, secret in secrets.items():
            pair = (self.placeholders[name].encode(), secret.value.encode())
            self._fill.setdefault(_lower(secret.host), []).append(pair)
            self._hide.append((pair[1], pair[0]))
        self._hide.sort(key=lambda pair: -len(pair[0]))  # a value inside another's goes last
        self._dir = tempfile.mkdtemp(prefix="turnstile-egress-")
        self.path = os.path.join(self._dir, "proxy.sock")
        self.env = {ENV: self.path, **self.placeholders}
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o666)  # for a call's own uid, in its root; the dir keeps others out
        self._listener.listen(64)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._closed = False
        threading.Thread(target=self._serve, name="turnstile-egress", daemon=True).start()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            self._listener.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_TIMEOUT_S)
            stream = Stream(conn)
            try:
                self._converse(conn, stream)
            except Refused as e:
                with contextlib.suppress(OSError):
                    conn.sendall(refusal(e.status, e.reason))
            except OSError:
                pass

    def _allowed(self, host: str, port: int) -> Egress:
        route = self._routes.get(_lower(host))
        if route is None:
            raise Refused(403, f"{host} is not an allowed host")
        if port not in route.ports:
            raise Refused(403, f"port {port} of {host} is not allowed")
        return route

    def _converse(self, conn: socket.socket, stream: Stream) -> None:
        """Serve the connection's requests in turn: a CONNECT fixes the one host all later
        requests must name; without one each request names its own (absolute-form or `Host`)."""
        tunnel: tuple[str, int] | None = None
        while (request := read_request(stream)) is not None:
            if request.method == "CONNECT":
                if tunnel is not None:
                    raise Refused(403, "no tunnel inside a tunnel")
                host, port = target_of(request, None)
                self._allowed(host, port)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                tunnel = (host, port)
                if stream.peek() == 0x16:  # a TLS handshake: nothing the proxy could read
                    raise Refused(403, "TLS from the call is refused: the proxy makes the TLS")
                continue
            host, port = target_of(request, tunnel)
            route = self._allowed(host, port)
            conn.sendall(self._forward(request, host, port, route))
            if request.closes():
                return

    def _forward(self, request: Request, host: str, port: int, route: Egress) -> bytes:
        """Send `request` to the host, its placeholders filled in if their secrets are bound to
        it, and return the response with every secret's value hidden again."""
        fills = self._fill.get(_lower(host), [])
        _fill_basic(request, fills)
        if request.host() is None:
            request.headers.append((b"Host", f"{host}:{port}".encode()))
        with self._upstream(host, port, route) as upstream:
            upstream.sendall(request.encode(path_of(request), lambda data: _swap(data, fills)))
            response = read_response(Stream(upstream), request.method == "HEAD")
        return response.encode(lambda data: _swap(data, self._hide))

    def _upstream(self, host: str, port: int, route: Egress) -> socket.socket:
        try:
            address = route.address
            if address is None:
                address = str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
            sock = socket.create_connection((address, port), timeout=_TIMEOUT_S)
        except OSError as e:
            raise Refused(502, f"{host}:{port} cannot be reached: {e.strerror or e}") from None
        if not route.tls:
            return sock
        context = self._contexts.get(host)
        if context is None:
            context = self._contexts[host] = ssl.create_default_context(cafile=route.ca_file)
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except (ssl.SSLError, OSError) as e:
            sock.close()
            raise Refused(502, f"TLS with {host} failed: {e}") from None
