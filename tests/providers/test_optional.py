"""Installing only what is used: the codecs need neither SDK nor httpx2, and each part that does
need one names the extra that installs it. Each test runs a fresh interpreter in which some
packages cannot be imported, as if they were not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

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
        from turnstile.providers._transport import ReplayMismatch, Trace, replay_client

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
        "pip install 'turnstile[all]'"
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
