"""`turnstile demo`: the weather conversation, offline; its steps, transcript and final state are
snapshotted."""

from __future__ import annotations

import json
import subprocess
import sys

from turnstile.core import CallModel, Guards, StopReason
from turnstile.core.messages import validate_history
from turnstile.core.request import CachePolicy
from turnstile.executors import cli, invoke, sync
from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather

from tests.steps import run_log, step_line


def test_the_demo_trace_and_final_state(snapshot) -> None:
    steps: list[object] = []
    run = sync.run(
        demo_spec(),
        PROMPT,
        model=demo_model(),
        tools=[get_weather],
        clock=iter(float(i) for i in range(100)).__next__,
        on_step=steps.append,
    )
    assert run.stop_reason is StopReason.completed and run.state.turns == 2
    assert (run.state.usage.input_tokens, run.state.usage.output_tokens) == (805, 251)
    validate_history(run.messages)
    first = steps[0]
    assert type(first) is CallModel and first.request.system == "你是一个天气助手。"
    assert first.request.max_tokens == 1024 and first.request.cache == CachePolicy()
    assert list(first.request.tools) == [get_weather.spec]
    assert first.request.cache_key == "turnstile-b78fe3fee9ae9cf272293417"
    assert run_log([step_line(s) for s in steps], run.state) == snapshot(name="run")
    assert json.loads(run.loop.dump()) == snapshot(name="final_state")


def test_turnstile_demo_prints_each_turn_and_the_stop_reason(capsys) -> None:
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert '→ get_weather {"city": "北京"}' in out and '→ get_weather {"city": "上海"}' in out
    assert "512 in / 121 out" in out and "293 in / 130 out" in out
    assert out.rstrip().endswith("── completed after 2 turns · 805 in / 251 out ──")


def test_the_demo_tool_reports_unknown_cities_to_the_model() -> None:
    out = invoke(get_weather, {"city": "广州"})
    assert out.is_error and "可查询: 北京, 上海" in out.content


def test_guards_are_on_by_default() -> None:
    g = Guards()
    assert g.max_turns and g.deadline_s and g.context_window and g.max_repeated_calls


def test_the_demo_needs_only_the_core_dependencies() -> None:
    """`pip install turnstile && turnstile demo`: no SDK, no httpx2, no trio."""
    blocked = ("anthropic", "openai", "httpx2", "trio", "pydantic", "syrupy", "pytest")
    code = (
        "import sys\n"
        f"sys.modules.update(dict.fromkeys({blocked!r}))\n"
        "from turnstile.executors.cli import main\n"
        "sys.exit(main(['demo']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("── completed after 2 turns · 805 in / 251 out ──")
