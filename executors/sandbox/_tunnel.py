"""In the call's process: ordinary HTTP client code reaches the egress proxy's unix socket.

A call has no IP network at all (no interface, no IP sockets), and no client library takes a
unix socket for a proxy from the environment; so `socket.create_connection` (what `http.client`,
`urllib` and httpx's sync transport connect with) is replaced: it connects to the proxy and
asks it for a tunnel (CONNECT) to the host and port it was given. An `SSLContext` asked to wrap
such a tunnel leaves it as it is: the proxy speaks TLS to the host where its route says so, and
must read each request (it fills in the secrets, refuses relays). Code that makes its own TCP
sockets (urllib3, asyncio) does not come through here: it can speak HTTP to the socket named
in `TURNSTILE_EGRESS`, as to any HTTP proxy.
"""

from __future__ import annotations

__all__ = ["Tunnel", "install"]

import errno
import socket
from typing import Any


class Tunnel(socket.socket):
    """A unix socket to the egress proxy, tunnelled to one host: TCP options do nothing."""

    def setsockopt(self, level: int, *args: Any) -> None:  # type: ignore[override]
        if level != socket.IPPROTO_TCP:
            super().setsockopt(level, *args)


def _open(path: str, address: tuple[Any, ...], timeout: Any) -> Tunnel:
    host, port = str(address[0]), int(address[1])
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock = Tunnel(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
            sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n") and len(head) < 65536:
            byte = sock.recv(1)  # one at a time: what follows the head is the host's
            if not byte:
                break
            head += byte
        status = head.split(b"\r\n", 1)[0].split(b" ", 2)
        if len(status) < 2 or status[1] != b"200":
            why = status[-1].decode(errors="replace") if head else "no answer"
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"egress to {authority}: {why}")
    except BaseException:
        sock.close()
        raise
    return sock


def install(path: str) -> None:
    """Route `socket.create_connection` through the proxy at `path`; and, from the first
    connection on (`ssl` is imported by then if it is used), let TLS wrap no tunnel."""

    def create_connection(
        address: tuple[Any, ...], timeout: Any = None, *_: Any, **__: Any
    ) -> Tunnel:
        _plain_tunnels()
        return _open(path, address, timeout)

    create_connection.__defaults__ = (socket._GLOBAL_DEFAULT_TIMEOUT,)  # type: ignore[attr-defined]
    socket.create_connection = create_connection  # type: ignore[assignment]


def _plain_tunnels() -> None:
    import ssl

    wrap = ssl.SSLContext.wrap_socket
    if getattr(wrap, "tunnels_plain", False):
        return

    def wrap_socket(self: ssl.SSLContext, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        return sock if isinstance(sock, Tunnel) else wrap(self, sock, *args, **kwargs)

    wrap_socket.tunnels_plain = True  # type: ignore[attr-defined]
    ssl.SSLContext.wrap_socket = wrap_socket  # type: ignore[method-assign]
