"""Tools a sandbox with egress runs in the tests of `_egress`: HTTP clients as a tool would
use them, and a raw socket speaking to the proxy as an attacker would."""

from __future__ import annotations

import base64
import os
import re
import socket
import urllib.error
import urllib.request


def fetch(url: str, header: str = "", body: str = "") -> str:
    """urlopen `url` (POST `body` if any) with an `Authorization: Bearer <header>`; the
    response's status and body, or the error."""
    request = urllib.request.Request(url, data=body.encode() or None)
    if header:
        request.add_header("Authorization", f"Bearer {header}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return f"{response.status} {response.read().decode()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read().decode()}"
    except OSError as e:
        return f"error {e}"


def fetch_with_secret(url: str, name: str) -> str:
    """`fetch` with the environment variable `name` (a secret's placeholder) in the header and
    the body."""
    value = os.environ[name]
    return fetch(url, value, f'{{"key": "{value}"}}')


def fetch_basic(url: str, name: str) -> str:
    """`fetch` with a Basic authorization of user "me" and the environment variable `name`."""
    request = urllib.request.Request(url)
    pair = base64.b64encode(f"me:{os.environ[name]}".encode()).decode()
    request.add_header("Authorization", f"Basic {pair}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return f"{response.status} {response.read().decode()}"


def raw(message: str) -> str:
    """Send `message` (\\n read as CRLF, $API_KEY as that variable) to the proxy's socket;
    what comes back."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(os.environ["TURNSTILE_EGRESS"])
    message = message.replace("$API_KEY", os.environ.get("API_KEY", ""))
    sock.sendall(message.replace("\n", "\r\n").encode())
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got.decode(errors="replace")


def environment() -> str:
    """This process's environment as the kernel keeps it (as it was at exec)."""
    with open("/proc/self/environ", "rb") as f:
        return f.read().decode(errors="replace")


def dump_memory(path: str) -> int:
    """Write every readable mapping of this process's memory to files below `path` (16 MiB
    at most each); how many bytes in all."""
    total = 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for n, line in enumerate(maps):
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" not in line.split()[1] or re.search(r"\[(vvar|vsyscall)", line):
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            for i in range(0, len(data), 1 << 24):
                with open(os.path.join(path, f"{n}-{i}"), "wb") as out:
                    out.write(data[i : i + (1 << 24)])
            total += len(data)
    return total


def fetch_httpx(url: str) -> str:
    """GET `url` with httpx2's sync client: its status and body."""
    import httpx2

    response = httpx2.get(url, timeout=10)
    return f"{response.status_code} {response.text}"


def environment_of_python() -> str:
    """This process's environment as Python sees it (what a tool reads), and as the kernel
    keeps it if it may read that."""
    seen = "\n".join(f"{k}={v}" for k, v in os.environ.items())
    try:
        return seen + "\n" + environment()
    except OSError:
        return seen
