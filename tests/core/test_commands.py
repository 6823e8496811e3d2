"""Commands, what the loop tells its executor to do, are frozen, tagged structs: each kind's tag
is its wire name and never changes, a command reads back as it was written, and one carrying a
field no command has does not read."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Command,
    Finish,
    ModelRequest,
    RunTool,
    StopReason,
)
from turnstile.core.messages import UserMessage

ANY_COMMAND = CallModel | RunTool | AwaitApproval | Finish
REQUEST = ModelRequest(None, [UserMessage("hi")], (), 100)
EVERY_COMMAND = [
    CallModel("model-1", REQUEST),
    CallModel("model-2", REQUEST, not_before=12.5),
    RunTool("c1", "get_weather", {"city": "北京"}),
    AwaitApproval("c2", "rm", {"path": "/"}),
    Finish(StopReason.completed, "上海更暖和"),
    Finish(StopReason.finish_tool, {"text": "42"}),
]


def read(data: bytes) -> Any:
    return msgspec.json.decode(data, type=ANY_COMMAND)


def test_each_kind_of_command_has_its_wire_name() -> None:
    tags = {
        type(c).__name__: msgspec.json.decode(msgspec.json.encode(c))["type"] for c in EVERY_COMMAND
    }
    assert tags == {
        "CallModel": "call_model",
        "RunTool": "run_tool",
        "AwaitApproval": "await_approval",
        "Finish": "finish",
    }


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: type(c).__name__)
def test_a_command_reads_back_as_it_was_written(command: Command) -> None:
    data = msgspec.json.encode(command)
    again = read(data)
    assert type(again) is type(command) and msgspec.json.encode(again) == data
    if type(command) is not CallModel:  # (a request's sequences read back as lists)
        assert again == command


def test_a_command_with_a_field_no_command_has_does_not_read() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field `extra`"):
        read(b'{"type":"finish","reason":"completed","output":null,"extra":1}')


def test_a_command_of_a_kind_there_is_none_of_does_not_read() -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'launch'"):
        read(b'{"type":"launch","id":"x"}')


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: type(c).__name__)
def test_a_command_cannot_be_changed_once_made(command: Command) -> None:
    field = command.__struct_fields__[0]
    with pytest.raises(AttributeError):
        setattr(command, field, None)


def test_a_call_without_a_wait_writes_none() -> None:
    assert b"not_before" not in msgspec.json.encode(CallModel("model-1", REQUEST))
    assert b'"not_before":12.5' in msgspec.json.encode(CallModel("model-1", REQUEST, 12.5))


def test_a_finish_without_an_output_carries_none() -> None:
    assert Finish(StopReason.cancelled).output is None


def test_a_stop_reason_is_its_own_name_on_the_wire() -> None:
    for reason in StopReason:
        assert (
            reason == reason.name and msgspec.json.encode(reason) == b'"%s"' % reason.name.encode()
        )
