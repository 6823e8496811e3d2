"""The pytest plugin, run as a user runs it: a test file, a trace and a snapshot in a temp dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from turnstile.executors.testing import replay
from turnstile.providers.replay import Trace

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TRACE = ROOT / "examples" / "weather_agent" / "fixtures" / "weather.anthropic.json"
PLUGIN = ("-p", "turnstile.executors.testing.pytest_plugin")
QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")  # hypothesis: 0.7 s a run
SECRET = "sk-ant-api03-SECRET-never-written"
MARK = '@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")'

AGENT = '''
from typing import Annotated

import msgspec
from turnstile.core import LoopSpec, tool
from turnstile.executors import sync
from turnstile.executors import aio as trio_executor

WEATHER = {
    "北京": {"温度": 26, "天气": "多云", "湿度": 45},
    "上海": {"温度": 29, "天气": "晴", "湿度": 68},
}


@tool
def get_weather(city: Annotated[str, msgspec.Meta(description="城市名,例如 北京")]) -> dict:
    """查询城市的实时天气"""
    return WEATHER[city]


SPEC = LoopSpec(system="你是一个天气助手。", tools=(get_weather.spec,), max_tokens=1024)


def run(prompt, *, model):
    return sync.run(SPEC, prompt, model=model, tools=[get_weather])


async def arun(prompt, *, model):
    return await trio_executor.run(SPEC, prompt, model=model, tools=[get_weather])
'''

USER_TEST = f"""
import pytest
from turnstile.executors.testing import assert_history_valid

import weather_agent as my_agent


{MARK}
def test_weather_agent(turnstile_client, snapshot):
    run = my_agent.run("北京和上海哪个更暖和?", model=turnstile_client)
    assert run.trajectory() == ["get_weather", "get_weather"]
    assert_history_valid(run)
    assert run == snapshot
"""

# Serves the responses of `source.json` in order, as the live API would; logs every request.
NETWORK_CONFTEST = f"""
import json
import pathlib

import httpx2
import pytest

HERE = pathlib.Path(__file__).parent


@pytest.fixture
def turnstile_network_transport():
    source = json.loads((HERE / "source.json").read_text(encoding="utf-8"))["exchanges"]
    served = []

    def handle(request):
        sent = request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
        assert "{SECRET}" in sent
        with open(HERE / "network.log", "a", encoding="utf-8") as log:
            log.write(request.url.path + "\\n")
        response = source[len(served)]["response"]
        served.append(request)
        headers = {{
            **response["headers"],
            "set-cookie": "session=cookie-SECRET",
            "anthropic-organization-id": "org-SECRET",
        }}
        return httpx2.Response(response["status"], headers=headers, json=response["body"])

    return httpx2.MockTransport(handle)
"""


def _project(pytester: pytest.Pytester, test: str = USER_TEST, *, trace: bool = True) -> None:
    pytester.makepyfile(weather_agent=AGENT, test_weather=test)
    if trace:
        (pytester.path / "fixtures").mkdir(exist_ok=True)
        shutil.copy(EXAMPLE_TRACE, pytester.path / "fixtures" / "weather.anthropic.json")


def _marked(arguments: str) -> str:
    """The user's test with more arguments to its marker."""
    return USER_TEST.replace(MARK, MARK[:-1] + ", " + arguments + ")")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*PLUGIN, *QUIET, *args)


def _run_apart(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In a process of its own, as a user runs it: pytester takes back the modules an in-process
    run imported, so a second run under trio would pair a fresh `trio` with anyio's older one."""
    return pytester.runpytest_subprocess(*PLUGIN, *QUIET, *args)


def _recording_setup(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(NETWORK_CONFTEST)
    shutil.copy(EXAMPLE_TRACE, pytester.path / "source.json")
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)


def _network_log(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "network.log"
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def test_a_user_test_passes_against_its_trace_and_snapshot(pytester: pytest.Pytester) -> None:
    _project(pytester)
    _run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    stored = (pytester.path / "__snapshots__" / "test_weather.ambr").read_text(encoding="utf-8")
    assert '→ get_weather {"city": "上海"}' in stored
    assert "completed after 2 turns · 805 in / 251 out" in stored
    _run(pytester).assert_outcomes(passed=1)


def test_a_changed_request_fails_through_sync_run_with_the_diff(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester, USER_TEST.replace("北京和上海哪个更暖和?", "北京和广州哪个更暖和?"))
    result = _run(pytester, "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*turnstile: the request does not match the trace fixtures/weather.anthropic.json",
            "request 1 (POST /v1/messages) does not match the recorded POST /v1/messages",
            "--- recorded",
            "+++ sent",
            '-          "text": "北京和上海哪个更暖和?",',
            '+          "text": "北京和广州哪个更暖和?",',
            "*pytest --turnstile-record=all test_weather.py::test_weather_agent",
        ]
    )
    assert not (pytester.path / "__snapshots__").exists()


def test_a_trace_mismatch_keeps_the_test_s_snapshot(pytester: pytest.Pytester) -> None:
    """The test fails before its snapshot assertion: the snapshot is not unused, and
    `--snapshot-update` (which deletes unused snapshots) must neither be advised nor delete it."""
    _project(pytester)
    _run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    ambr = pytester.path / "__snapshots__" / "test_weather.ambr"
    stored = ambr.read_text(encoding="utf-8")
    pytester.makepyfile(test_weather=USER_TEST.replace("上海哪个", "广州哪个"))
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    assert "--snapshot-update" not in result.stdout.str()
    assert "unused" not in result.stdout.str()
    _run(pytester, "--snapshot-update").assert_outcomes(failed=1)
    assert ambr.read_text(encoding="utf-8") == stored


def test_an_edited_snapshot_fails(pytester: pytest.Pytester) -> None:
    _project(pytester)
    _run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    ambr = pytester.path / "__snapshots__" / "test_weather.ambr"
    ambr.write_text(ambr.read_text(encoding="utf-8").replace("29°C", "31°C"), encoding="utf-8")
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*31°C*", "*29°C*"])


def test_a_missing_trace_says_how_to_record_it(pytester: pytest.Pytester) -> None:
    _project(pytester, trace=False)
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*turnstile: no trace at fixtures/weather.anthropic.json. Record it from the live API*",
            "*ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN=... pytest --turnstile-record=new "
            "test_weather.py::test_weather_agent",
        ]
    )


def test_recording_new_writes_no_secret_and_the_trace_then_replays(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, trace=False)
    _recording_setup(pytester, monkeypatch)
    result = _run(pytester, "--turnstile-record=new", "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*turnstile*", "recorded 2 exchange(s) to fixtures/weather.anthropic.json"]
    )
    assert _network_log(pytester) == ["/v1/messages", "/v1/messages"]
    written = pytester.path / "fixtures" / "weather.anthropic.json"
    text = written.read_text(encoding="utf-8")
    lowered = text.lower()
    for secret in ("secret", "x-api-key", "authorization", "set-cookie", "organization"):
        assert secret not in lowered
    trace, source = Trace.load(written), Trace.load(EXAMPLE_TRACE)
    assert trace.provider == "anthropic"
    assert trace.hand_written is False
    assert "test_weather.py::test_weather_agent" in trace.description
    assert [e.request.body["messages"] for e in trace.exchanges] == [
        e.request.body["messages"] for e in source.exchanges
    ]
    assert trace.exchanges[0].request.body["model"] == "claude-sonnet-4-6"
    assert [e.response for e in trace.exchanges] == [e.response for e in source.exchanges]
    assert trace.loop is not None
    assert trace.loop["prompt"] == "北京和上海哪个更暖和?"
    assert [t["name"] for t in trace.loop["tools"]] == ["get_weather"]
    assert len(trace.loop["tool_outputs"]) == 2
    replayed = replay(written)  # what `turnstile replay` runs: the recorded loop, offline
    assert replayed.stop_reason == "completed"
    assert replayed.trajectory() == ["get_weather", "get_weather"]
    assert "上海更暖和" in replayed.output

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    _run(pytester).assert_outcomes(passed=1)
    _run(pytester, "--turnstile-record=new").assert_outcomes(passed=1)
    assert len(_network_log(pytester)) == 2


def test_recording_all_records_existing_traces_again_with_the_markers_options(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, _marked("temperature=0.5"))
    _recording_setup(pytester, monkeypatch)
    result = _run(pytester, "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(['+  "temperature": 0.5,'])

    _run(pytester, "--turnstile-record=all", "--snapshot-update").assert_outcomes(passed=1)
    assert len(_network_log(pytester)) == 2
    trace = Trace.load(pytester.path / "fixtures" / "weather.anthropic.json")
    assert trace.hand_written is False
    assert [e.request.body["temperature"] for e in trace.exchanges] == [0.5, 0.5]
    assert trace.exchanges[0].request.body["model"] == "claude-sonnet-4-5"
    _run(pytester).assert_outcomes(passed=1)


def test_recording_without_a_key_fails_clearly(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, trace=False)
    _recording_setup(pytester, monkeypatch)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    result = _run(pytester, "--turnstile-record=new")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*turnstile: recording fixtures/weather.anthropic.json needs an API key: "
            "set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in the environment"
        ]
    )
    assert _network_log(pytester) == []
    assert not (pytester.path / "fixtures" / "weather.anthropic.json").exists()


ASYNC_TESTS = """
import asyncio

import pytest
import trio
from turnstile.core import CallModel, Finish, Loop, ModelReplied, RunTool, ToolReturned
from turnstile.executors import invoke
from turnstile.executors.testing import assert_history_valid

import weather_agent as my_agent

PROMPT = "北京和上海哪个更暖和?"


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_under_trio(turnstile_async_client):
    run = trio.run(lambda: my_agent.arun(PROMPT, model=turnstile_async_client))
    assert run.trajectory() == ["get_weather", "get_weather"]
    assert_history_valid(run)


async def drive(client, prompt):
    loop = Loop(my_agent.SPEC)
    pending = list(loop.start(prompt, now=0.0))
    while pending:
        match pending.pop(0):
            case CallModel(id=key, request=request):
                reply = await client.acomplete(request)
                pending += loop.send(ModelReplied(key, reply, now=0.0))
            case RunTool(id=key, arguments=arguments):
                out = invoke(my_agent.get_weather, arguments)
                pending += loop.send(ToolReturned(key, out.content, out.is_error, now=0.0))
            case Finish(reason=reason):
                return reason.value


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_under_asyncio(turnstile_async_client):
    assert asyncio.run(drive(turnstile_async_client, PROMPT)) == "completed"


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_changed_under_trio(turnstile_async_client):
    trio.run(lambda: my_agent.arun("北京和广州哪个更暖和?", model=turnstile_async_client))
"""


def test_the_async_client_replays_under_trio_and_asyncio(pytester: pytest.Pytester) -> None:
    _project(pytester, ASYNC_TESTS)
    result = _run_apart(pytester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_changed_under_trio _*",
            "turnstile: the request does not match the trace fixtures/weather.anthropic.json",
            "request 1 (POST /v1/messages) does not match the recorded POST /v1/messages",
            "--- recorded",
            "+++ sent",
            '-          "text": "北京和上海哪个更暖和?",',
            '+          "text": "北京和广州哪个更暖和?",',
            "*pytest --turnstile-record=all test_weather.py::test_changed_under_trio",
            "FAILED test_weather.py::test_changed_under_trio*",
        ]
    )


def test_the_async_client_records_under_trio(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, ASYNC_TESTS.split("\n\nasync def drive")[0], trace=False)
    _recording_setup(pytester, monkeypatch)
    _run_apart(pytester, "--turnstile-record=new").assert_outcomes(passed=1)
    assert _network_log(pytester) == ["/v1/messages", "/v1/messages"]
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    _run_apart(pytester).assert_outcomes(passed=1)


UNUSED_AND_SWALLOWED = """
import pytest
from turnstile.core import LoopSpec, ModelRequest
from turnstile.core.messages import UserMessage

import weather_agent as my_agent


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_one_request_of_two(turnstile_client):
    request = ModelRequest(
        my_agent.SPEC.system,
        [UserMessage("北京和上海哪个更暖和?")],
        my_agent.SPEC.tools,
        1024,
        cache=my_agent.SPEC.cache,
    )
    assert turnstile_client.complete(request).stop.value == "tool_use"


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_swallowing_the_failure(turnstile_client):
    try:
        my_agent.run("北京和广州哪个更暖和?", model=turnstile_client)
    except BaseException:
        pass
"""


def test_unused_exchanges_and_a_swallowed_mismatch_fail_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester, UNUSED_AND_SWALLOWED)
    result = _run(pytester)
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_one_request_of_two*",
            "*turnstile: 1 of 2 recorded exchange(s) in fixtures/weather.anthropic.json were "
            "left unused: the test sent 1 request(s); the next recorded one is POST /v1/messages",
            "*ERROR at teardown of test_swallowing_the_failure*",
            "*turnstile: the request does not match the trace fixtures/weather.anthropic.json",
        ]
    )


@pytest.mark.parametrize(
    "name", ["openai-chat/weather.json", "openai-responses/weather.stream.json"]
)
def test_openai_traces_replay_and_a_changed_request_fails(
    pytester: pytest.Pytester, name: str
) -> None:
    recorded = Trace.load(ROOT / "fixtures" / name).loop
    assert recorded is not None
    pytester.makepyfile(
        test_openai=f"""
        import pytest
        from turnstile.executors import sync
        from turnstile.providers.replay import RecordedTools, spec_for


        @pytest.mark.turnstile_trace("trace.json")
        @pytest.mark.parametrize("prompt", [{recorded["prompt"]!r}, "changed"])
        def test_replay(turnstile_client, turnstile_trace, prompt):
            assert turnstile_client.stream is {recorded["stream"]!r}
            tools = RecordedTools(turnstile_trace)
            spec = spec_for(turnstile_trace)
            # the clock of the recording: the cache key is drawn from the first event
            run = sync.run(spec, prompt, model=turnstile_client, tools=tools, clock=lambda: 0.0)
            assert run.stop_reason.value == "completed"
        """
    )
    shutil.copy(ROOT / "fixtures" / name, pytester.path / "trace.json")
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*turnstile: the request does not match the trace trace.json", '+*"changed"*']
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (None, "*the turnstile fixtures need a trace: mark the test with*"),
        (
            'provider="gemini"',
            "*turnstile_trace: unknown provider 'gemini' (one of anthropic, openai-chat, *",
        ),
        (
            '"extra"',
            "*turnstile_trace(path, *, provider=None, model=None, ...): *positional*",
        ),
        (
            'provider="openai-chat"',
            "*the marker says provider='openai-chat' but the trace "
            "fixtures/weather.anthropic.json was recorded from 'anthropic'",
        ),
    ],
)
def test_a_wrong_marker_fails_with_what_to_fix(
    pytester: pytest.Pytester, arguments: str | None, message: str
) -> None:
    _project(pytester, USER_TEST.replace(MARK, "") if arguments is None else _marked(arguments))
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_a_trace_is_found_under_the_rootdir_and_its_model_comes_from_the_marker(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(weather_agent=AGENT)
    (pytester.path / "tests").mkdir()
    test = _marked('model="claude-x"')
    (pytester.path / "tests" / "test_weather.py").write_text(test, encoding="utf-8")
    (pytester.path / "fixtures").mkdir()
    shutil.copy(EXAMPLE_TRACE, pytester.path / "fixtures" / "weather.anthropic.json")
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = _run(pytester, "--snapshot-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(['-  "model": "claude-sonnet-4-5",', '+  "model": "claude-x",'])


def test_a_trace_named_without_its_provider_says_how_to_name_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, USER_TEST.replace("weather.anthropic.json", "weather.json"), trace=False)
    _recording_setup(pytester, monkeypatch)
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "turnstile: no trace at fixtures/weather.json. Record it from the live API with",
            "    pytest --turnstile-record=new test_weather.py::test_weather_agent",
            "and the provider's API key in the environment, once the file is named "
            "`<name>.<provider>.json` or the marker says provider=...*",
        ]
    )
    result = _run(pytester, "--turnstile-record=new")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*cannot tell the provider of fixtures/weather.json: name it `<name>.<provider>.json`*"]
    )
    assert _network_log(pytester) == []


NO_ANTHROPIC = """
import sys


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "anthropic":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NotInstalled())
"""


def test_an_openai_trace_replays_with_only_the_openai_sdk_installed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(NO_ANTHROPIC)
    pytester.makepyfile(
        test_openai="""
        import sys

        import pytest
        from turnstile.executors import sync
        from turnstile.providers.replay import RecordedTools, spec_for


        @pytest.mark.turnstile_trace("trace.json")
        def test_replay(turnstile_client, turnstile_trace):
            tools = RecordedTools(turnstile_trace)
            prompt = turnstile_trace.loop["prompt"]
            run = sync.run(spec_for(turnstile_trace), prompt, model=turnstile_client, tools=tools)
            assert run.stop_reason.value == "completed"
            assert "anthropic" not in sys.modules
        """
    )
    shutil.copy(ROOT / "fixtures" / "openai-chat" / "weather.json", pytester.path / "trace.json")
    pytester.runpytest_subprocess(*PLUGIN, *QUIET).assert_outcomes(passed=1)
