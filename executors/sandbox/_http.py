"""HTTP/1.1 as the egress proxy reads it: strictly, whole messages, refusing what could be read
two ways (request smuggling: both or repeated lengths, folded or bare-LF lines, a chunked
encoding that is not the only one).

Requests and responses are read whole (bodies up to `MAX_BODY`) and written again with a
`Content-Length` of their own, so that a substitution can change a body's length; hop-by-hop
headers are dropped, and each request goes to its host on a connection of its own
(`Connection: close`).
"""

from __future__ import annotations

__all__ = [
    "MAX_BODY",
    "Refused",
    "Request",
    "Response",
    "Stream",
    "path_of",
    "read_request",
    "read_response",
    "refusal",
    "target_of",
]

import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"content-length",
    b"expect",
}
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_AUTHORITY = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-_]+)(?::([0-9]{1,5}))?$")


class Refused(Exception):
    """A request the proxy does not forward: answered with `status` and `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def refusal(status: int, reason: str) -> bytes:
    """The proxy's own answer (the reason in the status line too: a CONNECT's client reads
    only that), after which it closes the connection."""
    line = reason.replace("\r", " ").replace("\n", " ")
    body = f"turnstile egress: {line}\n".encode()
    head = f"HTTP/1.1 {status} {line}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


class Stream:
    """Buffered reads from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def _more(self) -> bool:
        data = self._sock.recv(65536)
        self._buf += data
        return bool(data)

    def peek(self) -> int | None:
        """The next byte, unread; None at the end."""
        if not self._buf and not self._more():
            return None
        return self._buf[0]

    def head(self) -> bytes | None:
        """Up to and with the blank line; None at the end before any byte."""
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > MAX_HEAD:
                raise Refused(431, "the head is too large")
            if not self._more():
                if self._buf:
                    raise Refused(400, "the connection ended inside a head")
                return None
        return self._take(end + 4)

    def line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > MAX_HEAD or not self._more():
                raise Refused(400, "a bad chunk")
        return self._take(end + 2)[:-2]

    def exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not self._more():
                raise Refused(400, "the connection ended inside a body")
        return self._take(n)

    def rest(self) -> bytes:
        while self._more():
            if len(self._buf) > MAX_BODY:
                raise Refused(502, "the response is too large")
        return self._take(len(self._buf))

    def _take(self, n: int) -> bytes:
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


Headers = list[tuple[bytes, bytes]]


def _headers(lines: list[bytes]) -> Headers:
    found: Headers = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or b"\r" in value or b"\n" in value:
            raise Refused(400, "a malformed header line")
        found.append((name, value.strip(b" \t")))
    return found


def _values(headers: Headers, name: bytes) -> list[bytes]:
    return [value for key, value in headers if key.lower() == name]


def _chunks(stream: Stream) -> bytes:
    body = bytearray()
    while True:
        size = stream.line().split(b";", 1)[0].strip()
        if not re.fullmatch(rb"[0-9A-Fa-f]{1,8}", size):
            raise Refused(400, "a bad chunk size")
        n = int(size, 16)
        if n == 0:
            while stream.line():  # trailers: dropped
                pass
            return bytes(body)
        if len(body) + n > MAX_BODY:
            raise Refused(413, "the body is too large")
        body += stream.exactly(n)
        if stream.exactly(2) != b"\r\n":
            raise Refused(400, "a bad chunk")


def _body(stream: Stream, headers: Headers, *, until_end: bool) -> bytes:
    """The body as its framing says: chunked (only), one Content-Length, else none (or, for a
    response, all until the end)."""
    encodings = _values(headers, b"transfer-encoding")
    lengths = _values(headers, b"content-length")
    if encodings:
        if lengths or [e.lower() for e in encodings] != [b"chunked"]:
            raise Refused(400, "an ambiguous body: only chunked, and no length with it")
        return _chunks(stream)
    if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
        raise Refused(400, "an ambiguous or malformed Content-Length")
    if lengths:
        n = int(lengths[0])
        if n > MAX_BODY:
            raise Refused(413, "the body is too large")
        return stream.exactly(n)
    return stream.rest() if until_end else b""


Swap = Callable[[bytes], bytes]


def _encode(start: bytes, headers: Headers, body: bytes | None, swap: Swap, extra: bytes) -> bytes:
    """The message again: hop-by-hop headers dropped, `swap` applied to each value and to the
    body, which gets its own length (None: keep the head's, for a response that has none)."""
    lines = [start]
    for name, value in headers:
        if name.lower() not in _HOP or (body is None and name.lower() == b"content-length"):
            lines.append(name + b": " + swap(value))
    if body is not None:
        body = swap(body)
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n" + extra + b"\r\n" + (body or b"")


@dataclass
class Request:
    method: str
    target: str
    headers: Headers
    body: bytes

    def host(self) -> str | None:
        found = _values(self.headers, b"host")
        if len(found) > 1:
            raise Refused(400, "more than one Host")
        return found[0].decode("latin-1") if found else None

    def closes(self) -> bool:
        """Whether the call asked for the connection to close after this request."""
        tokens = b",".join(_values(self.headers, b"connection")).lower().split(b",")
        return b"close" in (token.strip() for token in tokens)

    def encode(self, path: str, swap: Swap) -> bytes:
        """As sent to the host: origin-form `path`, on a connection of its own."""
        start = f"{self.method} ".encode() + swap(path.encode("latin-1")) + b" HTTP/1.1"
        body = self.body if self.body or self.method in ("POST", "PUT", "PATCH") else None
        return _encode(start, self.headers, body, swap, b"Connection: close\r\n")


def read_request(stream: Stream) -> Request | None:
    """The next request, or None once the call has hung up."""
    head = stream.head()
    if head is None:
        return None
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if (
        len(parts) != 3
        or not _TOKEN.fullmatch(parts[0])
        or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0")
    ):
        raise Refused(400, "a malformed request line")
    headers = _headers(lines[1:])
    method, target = parts[0].decode(), parts[1].decode("latin-1")
    body = b"" if method == "CONNECT" else _body(stream, headers, until_end=False)
    return Request(method, target, headers, body)


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    match = _AUTHORITY.match(text)
    if match is None or (match[2] is None and default_port is None):
        raise Refused(400, f"a malformed host {text!r}")
    port = int(match[2]) if match[2] is not None else default_port
    assert port is not None
    return match[1].strip("[]").lower().rstrip("."), port


def target_of(request: Request, tunnel: tuple[str, int] | None) -> tuple[str, int]:
    """The host and port `request` is for. In a `tunnel`, its target and `Host` must both name
    the tunnel's host: anything else is a relay."""
    if request.method == "CONNECT":
        return _authority(request.target, None)
    default = tunnel[1] if tunnel is not None else 80
    host = request.host()
    named = None if host is None else _authority(host, default)
    if request.target.startswith("/") or request.target == "*":
        found = tunnel or named
    else:
        url = urlsplit(request.target)
        if url.scheme not in ("http", "https") or not url.netloc or "@" in url.netloc:
            raise Refused(400, "a malformed request target")
        found = _authority(url.netloc, 443 if url.scheme == "https" else 80)
    if found is None:
        raise Refused(400, "a request without Host")
    if named is not None and named[0] != found[0]:
        raise Refused(403, f"relay refused: Host {named[0]} is not {found[0]}")
    if tunnel is not None and found[0] != tunnel[0]:
        raise Refused(403, f"relay refused: {found[0]} in a tunnel to {tunnel[0]}")
    return found


def path_of(request: Request) -> str:
    """The request's target in origin-form."""
    if request.target.startswith("/") or request.target == "*":
        return request.target
    url = urlsplit(request.target)
    return (url.path or "/") + (f"?{url.query}" if url.query else "")


@dataclass
class Response:
    start: bytes
    headers: Headers
    body: bytes | None

    def encode(self, swap: Swap) -> bytes:
        return _encode(self.start, self.headers, self.body, swap, b"")


def read_response(stream: Stream, head_only: bool) -> Response:
    """The host's response (past any 1xx interim ones), whole: its body is what is left of a
    connection the proxy asked to close. `head_only`: the request was a HEAD."""
    while True:
        head = stream.head()
        if head is None:
            raise Refused(502, "the host closed the connection without a response")
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise Refused(502, "a malformed response from the host")
        status = int(parts[1])
        if status >= 200 or status == 101:
            break
    start = b"HTTP/1.1 " + b" ".join(parts[1:])
    headers = _headers(lines[1:])
    if head_only or status in (101, 204, 304) or status < 200:
        return Response(start, headers, None)
    return Response(start, headers, _body(stream, headers, until_end=True))
