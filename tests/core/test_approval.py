"""Approvals are keyed by call id, and a waiting loop survives a trip through another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    InvalidObservation,
    Loop,
    RunTool,
    StopReason,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import Text

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


# -- an approval with edited arguments -------------------------------------------------------

EDITED = spec(
    ToolSpec(
        "delete",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "force": {"type": "boolean"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        needs_approval=True,
    )
)


def waiting_for_delete() -> Driver:
    d = Driver(EDITED)
    d.start()
    d.reply(call("d1", "delete", path="/"))
    return d


def test_an_edited_approval_runs_the_call_with_the_edit_and_tells_the_model() -> None:
    d = waiting_for_delete()
    [run] = d.send(Approved("d1", arguments={"path": "/tmp/x"}, now=d.now))
    assert (type(run), run.id, run.arguments) == (RunTool, "d1", {"path": "/tmp/x"})
    [p] = d.state.round
    assert (p.call.arguments, p.original.arguments) == ({"path": "/tmp/x"}, {"path": "/"})
    assert d.state.messages[-1].content[0] is p.original  # the model's call, as it made it
    [ask] = d.result("d1", "deleted /tmp/x")
    made, results = ask.request.messages[-2:]
    assert made.content[0].arguments == {"path": "/"}  # a result answers the call as sent
    [result] = results.results
    assert result.content == (
        '(a person approved this call with its arguments changed to {"path":"/tmp/x"}; this is '
        "the result of the call as changed)\ndeleted /tmp/x"
    )
    assert d.state.events[-2] == Approved("d1", arguments={"path": "/tmp/x"}, now=1.0)


def test_an_edited_approval_survives_a_dump_and_a_replay_before_the_call_runs() -> None:
    d = waiting_for_delete()
    d.send(Approved("d1", arguments={"path": "/tmp/x"}, now=d.now))
    for loop in (Loop.load(EDITED, d.loop.dump()), Loop.replay(EDITED, d.state.events)):
        [run] = loop.outstanding_commands()
        assert (type(run), run.arguments) == (RunTool, {"path": "/tmp/x"})


def test_an_approval_that_sends_back_the_models_arguments_is_no_edit() -> None:
    d = waiting_for_delete()
    d.send(Approved("d1", arguments={"path": "/"}, now=d.now))
    [ask] = d.result("d1", "deleted /")
    assert ask.request.messages[-1].results[0].content == "deleted /"


def test_an_edit_that_does_not_fit_the_tools_schema_is_refused_and_changes_nothing() -> None:
    d = waiting_for_delete()
    before = d.loop.dump()
    for arguments, path, problem in [
        ({"path": 3}, "arguments.path", "expected string, got integer"),
        ({"force": True}, "arguments.path", "a required field is missing"),
        ({"path": "/x", "rm": 1}, "arguments.rm", "an unknown field"),
    ]:
        with pytest.raises(InvalidObservation, match="delete \\(d1\\) do not fit") as e:
            d.loop.send(Approved("d1", arguments=arguments, now=d.now))
        assert (e.value.path, problem in str(e.value)) == (path, True)
        assert d.loop.dump() == before
    with pytest.raises(InvalidObservation, match="arguments"):  # not even an object
        d.loop.send(Approved("d1", arguments=["/x"], now=d.now))  # type: ignore[arg-type]
    assert d.loop.dump() == before
    [run] = d.send(Approved("d1", arguments={"path": "/tmp"}, now=d.now))  # then a good one
    assert run.arguments == {"path": "/tmp"}


def test_an_edited_calls_result_in_parts_tells_the_model_in_a_first_text_part() -> None:
    d = waiting_for_delete()
    d.send(Approved("d1", arguments={"path": "/tmp/x"}, now=d.now))
    [ask] = d.send(ToolReturned("d1", [Text("gone")], now=d.now + 1))
    note, gone = ask.request.messages[-1].results[0].content
    assert "changed to" in note.text and gone == Text("gone")
