"""Installing only what is used: the codecs need neither SDK nor httpx2, and each part that does
need one names the extra that installs it. Each test runs a fresh interpreter in which some
packages cannot be imported, as if they were not installed."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

BLOCKER = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        outside = ONLY is not None and top not in ONLY and top not in sys.stdlib_module_names
        if top in BLOCKED or outside:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def run(code: str, *, blocked: frozenset[str] = frozenset(), only: set[str] | None = None) -> str:
    """Run `code` where `blocked` (or everything outside the standard library and `only`) is
    not installed; its stdout, after checking it ran to the end."""
    program = "\n".join([f"BLOCKED, ONLY = {blocked!r}, {only!r}", BLOCKER, textwrap.dedent(code)])
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_codecs_need_only_msgspec_and_transitions() -> None:
    out = run(
        f"""
        import json, sys
        from turnstile.core import Loop, LoopSpec, ToolSpec
        from turnstile.providers import WireCache, anthropic_messages, openai_chat, openai_responses
        from turnstile.providers._sse import events_json

        codecs = {{
            "anthropic": anthropic_messages,
            "openai-chat": openai_chat,
            "openai-responses": openai_responses,
        }}
        for provider, codec in codecs.items():
            trace = json.loads(open(f"{FIXTURES}/{{provider}}/weather.json").read())
            loop, first = trace["loop"], trace["exchanges"][0]
            tools = tuple(ToolSpec(**t) for t in loop["tools"])
            spec = LoopSpec(system=loop["system"], tools=tools, max_tokens=loop["max_tokens"])
            request = Loop(spec).start(loop["prompt"], 0.0)[0].request  # as the loop asks
            body = codec.encode(request, model=loop["model"], cache=WireCache())
            assert body == first["request"]["body"], provider
            reply = codec.decode(first["response"]["body"])
            streamed = json.loads(open(f"{FIXTURES}/{{provider}}/weather.stream.json").read())
            accumulator = codec.StreamAccumulator()
            for event in events_json(streamed["exchanges"][0]["response"]["sse"]):
                accumulator.feed(event)
            assert accumulator.result().stop == reply.stop, provider
        outside = {{m.partition(".")[0] for m in sys.modules}} - set(sys.stdlib_module_names)
        print(sorted(m for m in outside if not m.startswith("_")))
        """,
        only={"msgspec", "transitions", "six", "turnstile"},
    )
    assert out.strip() == "['msgspec', 'six', 'transitions', 'turnstile']"


def test_a_client_whose_sdk_came_without_httpx2_says_which_extra_to_install() -> None:
    out = run(
        """
        import trio
        from turnstile.core import ModelRequest
        from turnstile.core.messages import UserMessage
        from turnstile.providers import anthropic_messages, openai_chat
        from turnstile.providers._optional import MissingExtra

        class SDK:
            def with_options(self, **options):
                return self

        class Anthropic(SDK):  # an SDK client built on something else than httpx2
            def post(self, *args, **kwargs):
                raise AssertionError("never sent")

        class AsyncOpenAI(SDK):
            async def post(self, *args, **kwargs):
                raise AssertionError("never sent")

        Anthropic.__module__, AsyncOpenAI.__module__ = "anthropic._client", "openai._client"
        request = ModelRequest(None, [UserMessage("q")], (), 10)
        try:
            anthropic_messages.Client(Anthropic()).complete(request)
        except MissingExtra as err:
            print(err)
        try:
            trio.run(openai_chat.Client(AsyncOpenAI()).acomplete, request)
        except MissingExtra as err:
            print(err)
        """,
        blocked=frozenset({"anthropic", "openai", "httpx2"}),
    )
    assert out.splitlines() == [
        "anthropic_messages.Client needs the httpx2 package: pip install 'turnstile[anthropic]'",
        "openai_chat.Client needs the httpx2 package: pip install 'turnstile[openai]'",
    ]


def test_replaying_a_trace_needs_only_its_providers_sdk() -> None:
    code = """
        import httpx2
        from turnstile.core import TurnstileError
        from turnstile.providers._optional import MissingExtra
        from turnstile.providers._sdk import map_sdk_error
        from turnstile.providers._offline import replay_client
        from turnstile.providers._transport import ReplayMismatch, Trace

        assert issubclass(ReplayMismatch, TurnstileError)
        request = httpx2.Request("POST", "https://api.example.invalid/v1")
        for provider in ("anthropic", "openai-chat", "openai-responses"):
            try:
                sdk, _ = replay_client(Trace(provider=provider, hand_written=True))
            except MissingExtra as err:
                print(err)
            else:
                timeout = type(sdk).__module__.partition(".")[0] + ".APITimeoutError"
                module = __import__(timeout.partition(".")[0])
                error = map_sdk_error(module.APITimeoutError(request=request))
                print(provider, type(sdk).__name__, error.kind, error.retryable)
        """
    assert run(code, blocked=frozenset({"anthropic"})).splitlines() == [
        "a trace of anthropic needs the anthropic package: pip install 'turnstile[anthropic]'",
        "openai-chat OpenAI timeout True",
        "openai-responses OpenAI timeout True",
    ]
    assert run(code, blocked=frozenset({"openai"})).splitlines() == [
        "anthropic Anthropic timeout True",
        "a trace of openai-chat needs the openai package: pip install 'turnstile[openai]'",
        "a trace of openai-responses needs the openai package: pip install 'turnstile[openai]'",
    ]


def test_traces_without_httpx2_say_which_extra_to_install() -> None:
    out = run(
        f"""
        from turnstile.executors import cli
        cli.main(["replay", "{FIXTURES}/anthropic/weather.json"])
        try:
            import turnstile.providers.replay
        except ImportError as err:
            print(type(err).__name__, err)
        """,
        blocked=frozenset({"anthropic", "openai", "httpx2", "trio"}),
    )
    assert out.splitlines() == [
        "MissingExtra recording and replaying traces needs the httpx2 package: "
        "pip install 'turnstile[anthropic]' or 'turnstile[openai]'"
    ]


def test_mcp_tools_and_traces_say_which_extra_to_install() -> None:
    out = run(
        """
        import turnstile.executors
        for module in ("mcp", "otel"):
            try:
                __import__(f"turnstile.executors.{module}")
            except ImportError as e:
                print(type(e).__name__, e)
        """,
        blocked=frozenset({"mcp", "opentelemetry"}),
    )
    assert out.splitlines() == [
        "MissingExtra turnstile.executors.mcp needs the mcp package: pip install 'turnstile[mcp]'",
        "MissingExtra turnstile.executors.otel needs the opentelemetry package: pip install "
        "'turnstile[otel]'",
    ]


CALL_SITES = {
    # where turnstile asks for an optional package: the code that gets there, what is missing,
    # and the message (each site's file: the count below checks that none is left out)
    "executors/aio.py": (
        "import turnstile.executors.aio",
        "anyio",
        "turnstile.executors.aio",
        "aio",
    ),
    "executors/mcp.py": ("import turnstile.executors.mcp", "mcp", "turnstile.executors.mcp", "mcp"),
    "executors/otel.py": (
        "import turnstile.executors.otel",
        "opentelemetry",
        "turnstile.executors.otel",
        "otel",
    ),
    "executors/temporal/__init__.py": (
        "import turnstile.executors.temporal",
        "temporalio",
        "turnstile.executors.temporal",
        "temporal",
    ),
    "executors/testing/_syrupy.py": (
        "from turnstile.executors.testing import TranscriptExtension",
        "syrupy",
        "TranscriptExtension",
        "pytest",
    ),
    "executors/testing/_time.py": (
        """
        from turnstile.executors.testing import run_async

        async def nothing():
            pass

        run_async(nothing)
        """,
        "anyio",
        "run_async",
        "aio",
    ),
    "executors/testing/_pytest_traces.py": (
        """
        import os
        from turnstile.executors.testing._pytest_traces import Cassette
        os.environ["OPENAI_API_KEY"] = "sk-test-not-a-key"
        cassette = object.__new__(Cassette)
        cassette.provider, cassette._shown = "openai-chat", "x.openai.json"
        cassette._live_sdk(True, None)
        """,
        "openai",
        "recording x.openai.json",
        "openai",
    ),
    "providers/_client.py": (
        """
        from turnstile.core import ModelRequest
        from turnstile.providers import anthropic_messages

        class Anthropic:  # an SDK client built on something else than httpx2
            def with_options(self, **options):
                return self

            def post(self, *args, **kwargs):
                raise AssertionError("never sent")

        Anthropic.__module__ = "anthropic._client"
        anthropic_messages.Client(Anthropic()).complete(ModelRequest(None, [], (), 10))
        """,
        "httpx2",
        "anthropic_messages.Client",
        "anthropic",
    ),
    "providers/_transport.py": (
        "import turnstile.providers.replay",
        "httpx2",
        "recording and replaying traces",
        ("anthropic", "openai"),
    ),
    "providers/_offline.py": (
        """
        from turnstile.providers._offline import replay_client
        from turnstile.providers._transport import Trace
        replay_client(Trace(provider="anthropic", hand_written=True))
        """,
        "anthropic",
        "a trace of anthropic",
        "anthropic",
    ),
    "providers/_models.py": (
        """
        import os
        from turnstile.providers import model_client
        os.environ["OPENAI_API_KEY"] = "sk-test-not-a-key"
        model_client("openai-responses:gpt-4.1")
        """,
        "openai",
        "the model openai-responses:gpt-4.1",
        "openai",
    ),
}


@pytest.mark.parametrize("site", sorted(CALL_SITES))
def test_each_optional_import_names_the_extra_that_installs_it(site: str) -> None:
    code, missing, needed_by, extras = CALL_SITES[site]
    extras = (extras,) if isinstance(extras, str) else extras
    attempt = textwrap.indent(textwrap.dedent(code).strip(), "    ")
    program = "from turnstile.providers import MissingExtra\ntry:\n" + attempt
    out = run(
        program + "\nexcept MissingExtra as err:\n    print(err)\n", blocked=frozenset({missing})
    )
    install = " or ".join(f"'turnstile[{extra}]'" for extra in extras)
    assert out == f"{needed_by} needs the {missing} package: pip install {install}\n"


def _calls_asking_for_extras() -> dict[str, int]:
    found: dict[str, int] = {}
    for folder in ("core", "executors", "providers"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("missing_extra", "required")
                    and path.name != "_optional.py"
                ):
                    where = str(path.relative_to(ROOT))
                    found[where] = found.get(where, 0) + 1
    return found


def test_every_place_that_asks_for_an_extra_is_tested() -> None:
    assert set(_calls_asking_for_extras()) == set(CALL_SITES)


DISTRIBUTIONS = {"opentelemetry": "opentelemetry-api", "temporalio": "temporalio"}
"""A module's distribution, where the names differ."""


def _installs(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The distributions an extra installs, its extras' included."""
    found: set[str] = set()
    for requirement in extras[extra]:
        name = re.split(r"[\[<>=;, ]", requirement, maxsplit=1)[0]
        if name == "turnstile":
            inner = requirement.partition("[")[2].partition("]")[0]
            for other in inner.split(","):
                found |= _installs(other.strip(), extras)
        else:
            found.add(name)
    return found


@pytest.mark.parametrize("site", sorted(CALL_SITES))
def test_the_extra_named_is_the_smallest_that_installs_the_package(site: str) -> None:
    _, missing, _, named = CALL_SITES[site]
    named = (named,) if isinstance(named, str) else named
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    distribution = DISTRIBUTIONS.get(missing, missing)
    sizes = {
        extra: len(_installs(extra, extras))
        for extra in extras
        if distribution in _installs(extra, extras)
    }
    assert all(extra in sizes for extra in named)  # each installs it
    assert {sizes[extra] for extra in named} == {min(sizes.values())}  # and none is smaller
