"""What comes into the loop, checked before anything changes.

An observation (and the conversation `Loop.start` is given, as its `Started` event) becomes the
state's own copy, made by the state's own JSON round trip: every field of its declared type, every
number finite, all text the wire can carry (a plain tool result or reply, ASCII text and flat
arguments, is checked field by field and copied as the round trip would, for about half its cost).
What the caller got wrong raises `InvalidObservation` naming the field. What a model or a tool said
is data the loop carries on with: text that is not valid Unicode (lone UTF-16 surrogates) is
repaired to U+FFFD, and a tool call whose arguments cannot travel (a number that is not finite, a
lone surrogate) keeps them only as text, so the loop answers it with an error result instead of
running it.
"""

from __future__ import annotations

__all__ = ["checked", "started"]

import json
import math
from collections.abc import Callable, Iterator, Sequence
from math import isfinite
from typing import Any, cast

import msgspec
from msgspec import UNSET
from msgspec.structs import astuple

from ._decoding import VALUE_DEPTH, nests_deeper, shallow
from ._errors import HistoryProblem, InvalidHistory, InvalidObservation
from ._history import history_problems
from ._messages import (
    AssistantMessage,
    Message,
    ModelResponse,
    ModelStop,
    Part,
    Text,
    ToolCall,
    Usage,
    UserMessage,
)
from ._observations import (
    Approved,
    Cancelled,
    Denied,
    GuardrailChecked,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)
from ._tools import ToolSpec

_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[type, Callable[[bytes], Observation]] = {
    kind: msgspec.json.Decoder(kind).decode
    for kind in (
        Started,
        ModelReplied,
        ModelFailed,
        ToolStarted,
        ToolReturned,
        Resumed,
        Approved,
        Denied,
        GuardrailChecked,
        Tick,
        Cancelled,
    )
}
_TOO_DEEP = f"nested deeper than {VALUE_DEPTH} levels"
ARGUMENTS_DEPTH = VALUE_DEPTH - 8
"""How deep a call's arguments may nest and still run: the reply wraps them in a few levels."""
REPAIRED = "\n(turnstile: characters that were not valid Unicode were replaced with U+FFFD)"
"""What a tool's result says after its text was repaired, so the model knows why it looks odd."""


def checked(obs: Observation, after: float | None) -> Observation:
    """`obs` as the state will hold it, or `InvalidObservation`; `after`: the time of the last
    event, which `obs.now` may not precede."""
    if (  # the common result, already as it must be (checked inline: this runs once a call)
        type(obs) is ToolReturned
        and type(obs.call_id) is str
        and type(obs.content) is str
        and type(obs.is_error) is bool
        and type(obs.now) is float
        and isfinite(obs.now)
        and obs.content.isascii()  # O(1): ASCII holds no surrogate
        and obs.call_id.isascii()
        and obs.usage is UNSET  # what a call spent is checked as any other field
        and obs.cost is UNSET
    ):
        copy: Observation = obs
    elif type(obs) is ModelReplied:
        copy = _plain_reply(obs) or _copied(obs)
    else:
        copy = _copied(obs)
    if after is not None and copy.now < after:
        raise InvalidObservation(f"{copy.now!r} is before the last event's {after!r}", path="now")
    return copy


def started(
    prompt: str | Sequence[Message],
    now: float,
    after: float | None,
    ledger: list[Message],
    tools: Sequence[ToolSpec] = (),
) -> Started:
    """The `Started` event of `prompt` (a str, or messages ending on the user's side, or on a
    reply of text only for the model to go on from: a prefill) and the run's `tools`, checked
    as `checked` checks an observation, and as the continuation of `ledger`."""
    if isinstance(prompt, str):
        given: list[Message] = [UserMessage(prompt)]
    elif isinstance(prompt, Sequence):
        given = list(cast("Sequence[Message]", prompt))
    else:
        raise InvalidObservation(f"expected a str or a list of messages, got {prompt!r}")
    event = checked(Started(messages=given, now=now, tools=tuple(tools)), after)
    assert type(event) is Started
    messages = event.messages
    problems = history_problems([*ledger, *messages])
    if not messages:
        problems.append(HistoryProblem(0, None, "no messages to start from"))
    elif type(messages[-1]) is AssistantMessage and not _prefill(messages[-1]):
        problems.append(HistoryProblem(len(messages) - 1, None, "ends with the model's reply"))
    if problems:
        raise InvalidHistory(problems)
    return event


def _prefill(message: AssistantMessage) -> bool:
    """The start of the reply, written for the model to go on from: text only."""
    return bool(message.content) and all(type(p) is Text for p in message.content)


_INT64 = 2**63


def _plain_reply(obs: ModelReplied) -> ModelReplied | None:
    """The common reply (text and calls with flat arguments, ASCII text, finite numbers) copied
    as its JSON round trip would copy it, without one; None for anything else, which `_copied`
    checks the careful way. Frozen parts with nothing mutable in them are shared."""
    r, now, model = obs.response, obs.now, obs.model
    if type(r) is not ModelResponse or type(now) is not float or not isfinite(now):
        return None
    content, usage = r.content, r.usage
    if type(content) is not list or type(r.stop) is not ModelStop or type(usage) is not Usage:
        return None
    if type(obs.command_id) is not str or not obs.command_id.isascii():
        return None
    if model is not None or r.raw_stop is not None or r.id is not None or r.model is not None:
        for text in (model, r.raw_stop, r.id, r.model):
            if text is not None and (type(text) is not str or not text.isascii()):
                return None
    a, b, c, d, e = astuple(usage)  # ints, none negative, each below 2**63 (so is their `|`)
    if not (
        type(a) is type(b) is type(c) is type(d) is type(e) is int
        and 0 <= a | b | c | d | e < _INT64
    ):
        return None
    parts: list[Part] = []
    for part in content:
        if type(part) is Text:
            text = part.text
            if type(text) is not str or not text.isascii() or part.provider_data is not None:
                return None
        elif type(part) is ToolCall:
            args, raw = part.arguments, part.raw_arguments
            if (
                type(args) is not dict
                or type(part.id) is not str
                or type(part.name) is not str
                or not (part.id + part.name).isascii()
                or (raw is not None and (type(raw) is not str or not raw.isascii()))
                or type(part.complete) is not bool
                or part.provider_data is not None
            ):
                return None
            for key, value in args.items():
                if type(key) is not str or not key.isascii():
                    return None
                of = type(value)
                if of is str:
                    if not value.isascii():
                        return None
                elif of is int:
                    if not -_INT64 <= value < _INT64:
                        return None
                elif of is float:
                    if not isfinite(value):
                        return None
                elif value is not None and of is not bool:
                    return None
            part = ToolCall(part.id, part.name, dict(args), raw, part.complete)
        else:
            return None
        parts.append(part)
    response = ModelResponse(parts, r.stop, usage, r.raw_stop, r.id, r.model)
    return ModelReplied(command_id=obs.command_id, response=response, model=model, now=now)


def _copied(obs: Observation) -> Observation:
    try:
        data = _ENCODER.encode(obs)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return _deep_copied(obs)  # (what is wrong with it, the careful way says)
    if data.count(b"[") + data.count(b"{") > ARGUMENTS_DEPTH:  # it may nest too deep
        return _deep_copied(obs)
    return _read_back(obs, data)  # nothing in it can nest too deep


def _deep_copied(obs: Observation) -> Observation:
    """`_copied` for an observation that may nest too deep, or cannot be written down."""
    if type(obs) is ModelReplied:
        obs = _too_deep_as_text(obs)
    try:
        data = _ENCODER.encode(obs)
    except UnicodeEncodeError:
        return _rebuilt(obs, msgspec.to_builtins(obs))
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidObservation(f"cannot be written down: {e}") from None
    except RecursionError:
        raise InvalidObservation(_TOO_DEEP) from None
    if nests_deeper(data, VALUE_DEPTH):
        raise InvalidObservation(_TOO_DEEP)
    return _read_back(obs, data)


def _read_back(obs: Observation, data: bytes) -> Observation:
    """`obs` read back from its JSON `data`, as the state will hold it."""
    decode = _DECODERS[type(obs)]
    try:
        copy: Observation = decode(data)
    except msgspec.ValidationError as e:
        raise _invalid(e) from None
    if copy == obs:
        return copy
    plain = msgspec.to_builtins(obs)
    if next(_not_finite(plain, ""), None) is not None:  # NaN and inf were written as null
        return _rebuilt(obs, plain)
    path, got, wanted = _difference(obs, copy, "")  # a dict where a struct belongs, ...
    raise InvalidObservation(f"expected {wanted}, got {got}", path=path)


def _too_deep_as_text(obs: ModelReplied) -> ModelReplied:
    """`obs` with each call whose arguments nest too deep for a run to carry keeping them only
    as text (its first brackets, unless the model's own text is there), so it is not run."""
    content = getattr(obs.response, "content", None)
    if not isinstance(content, list) or all(
        type(p) is not ToolCall or shallow(p.arguments, ARGUMENTS_DEPTH) for p in content
    ):
        return obs
    parts = [
        p
        if type(p) is not ToolCall or shallow(p.arguments, ARGUMENTS_DEPTH)
        else msgspec.structs.replace(
            p, arguments={}, raw_arguments=p.raw_arguments or "{" * 8 + "…"
        )
        for p in content
    ]
    return msgspec.structs.replace(
        obs, response=msgspec.structs.replace(obs.response, content=parts)
    )


def _rebuilt(obs: Observation, data: dict[str, Any]) -> Observation:
    """`obs` from its builtins, after repairing what a model or a tool got wrong in them."""
    if type(obs) is ModelReplied and isinstance(data.get("response"), dict):
        content = data["response"].get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and not _travels(part):
                part["raw_arguments"] = _text(part.get("raw_arguments") or _json(part))
                part["arguments"] = {}
    bad = next(_not_finite(data, ""), None)
    if bad is not None:
        raise InvalidObservation("not a finite number", path=bad)
    repaired = _repaired(data)
    if type(obs) is ToolReturned and repaired["content"] != data["content"]:
        if isinstance(repaired["content"], str):
            repaired["content"] += REPAIRED
        else:
            repaired["content"].append({"type": "text", "text": REPAIRED.lstrip("\n")})
    try:
        return msgspec.convert(repaired, type(obs))
    except msgspec.ValidationError as e:
        raise _invalid(e) from None


def _travels(call: dict[str, Any]) -> bool:
    """A call's arguments can be written down and read back as they are."""
    raw = call.get("raw_arguments")
    return (
        _repaired(call.get("arguments")) == call.get("arguments")
        and (not isinstance(raw, str) or _text(raw) == raw)
        and next(_not_finite(call.get("arguments"), ""), None) is None
    )


def _json(call: dict[str, Any]) -> str:
    try:
        return json.dumps(call.get("arguments"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(call.get("arguments"))


def _text(text: str) -> str:
    """`text` with halves of a character joined and lone halves replaced by U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _repaired(value: Any) -> Any:
    if type(value) is str:
        return value if value.isascii() else _text(value)
    if isinstance(value, dict):
        return {_repaired(k): _repaired(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_repaired(v) for v in value]
    return value


def _not_finite(value: Any, path: str) -> Iterator[str]:
    """The path of each number in `value` that is not finite."""
    if type(value) is float:
        if not math.isfinite(value):
            yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _not_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _not_finite(item, f"{path}[{i}]")


def _difference(given: Any, copy: Any, path: str) -> tuple[str, str, str]:
    """Where `given` first differs in type from `copy`, its JSON round trip."""
    numbers = (int, float)
    if type(given) is not type(copy) and not (type(given) in numbers and type(copy) in numbers):
        return path, type(given).__name__, type(copy).__name__
    if isinstance(given, msgspec.Struct):
        pairs: Iterator[tuple[Any, Any, str]] = (
            (getattr(given, f), getattr(copy, f), f"{path}.{f}" if path else f)
            for f in given.__struct_fields__
        )
    elif isinstance(given, dict):
        pairs = ((v, copy.get(k), f"{path}.{k}") for k, v in given.items())
    elif isinstance(given, list):
        pairs = ((v, w, f"{path}[{i}]") for i, (v, w) in enumerate(zip(given, copy, strict=False)))
    else:
        pairs = iter(())
    for a, b, where in pairs:
        if a != b:
            return _difference(a, b, where)
    return path, type(given).__name__, type(copy).__name__


def _invalid(error: msgspec.ValidationError) -> InvalidObservation:
    """msgspec says `Expected `str`, got `object` - at `$.content``: keep the path apart."""
    message, _, where = str(error).partition(" - at `$")
    path = where.rstrip("`").lstrip(".")
    return InvalidObservation(message.replace("`", ""), path=path)
