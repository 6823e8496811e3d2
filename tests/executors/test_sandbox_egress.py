"""A sandbox's egress: its calls reach only the listed hosts, through the host's proxy, and see
secrets only as placeholders. Local servers on 127.0.0.2 and 127.0.0.3 stand in for the hosts
(the sandbox's name -> address map); nothing leaves the machine."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from turnstile.executors.sandbox import TIERS, Egress, Sandbox, SandboxLimits, Secret

from .test_sandbox_tiers import needs_tier

SECRET = "sk-live-7c1d0e5f9a2b4c6d8e0f"
TOOLS = "tests.executors.egress_tools"
NAMES = ["fetch", "fetch_with_secret", "fetch_basic", "fetch_httpx", "raw", "environment_of_python"]


class Host(http.server.ThreadingHTTPServer):
    """A stand-in host: records each request (line, headers, body) and echoes its
    `Authorization` and body back."""

    seen: list[tuple[str, dict[str, str], bytes]]


class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server: Any = self.server
        server.seen.append((self.requestline, dict(self.headers), body))
        out = json.dumps({"auth": self.headers.get("Authorization"), "body": body.decode()})
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out.encode())

    def log_message(self, *args: Any) -> None:
        pass


def _serve(address: str, context: ssl.SSLContext | None = None) -> Host:
    server = Host((address, 0), Echo)
    server.seen = []
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[Host, Host]]:
    a, b = _serve("127.0.0.2"), _serve("127.0.0.3")
    yield a, b
    for server in (a, b):
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module", params=list(TIERS))
def box(request: pytest.FixtureRequest, hosts: tuple[Host, Host]) -> Iterator[Sandbox]:
    needs_tier(request.param)
    a, b = hosts
    egress = {
        "api.example.com": Egress("127.0.0.2", (a.server_address[1],), tls=False),
        "other.example.com": Egress("127.0.0.3", (b.server_address[1],), tls=False),
    }
    tools = [f"{TOOLS}:{name}" for name in NAMES]
    secrets = {"API_KEY": Secret(SECRET, "api.example.com")}
    limits = SandboxLimits(wall_s=30)
    with Sandbox(tools, limits, tier=request.param, secrets=secrets, egress=egress) as sandbox:
        yield sandbox


@pytest.fixture(autouse=True)
def _fresh(hosts: tuple[Host, Host]) -> None:
    for server in hosts:
        server.seen.clear()


def _url(host: Host, name: str) -> str:
    return f"http://{name}:{host.server_address[1]}/v1/thing?q=1"


def _run(box: Sandbox, tool: str, **arguments: Any) -> str:
    outcome = box.run(tool, arguments)
    assert isinstance(outcome.content, str)
    assert not outcome.is_error, outcome.content
    return outcome.content


def test_a_secret_reaches_its_own_host_in_headers_and_body_and_never_comes_back(
    box: Sandbox, hosts: tuple[Host, Host]
) -> None:
    a, _ = hosts
    got = _run(box, "fetch_with_secret", url=_url(a, "api.example.com"), name="API_KEY")
    ((line, headers, body),) = a.seen
    assert line == "POST /v1/thing?q=1 HTTP/1.1"
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert body == json.dumps({"key": SECRET}).encode()
    assert got.startswith("200 ") and SECRET not in got  # its echo is the placeholder again
    assert "Bearer turnstile-secret-" in got


def test_a_secret_sent_to_another_host_arrives_as_its_placeholder(
    box: Sandbox, hosts: tuple[Host, Host]
) -> None:
    a, b = hosts
    _run(box, "fetch_with_secret", url=_url(b, "other.example.com"), name="API_KEY")
    ((_, headers, body),) = b.seen
    assert headers["Authorization"].startswith("Bearer turnstile-secret-")
    assert SECRET.encode() not in body and b"turnstile-secret-" in body
    assert SECRET not in str(headers) and not a.seen


def test_a_secret_is_filled_in_a_basic_authorization_and_a_chunked_body(
    box: Sandbox, hosts: tuple[Host, Host]
) -> None:
    a, _ = hosts
    _run(box, "fetch_basic", url=_url(a, "api.example.com"), name="API_KEY")
    pa = a.server_address[1]
    chunked = (
        f"POST /v1 HTTP/1.1\nHost: api.example.com:{pa}\nTransfer-Encoding: chunked\n"
        "Connection: close\n\n"
        "35\nkey=$API_KEY\n0\n\n"  # 0x35: "key=" and the placeholder's 49 characters
    )
    assert " 200 " in _run(box, "raw", message=_tunnel(pa, chunked))
    (_, basic, _), (_, _, body) = a.seen
    assert base64.b64decode(basic["Authorization"].split()[1]) == f"me:{SECRET}".encode()
    assert body == f"key={SECRET}".encode()


def test_httpx_reaches_an_allowed_host_through_the_proxy(
    box: Sandbox, hosts: tuple[Host, Host]
) -> None:
    a, _ = hosts
    assert _run(box, "fetch_httpx", url=_url(a, "api.example.com")).startswith("200 ")
    assert len(a.seen) == 1


def test_connect_to_an_unlisted_host_or_port_is_refused(
    box: Sandbox, hosts: tuple[Host, Host]
) -> None:
    a, b = hosts
    port = a.server_address[1]
    assert "not an allowed host" in _run(box, "fetch", url=f"http://unlisted.example:{port}/")
    assert "not an allowed host" in _run(box, "fetch", url=f"http://127.0.0.2:{port}/")
    assert "403 " in _run(box, "raw", message=f"CONNECT 127.0.0.2:{port} HTTP/1.1\n\n")
    assert "is not allowed" in _run(box, "fetch", url="http://api.example.com:22/")
    assert not a.seen and not b.seen


def _tunnel(port: int, *lines: str) -> str:
    head = f"CONNECT api.example.com:{port} HTTP/1.1\nHost: api.example.com:{port}\n\n"
    return head + "".join(lines)


def test_a_relay_through_the_proxy_is_refused(box: Sandbox, hosts: tuple[Host, Host]) -> None:
    a, b = hosts
    pa, pb = a.server_address[1], b.server_address[1]
    other = f"other.example.com:{pb}"
    relays = {
        "absolute-form to another host in a tunnel": _tunnel(
            pa, f"GET http://{other}/ HTTP/1.1\nHost: {other}\n\n"
        ),
        "Host of another host in a tunnel": _tunnel(pa, f"GET / HTTP/1.1\nHost: {other}\n\n"),
        "a tunnel in a tunnel": _tunnel(pa, f"CONNECT {other} HTTP/1.1\nHost: {other}\n\n"),
        "Host mismatch": f"GET http://api.example.com:{pa}/ HTTP/1.1\nHost: {other}\n\n",
        "TLS in a tunnel": _tunnel(pa, "\x16\x03\x01\x00\x05hello"),
        "a chained proxy's form": f"GET http://{other}@api.example.com:{pa}/ HTTP/1.1\n\n",
    }
    for what, message in relays.items():
        got = _run(box, "raw", message=message)
        assert " 403 " in got or " 400 " in got, (what, got)
    assert not a.seen and not b.seen


def test_ambiguous_request_framing_is_refused(box: Sandbox, hosts: tuple[Host, Host]) -> None:
    a, _ = hosts
    pa = a.server_address[1]
    smuggled = (
        f"POST / HTTP/1.1\nHost: api.example.com:{pa}\nContent-Length: 4\n"
        "Transfer-Encoding: chunked\n\n0\n\nGET /admin HTTP/1.1\n\n"
    )
    assert " 400 " in _run(box, "raw", message=_tunnel(pa, smuggled))
    assert not a.seen


def test_a_secret_never_appears_in_the_call_s_environment_memory_or_files(
    hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    """Under the tiers whose calls may read their own memory (a call with a uid of its own
    may not: the kernel makes its process undumpable)."""
    a, _ = hosts
    egress = {"api.example.com": Egress("127.0.0.2", (a.server_address[1],), tls=False)}
    secrets = {"API_KEY": Secret(SECRET, "api.example.com")}
    dump = tmp_path / "dump"
    dump.mkdir()
    limits = SandboxLimits(wall_s=60, file_bytes=1 << 25, writable_paths=(str(dump),))
    tools = [f"{TOOLS}:fetch_with_secret", f"{TOOLS}:environment_of_python", f"{TOOLS}:dump_memory"]
    for tier in ("unprivileged", "landlock"):
        needs_tier(tier)
        with Sandbox(tools, limits, tier=tier, secrets=secrets, egress=egress) as box:
            seen = _run(box, "environment_of_python")
            assert "API_KEY=turnstile-secret-" in seen and SECRET not in seen
            url = _url(a, "api.example.com")
            assert "200 " in _run(box, "fetch_with_secret", url=url, name="API_KEY")
            assert int(_run(box, "dump_memory", path=str(dump))) > 1 << 20
        files = list(dump.iterdir())
        assert files and not any(SECRET.encode() in f.read_bytes() for f in files)
        for f in files:
            f.unlink()


def test_the_proxy_speaks_tls_to_a_host_whose_route_says_so(tmp_path: Path) -> None:
    """The call asks for https://...; the proxy makes the TLS and verifies the host's
    certificate for its name, and fills in the secret."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    needs_tier("full")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    name = ["-subj", "/CN=secure.example.com", "-addext", "subjectAltName=DNS:secure.example.com"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *name, *files],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = _serve("127.0.0.2", context)
    port = server.server_address[1]
    route = Egress("127.0.0.2", (port,), tls=True, ca_file=str(cert))
    secrets = {"API_KEY": Secret(SECRET, "secure.example.com")}
    try:
        with Sandbox(
            [f"{TOOLS}:fetch_with_secret"],
            SandboxLimits(wall_s=30),
            secrets=secrets,
            egress={"secure.example.com": route},
        ) as box:
            url = f"https://secure.example.com:{port}/"
            assert _run(box, "fetch_with_secret", url=url, name="API_KEY").startswith("200 ")
    finally:
        server.shutdown()
        server.server_close()
    ((_, headers, _),) = server.seen
    assert headers["Authorization"] == f"Bearer {SECRET}"


def test_egress_that_could_not_hold_is_refused_at_construction() -> None:
    route = {"api.example.com": Egress("127.0.0.2", (80,), tls=False)}
    with pytest.raises(ValueError, match="not in egress"):
        Sandbox([], secrets={"K": Secret("v", "elsewhere.example.com")}, egress=route)
    with pytest.raises(ValueError, match="without network"):
        Sandbox([], SandboxLimits(network=True), tier="landlock", egress=route)


def test_a_secret_s_value_is_not_in_its_repr() -> None:
    assert SECRET not in repr(Secret(SECRET, "api.example.com"))


def test_the_proxy_s_socket_goes_with_the_sandbox(hosts: tuple[Host, Host]) -> None:
    needs_tier("landlock")
    route = {"api.example.com": Egress("127.0.0.2", (80,), tls=False)}
    box = Sandbox([], tier="landlock", egress=route)
    path = box._proxy.path if box._proxy else ""
    assert os.path.exists(path)
    box.close()
    assert not os.path.exists(os.path.dirname(path))


@pytest.mark.parametrize("tier", list(TIERS))
def test_a_warm_sandbox_s_calls_made_ahead_reach_the_proxy_too(
    tier: str, hosts: tuple[Host, Host]
) -> None:
    """A call's process confined ahead of its call is shown the proxy's socket as well."""
    needs_tier(tier)
    a, _ = hosts
    egress = {"api.example.com": Egress("127.0.0.2", (a.server_address[1],), tls=False)}
    tools = [f"{TOOLS}:fetch"]
    with Sandbox(tools, SandboxLimits(wall_s=30), tier=tier, warm=1, egress=egress) as box:
        for _ in range(3):  # the first call's tree, then processes confined ahead of their calls
            assert _run(box, "fetch", url=_url(a, "api.example.com")).startswith("200 ")
            time.sleep(0.5)  # time for the next call's process to confine itself ahead
    assert len(a.seen) == 3
