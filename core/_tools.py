"""Tools: `ToolSpec` (a tool as the model sees it) and `@tool`, which turns a typed Python
function into a `ToolSpec` plus a checked way to call it.

The JSON schema comes from msgspec, built from the signature; the same msgspec type checks the
model's arguments before the function runs. Every bad call becomes a short message the model can
act on, never a traceback. The core never calls the function: the executors do.
"""

from __future__ import annotations

__all__ = [
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolSpec",
    "call_problem",
    "render",
    "tool",
]

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar, get_args, get_origin, get_type_hints, overload

import msgspec

from ._fields import check_fields
from ._messages import Document, Image, Opaque, ResultPart, Text, ToolCall
from ._schema import schema_problem

_MEDIA = (Image, Document)
_PARTS = (Text, Image, Document, Opaque)

_json = msgspec.json.Encoder()

D = TypeVar("D")


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool as the model sees it, plus how the loop may schedule it.

    `parallel_safe=False`: overlaps with no other call. `resource`: calls naming the same resource
    never overlap each other. `finish`: calling it ends the run, its arguments being the output.
    `needs_approval`: a human must approve each call first. `timeout_s`: for executors.
    `replay_safe`: running it twice does no harm, so a call a crash interrupted may run again;
    otherwise the model is told it may or may not have taken effect. `strict`: the provider
    holds the model's arguments to the schema exactly (None: the format's default).
    `defer_loading`: the provider shows the model little of it (its name) until a tool search
    finds it (a `ServerTool` of the format); a format without tool search loads it whole.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=_empty_object)
    parallel_safe: bool = True
    resource: str | None = None
    finish: bool = False
    needs_approval: bool = False
    timeout_s: float | None = None
    replay_safe: bool = False
    strict: bool | None = None
    defer_loading: bool = False

    def __post_init__(self) -> None:
        check_fields(self)

    def arguments_problem(self, arguments: Any) -> str | None:
        """Why `arguments` do not fit `parameters` (`"path: what is wrong"`), or None if they
        do: what a UI checks a person's edit with before approving a call with it."""
        found = schema_problem(arguments, self.parameters)
        return None if found is None else f"{found[0] or 'arguments'}: {found[1]}"


class ToolContext(msgspec.Struct, Generic[D], frozen=True):
    """What a tool may ask for beside the model's arguments, by a parameter of this type (which
    the model never sees): `call_id`, the model's id of the call, the same if a resumed run runs
    it again, so it can serve as an idempotency key for the world outside; `deps`, what the
    caller gave the run as `run(..., deps=...)` (a database handle, the user's id), never
    recorded, serialized or shown to the model. Annotate `ToolContext[MyDeps]` to say its type
    (a sandbox converts what crosses to its processes to that type)."""

    call_id: str
    deps: D = None  # type: ignore[assignment]  # None when the run was given none


class ToolOutcome(NamedTuple):
    """What a run of a tool gives the model: text, or parts (images, documents, text)."""

    content: str | list[ResultPart]
    is_error: bool = False


def _is_context(annotation: Any) -> bool:
    return annotation is ToolContext or get_origin(annotation) is ToolContext


def _parameters(fn: Callable[..., Any]) -> tuple[type[msgspec.Struct], str | None, Any]:
    """What `fn`'s signature says, read once: the struct a model's arguments convert to, and
    the parameter through which it asks for its `ToolContext` (if any) with the type it gives
    the context's `deps` (`Any` unless annotated `ToolContext[T]`)."""
    hints = get_type_hints(fn, include_extras=True)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    context: str | None = None
    deps: Any = Any
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"@tool cannot describe *args or **kwargs ({fn.__name__})")
        annotation = hints.get(name, Any)
        if _is_context(annotation):  # filled in by the runner, never by the model
            if context is None:
                context, deps = name, (get_args(annotation) or (Any,))[0]
            continue
        if param.default is inspect.Parameter.empty:
            fields.append((name, annotation))
        else:
            fields.append((name, annotation, param.default))
    args_type = msgspec.defstruct(
        f"{fn.__name__}_arguments", fields, forbid_unknown_fields=True, kw_only=True
    )
    return args_type, context, deps


def _schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    (ref,), components = msgspec.json.schema_components([args_type], ref_template="#/$defs/{name}")
    name = ref["$ref"].rsplit("/", 1)[1]
    schema = dict(components.pop(name))
    schema.pop("title", None)
    schema.setdefault("properties", {})
    if components:
        schema["$defs"] = components
    return schema


def render(value: Any) -> str | list[ResultPart]:
    """A tool's return value as the model reads it: an image, a document or a list holding one
    as parts (other items of the list as text); anything else as text (`_text`)."""
    if isinstance(value, _MEDIA):
        return [value]
    if isinstance(value, list) and any(isinstance(v, _MEDIA) for v in value):
        return [v if isinstance(v, _PARTS) else Text(_text(v)) for v in value]
    return _text(value)


def _text(value: Any) -> str:
    """str as is, anything else as JSON."""
    return value if isinstance(value, str) else _json.encode(value).decode()


class Tool:
    """A function with its `ToolSpec`. Call it like the function; `check` turns a model's
    arguments into the call's keyword arguments (executors run it: `turnstile.executors.invoke`)."""

    def __init__(self, fn: Callable[..., Any], spec: ToolSpec) -> None:
        self.fn = fn
        self.spec = spec
        self.name = spec.name
        self.is_async = inspect.iscoroutinefunction(fn)
        self._args_type, self._context, deps_type = _parameters(fn)
        self.deps_type: Any = deps_type
        """The type the function gives its context's `deps` (`Any` when it does not say)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name}>"

    def check(
        self, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> dict[str, Any] | ToolOutcome:
        """The keyword arguments to call the function with (the model's, converted to the
        function's types, and the context if it asks for one), or an error outcome saying why."""
        try:
            converted = msgspec.convert(arguments, self._args_type)
        except msgspec.ValidationError as e:
            return ToolOutcome(f"invalid arguments for {self.name}: {e}", True)
        kwargs = {f: getattr(converted, f) for f in converted.__struct_fields__}
        if self._context is not None:
            if context is None:
                return ToolOutcome(
                    f"{self.name} needs a ToolContext, and its runner gave none", True
                )
            kwargs[self._context] = context
        return kwargs


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    resource: str | None = None,
    finish: bool = False,
    needs_approval: bool = False,
    timeout_s: float | None = None,
    replay_safe: bool = False,
    strict: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    resource: str | None = None,
    finish: bool = False,
    needs_approval: bool = False,
    timeout_s: float | None = None,
    replay_safe: bool = False,
    strict: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a `Tool`; its docstring is the description.

    Use bare (`@tool`) or with the scheduling options of `ToolSpec` (`@tool(resource="db")`).
    Parameter descriptions come from `Annotated[T, msgspec.Meta(description=...)]`.
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        made = Tool(fn, ToolSpec(name or fn.__name__))  # its signature read once
        doc = inspect.getdoc(fn) or ""
        made.spec = ToolSpec(
            name=made.name,
            description=description if description is not None else doc.split("\n\n")[0],
            parameters=_schema(made._args_type),
            parallel_safe=parallel_safe,
            resource=resource,
            finish=finish,
            needs_approval=needs_approval,
            timeout_s=timeout_s,
            replay_safe=replay_safe,
            strict=strict,
        )
        return made

    return wrap(fn) if fn is not None else wrap


def call_problem(call: ToolCall, tools: Mapping[str, ToolSpec]) -> str:
    """Why a call must not run (cut off, invalid JSON, unknown tool), as a message the model
    can act on."""
    if not call.complete:
        return (
            "not run: the reply hit its max_tokens limit before this call's arguments were "
            "complete. Make the call again, with shorter arguments if you can."
        )
    if call.raw_arguments is not None:
        raw = (
            call.raw_arguments if len(call.raw_arguments) <= 200 else call.raw_arguments[:200] + "…"
        )
        return f"arguments were not valid JSON: {raw!r}. Send the arguments as one JSON object."
    available = ", ".join(sorted(tools)) or "none"
    return f"unknown tool {call.name!r}. Available tools: {available}."
