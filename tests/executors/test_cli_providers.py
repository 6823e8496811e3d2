"""`turnstile run` and `turnstile replay`.

No test touches the network: `run` gets the SDK client of a trace's replay where the SDK's own
constructor would have built one from the environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anthropic
import msgspec
import openai
import pytest
from turnstile.executors.cli import main
from turnstile.providers.replay import Trace, client_for, load_trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def turnstile(*argv: str) -> int:
    return main(list(argv))


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


def serve(monkeypatch: pytest.MonkeyPatch, trace: Trace) -> None:
    """Let the SDK constructor the command calls return a client replaying `trace`."""
    sdk = client_for(trace).sdk
    module, name, key = (
        (anthropic, "Anthropic", "ANTHROPIC_API_KEY")
        if trace.provider == "anthropic"
        else (openai, "OpenAI", "OPENAI_API_KEY")
    )
    monkeypatch.setenv(key, "sk-test-not-a-key")
    monkeypatch.setattr(module, name, lambda: sdk)


@pytest.mark.parametrize(
    ("provider", "variable"),
    [
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("openai-chat", "OPENAI_API_KEY"),
        ("openai-responses", "OPENAI_API_KEY"),
    ],
)
def test_run_without_a_key_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    provider: str,
    variable: str,
) -> None:
    monkeypatch.delenv(variable, raising=False)
    assert turnstile("run", "--provider", provider, "--model", "m", "你好") == 2
    captured = capsys.readouterr()
    assert one_line(captured.err) and captured.out == ""
    assert (
        captured.err
        == f"turnstile: {variable} is not set: export it to use the model {provider}:m\n"
    )


def test_run_prints_the_transcript(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(monkeypatch, load_trace(FIXTURES / "anthropic/unknown_stop.json"))
    code = turnstile(
        "run", "--provider", "anthropic", "--model", "claude-sonnet-4-5",
        "--system", "你是一个天气助手。", "--max-tokens", "1024", "用一句话介绍北京。",
    )  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out == (
        "user: 用一句话介绍北京。\n"
        "── turn 1 · other · 41 in / 23 out ──\n"
        "assistant: 北京是中国的首都,有三千多年的建城史。\n"
        "── completed after 1 turn · 41 in / 23 out ──\n"
    )


def test_run_streams_text_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(monkeypatch, load_trace(FIXTURES / "openai-chat/azure_prompt_filter.stream.json"))
    code = turnstile(
        "run", "--provider", "openai-chat", "--model", "gpt-4o", "--max-tokens", "1024",
        "--stream", "用一句话介绍上海。",
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0
    [answer] = [line for line in captured.out.splitlines() if line.startswith("assistant: ")]
    assert captured.err == answer.removeprefix("assistant: ") + "\n"


def test_run_exits_1_when_the_model_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {
        "model": "gpt-5.1",
        "input": [{"type": "message", "role": "user", "content": "你好"}],
        "max_output_tokens": 4096,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "turnstile-cli",
    }
    # a live run's key is drawn from its first event, stamped by the real clock
    monkeypatch.setattr("turnstile.core._ask.cache_key", lambda events: "turnstile-cli")
    error = {
        "message": "Incorrect API key provided: sk-test",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    loop = {"model": "gpt-5.1", "prompt": "你好"}
    exchange = {
        "request": {"method": "POST", "path": "/v1/responses", "body": body},
        "response": {"status": 401, "body": {"error": error}},
    }
    trace = msgspec.convert(
        {
            "provider": "openai-responses",
            "hand_written": True,
            "loop": loop,
            "exchanges": [exchange],
        },
        Trace,
    )
    serve(monkeypatch, trace)
    assert turnstile("run", "--provider", "openai-responses", "你好") == 1
    out, err = capsys.readouterr()
    assert "! model-1 to gpt-5.1 failed (final): invalid_api_key: Incorrect API key" in out
    assert err == (
        "turnstile: the run failed (model_error, model gpt-5.1): invalid_api_key: Incorrect API "
        "key provided: sk-test (HTTP 401)\n"
    )
    assert out.rstrip().endswith("── model_error after 0 turns · 0 in / 0 out ──")


def test_replay_prints_the_transcript(capsys: pytest.CaptureFixture[str]) -> None:
    assert turnstile("replay", str(FIXTURES / "openai-responses/weather.stream.json")) == 0
    out = capsys.readouterr().out
    assert '  → get_weather {"city": "北京"}' in out and "  ← get_weather: " in out
    assert out.rstrip().endswith("── completed after 2 turns · 805 in / 251 out ──")


def _write(tmp_path: Path, content: str | None) -> Path:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read {path}: No such file or directory"),
        ('{"format": "turnstile-trace/1", "provider": ', "not a replayable trace: {path}: "),
        (
            '{"provider": "gemini", "hand_written": true, "exchanges": []}',
            "not a replayable trace: {path}: Invalid enum value 'gemini'",
        ),
        (
            '{"provider": "anthropic", "hand_written": true, "exchanges": []}',
            "not a replayable trace: the trace has no `loop` section",
        ),
    ],
)
def test_replay_of_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = _write(tmp_path, content)
    assert turnstile("replay", str(path)) == 2
    err = capsys.readouterr().err
    assert one_line(err) and err.startswith("turnstile: " + message.format(path=path))


def test_replay_of_a_trace_the_loop_no_longer_follows_prints_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = json.loads((FIXTURES / "anthropic/cache_off.json").read_text(encoding="utf-8"))
    trace["loop"]["system"] = "你是一个诗人。"
    path = _write(tmp_path, json.dumps(trace, ensure_ascii=False))
    assert turnstile("replay", str(path)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{path}: the replay left the recording: request 1 ")
    assert '-  "system": "你是一个天气助手。",\n+  "system": "你是一个诗人。",' in captured.err


def test_run_without_the_sdk_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai -> ModuleNotFoundError
    assert turnstile("run", "--provider", "openai-chat", "你好") == 2
    assert capsys.readouterr().err == (
        "turnstile: the model openai-chat needs the openai package: "
        "pip install 'turnstile[openai]'\n"
    )
