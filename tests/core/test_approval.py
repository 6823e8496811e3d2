"""Approvals are keyed by call id, and a waiting loop survives a trip through another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Loop,
    RunTool,
    StopReason,
    ToolReturned,
    ToolSpec,
)

from tests.core._drive import Driver, call, spec

SPEC = spec("read", ToolSpec("delete", needs_approval=True))


def test_approving_one_call_runs_it_but_the_model_waits_for_the_whole_batch() -> None:
    d = Driver(SPEC)
    d.start()
    commands = d.reply(
        call("d1", "delete", path="a"), call("r", "read"), call("d2", "delete", path="b")
    )
    assert [(type(c), c.id) for c in commands] == [
        (AwaitApproval, "d1"),
        (AwaitApproval, "d2"),
        (RunTool, "r"),
    ]
    assert d.result("r") == []
    assert d.state.phase == "awaiting_approval"
    [run] = d.send(Approved("d2", now=3.0))
    assert (type(run), run.id) == (RunTool, "d2")
    assert d.result("d2", "deleted b") == []  # d1 still waits for a human
    [run] = d.send(Approved("d1", now=3.5))
    assert (type(run), run.id) == (RunTool, "d1")
    [ask] = d.result("d1", "deleted a")
    assert type(ask) is CallModel
    assert [r.call_id for r in ask.request.messages[-1].results] == ["d1", "r", "d2"]


def test_a_waiting_loop_is_dumped_loaded_in_another_process_and_resumed() -> None:
    d = Driver(SPEC)
    d.start()
    d.reply(call("d1", "delete", path="a"))
    data = d.loop.dump()
    script = textwrap.dedent(
        """
        import sys
        from turnstile.core import Approved, Loop, LoopSpec, ToolSpec
        spec = LoopSpec(tools=(ToolSpec("read"), ToolSpec("delete", needs_approval=True)))
        loop = Loop.load(spec, sys.stdin.buffer.read())
        assert [c.id for c in loop.outstanding_commands()] == ["d1"]
        [run] = loop.send(Approved("d1", now=100.0))
        assert run.id == "d1", run
        sys.stdout.buffer.write(loop.dump())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], input=data, capture_output=True, check=True
    ).stdout
    loop = Loop.load(SPEC, out)
    [ask] = loop.send(ToolReturned("d1", "deleted", now=101.0))
    assert type(ask) is CallModel and loop.state.phase == "awaiting_model"


def test_outstanding_commands_after_load_repeat_what_was_sent() -> None:
    d = Driver(SPEC)
    d.start()
    sent = d.reply(call("d1", "delete", path="a"), call("r", "read"))
    loop = Loop.load(SPEC, d.loop.dump())
    assert sorted(c.id for c in loop.outstanding_commands()) == sorted(c.id for c in sent)
    d2 = Driver(SPEC)
    [ask] = d2.start()
    assert Loop.load(SPEC, d2.loop.dump()).outstanding_commands() == [ask]
    d2.reply("bye")
    assert Loop.load(SPEC, d2.loop.dump()).outstanding_commands()[0].reason is StopReason.completed
