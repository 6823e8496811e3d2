"""core/ does no I/O: a loop runs with sockets, clocks, files, threads and randomness disabled;
it neither logs nor calls a tool's function."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import turnstile.core


def test_a_loop_runs_with_io_clock_threads_and_randomness_patched_to_raise() -> None:
    script = textwrap.dedent(
        """
        import builtins, os, random, socket, threading, time
        import msgspec, transitions  # dependencies may touch the clock when imported (logging)

        def forbidden(*args, **kwargs):
            raise AssertionError("core did I/O, read a clock, slept or drew randomness")

        # patched before turnstile.core is imported: its import-time side effects are caught too
        socket.socket = forbidden
        socket.create_connection = forbidden
        time.time = time.monotonic = time.perf_counter = time.sleep = forbidden
        builtins.open = forbidden
        threading.Thread.start = forbidden
        random.random = random.randint = forbidden
        os.urandom = forbidden

        from turnstile.core import Loop, LoopSpec, ModelReplied, ToolReturned, ToolSpec
        from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage

        spec = LoopSpec(tools=(ToolSpec("get_weather"),))
        loop = Loop(spec)
        [ask] = loop.start("北京和上海哪个更暖和?", now=0.0)
        reply = ModelResponse([ToolCall("a", "get_weather", {"city": "北京"}),
                               ToolCall("b", "get_weather", {"city": "上海"})],
                              ModelStop.tool_use, Usage(512, 121))
        loop.send(ModelReplied(ask.id, reply, now=1.0))
        loop.send(ToolReturned("b", "29", now=2.0))
        [ask] = loop.send(ToolReturned("a", "26", now=2.5))
        [done] = loop.send(ModelReplied(ask.id, ModelResponse([Text("上海")], ModelStop.end_turn,
                                                               Usage(293, 130)), now=3.0))
        again = Loop.load(spec, loop.dump())
        assert Loop.replay(spec, again.state.events).state == loop.state
        print(done.reason)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "completed"


def _core_sources() -> dict[str, ast.Module]:
    root = Path(turnstile.core.__file__).parent
    return {str(p.relative_to(root)): ast.parse(p.read_text()) for p in root.rglob("*.py")}


def test_the_core_never_imports_logging() -> None:
    for name, module in _core_sources().items():
        for node in ast.walk(module):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                imported = [node.module or ""]
            else:
                continue
            assert not [m for m in imported if m.partition(".")[0] == "logging"], name


def test_the_core_never_calls_a_tools_function() -> None:
    """Executors run a tool (`turnstile.executors.invoke`); the core only checks its arguments.
    `Tool.__call__` (and a guardrail's) is the user calling their own function by its decorated
    name."""
    callers = []
    for name, module in _core_sources().items():
        for owner in ast.walk(module):
            if not isinstance(owner, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(owner):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "fn"
                ):
                    callers.append(f"{name}:{owner.name}")
    assert sorted(callers) == ["_guardrails.py:__call__", "_tools.py:__call__"]
    assert not [n for n in dir(turnstile.core.Tool) if "invoke" in n]
