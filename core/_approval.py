"""An approval with edited arguments: checked against the tool's schema before the loop takes
it, and told to the model with the call's result, since the call it made stays as it made it
(providers require a result to answer the call as it was sent)."""

from __future__ import annotations

__all__ = ["edit", "ran_edited"]

from collections.abc import Mapping
from typing import Any

import msgspec

from ._errors import InvalidObservation
from ._messages import ResultPart, Text, ToolCall
from ._schema import schema_problem
from ._tools import ToolSpec

_json = msgspec.json.Encoder(order="sorted")


def edit(
    call: ToolCall, arguments: dict[str, Any] | None, tools: Mapping[str, ToolSpec]
) -> ToolCall | None:
    """`call` as it is to run with `arguments` in place of the model's (None: as the model made
    it, as when a person sends back the same), or `InvalidObservation` naming the tool and what
    does not fit its `parameters`."""
    if arguments is None or arguments == call.arguments:
        return None
    tool = tools.get(call.name)
    found = schema_problem(arguments, False if tool is None else tool.parameters)
    if found is not None:
        where, problem = found
        raise InvalidObservation(
            f"the edited arguments of {call.name} ({call.id}) do not fit its schema: {problem}",
            path=f"arguments.{where}" if where else "arguments",
        )
    return msgspec.structs.replace(call, arguments=arguments)


def ran_edited(content: str | list[ResultPart], edited: ToolCall) -> Any:
    """The result of a call a person edited, as the model reads it: first, what it ran with."""
    note = (
        f"(a person approved this call with its arguments changed to "
        f"{_json.encode(edited.arguments).decode()}; this is the result of the call as changed)"
    )
    if isinstance(content, str):
        return f"{note}\n{content}"
    return [Text(note), *content]
