"""The final answer's type (`LoopSpec.output`): the tool the model gives it with, the shape a
format's native structured output is asked for, and the check of what the model gave, whose
failure the model reads and can correct."""

from __future__ import annotations

__all__ = ["OUTPUT_TOOL", "Output", "answered", "check_output", "typed"]

import json
import re
from functools import lru_cache
from typing import Any

import msgspec

from ._commands import StopReason
from ._decoding import VALUE_DEPTH, decoded
from ._errors import InvalidSpec
from ._messages import Message, ToolCall, ToolResult, UserMessage
from ._request import OutputFormat, ToolChoice, UseTool
from ._tools import ToolSpec

OUTPUT_TOOL = "final_answer"
NO_ANSWER = f"Give your final answer by calling the {OUTPUT_TOOL} tool."
_ASKED_FOR_TOOL = UserMessage(NO_ANSWER)


def _object_schema(kind: Any) -> dict[str, Any]:
    """`kind`'s JSON schema, its definitions inline under `$defs`: an object, as tools take."""
    (ref,), defs = msgspec.json.schema_components([kind], ref_template="#/$defs/{name}")
    schema = dict(defs.pop(ref["$ref"].rsplit("/", 1)[1])) if "$ref" in ref else dict(ref)
    if schema.get("type") != "object":
        raise InvalidSpec(
            f"must be an object type (a Struct, dataclass, TypedDict), not {kind!r}",
            field="LoopSpec.output",
        )
    schema.pop("title", None)
    schema.setdefault("properties", {})
    if defs:
        schema["$defs"] = defs
    return schema


_IMPORT_NAME = re.compile(r"[\w.]+:[\w.]+")


def check_output(kind: Any) -> None:
    """Raise `InvalidSpec` unless `kind` can type a final answer (each type checked once). A
    type's import name (`module:qualname`) is how JSON carries one: an executor that ships a
    spec so (Temporal) imports it again, and only then is it checked."""
    if isinstance(kind, str):
        if _IMPORT_NAME.fullmatch(kind):
            return
        raise InvalidSpec(
            f"{kind!r} is no type: give an object type (a Struct, dataclass, TypedDict), or "
            "its import name (module:qualname, of a class a module defines at its top level)",
            field="LoopSpec.output",
        )
    try:
        _check_output(kind)
    except TypeError as e:  # unhashable, or a value msgspec cannot describe
        raise InvalidSpec(
            f"{kind!r} is no type msgspec can describe ({e}): give an object type (a Struct, "
            "dataclass, TypedDict)",
            field="LoopSpec.output",
        ) from None


@lru_cache(maxsize=64)
def _check_output(kind: Any) -> None:
    _object_schema(kind)


def _closed(schema: Any) -> bool:
    """Whether every object in `schema` requires all its properties, as providers' strict modes
    demand; if so, each is closed to others (`additionalProperties: false`, also demanded)."""
    objects: list[dict[str, Any]] = []

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "object":
                if set(node.get("required", ())) != set(node.get("properties", {})):
                    return False
                objects.append(node)
            return all(walk(v) for v in node.values())
        if isinstance(node, list):
            return all(walk(v) for v in node)
        return True

    if not walk(schema):
        return False
    for node in objects:
        node.setdefault("additionalProperties", False)
    return True


@lru_cache(maxsize=64)
def _prepared(kind: Any, mode: str) -> tuple[ToolSpec | None, OutputFormat | None]:
    """The answer tool (`mode` "tool") or native format of the type `kind`: built once per type
    and mode, since its JSON schema takes milliseconds and every `Loop` of a spec asks for it."""
    schema = _object_schema(kind)
    name = getattr(kind, "__name__", "answer")
    strict = _closed(schema)
    if mode == "tool":
        text = f"Give your final answer ({name})."
        return ToolSpec(OUTPUT_TOOL, text, schema, finish=True, strict=strict), None
    return None, OutputFormat(name, schema, strict=strict)


class Output:
    """A spec's `output` type made ready: its tool or native format, and its check."""

    __slots__ = ("format", "kind", "tool")

    def __init__(self, kind: Any, mode: str) -> None:
        self.kind = kind
        self.tool, self.format = _prepared(kind, mode)

    def tool_choice(self, last: Message | None) -> ToolChoice:
        """With an answer tool, every turn must call a tool (the answer comes by no other way),
        and right after a reply that answered in text instead, that tool."""
        if self.tool is None:
            return "auto"
        return UseTool(OUTPUT_TOOL) if last == _ASKED_FOR_TOOL else "required"

    def typed(self, value: Any) -> Any:
        """The answer the state holds (plain data) as the spec's type."""
        return msgspec.convert(value, self.kind)

    def check_reply(self, text: str) -> tuple[Any, str | None]:
        """A reply that ended the turn with `text`: the answer, if it is the native answer."""
        return (None, NO_ANSWER) if self.tool is not None else self.check(text)

    def check(self, value: Any) -> tuple[Any, str | None]:
        """`value` (the answer tool's arguments, or a native reply's text) as plain data that
        converts to the type, or None and what is wrong with it, for the model to read."""
        if isinstance(value, str):
            try:
                value = decoded(_read_answer, value, ValueError, VALUE_DEPTH)
            except ValueError as e:
                return None, f"the answer is not JSON ({e}); reply with the JSON object only."
        try:
            return msgspec.to_builtins(self.typed(value)), None
        except msgspec.ValidationError as e:
            return None, f"the answer does not fit its schema: {e}. Correct it and answer again."


def _read_answer(text: str) -> Any:
    return json.loads(text, parse_constant=_not_a_number)


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is no JSON number")


_ANSWERED = frozenset({StopReason.completed, StopReason.finish_tool})


def answered(output: Output | None, call: ToolCall) -> ToolResult:
    """A finish tool's result: "finished", or, for an answer that fails `LoopSpec.output`,
    what is wrong with it as an error result (which the loop counts: past
    `max_output_retries` the run stops)."""
    if call.name != OUTPUT_TOOL or output is None:
        return ToolResult(call.id, "finished")
    problem = output.check(call.arguments)[1]
    if problem is None:
        return ToolResult(call.id, "finished")
    return ToolResult(call.id, problem, is_error=True)


def typed(output: Output | None, reason: StopReason, value: Any) -> Any:
    """What a `Finish` carries: an answer of `LoopSpec.output`'s type as that type."""
    if output is None or value is None or reason not in _ANSWERED:
        return value
    try:
        return output.typed(value)
    except msgspec.ValidationError:  # a finish tool of the user's own, not the answer
        return value
