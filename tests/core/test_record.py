"""Recording an observation: it is matched against what the state waits for before anything is
written, so one that answers nothing leaves the state byte for byte as it was."""

from __future__ import annotations

import pytest
from turnstile.core import (
    Approved,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    ProtocolError,
    ToolReturned,
    ToolSpec,
    ToolStarted,
)
from turnstile.core.messages import ToolCall

from tests.core._drive import reply


def _waiting_on_a_call() -> Loop:
    loop = Loop(LoopSpec(tools=(ToolSpec("a"),)))
    [ask] = loop.start("go", 0.0)
    loop.send(ModelReplied(ask.id, reply(ToolCall("c1", "a", {})), now=1.0))
    return loop


@pytest.mark.parametrize(
    "obs",
    [
        ToolReturned("nope", "ok", now=2.0),
        ToolStarted("nope", now=2.0),
        Approved("c1", now=2.0),  # a call that runs, not one awaiting approval
        ModelReplied("model-9", reply(), now=2.0),
        ModelFailed("model-9", "boom", now=2.0),
    ],
)
def test_an_observation_that_answers_nothing_writes_nothing(obs: object) -> None:
    loop = _waiting_on_a_call()
    before = loop.dump()
    with pytest.raises(ProtocolError):
        loop.send(obs)  # type: ignore[arg-type]
    assert loop.dump() == before


def test_a_reply_whose_calls_share_an_id_is_recorded_with_fresh_ids() -> None:
    loop = Loop(LoopSpec(tools=(ToolSpec("a"),)))
    [ask] = loop.start("go", 0.0)
    calls = (ToolCall("x", "a", {"n": 1}), ToolCall("x", "a", {"n": 2}))
    [run] = loop.send(ModelReplied(ask.id, reply(*calls), now=1.0))
    assert run.id == "x"  # the repeat is not run: its result says why
    recorded = loop.state.messages[-1].content  # type: ignore[union-attr]
    assert [p.id for p in recorded if type(p) is ToolCall] == ["x", "x_2"]
    assert "x_2" not in loop.outstanding_ids()
