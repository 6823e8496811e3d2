"""What crosses Temporal: a run's input and options, and the bytes of each activity.

Everything is msgspec JSON in a `bytes` payload (Temporal's `binary/plain`), never Temporal's
own JSON converter, so what the loop gets back after a hop is exactly what was sent.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_OPTIONS",
    "GUARDRAIL_ACTIVITY",
    "MODEL_ACTIVITY",
    "SPECS_ACTIVITY",
    "TASK_QUEUE",
    "TOOL_ACTIVITY",
    "WORKFLOW",
    "ChildRun",
    "Input",
    "Options",
    "decode_call_model",
    "decode_check",
    "decode_input",
    "decode_outcome",
    "decode_run_tool",
    "decode_specs",
    "encode",
    "shippable",
    "typed",
]

import importlib

import msgspec
from turnstile.core import (
    CallModel,
    CheckGuardrail,
    GuardrailChecked,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    RunTool,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import History, Message

WORKFLOW = "turnstile.Loop"
MODEL_ACTIVITY = "turnstile.call_model"
TOOL_ACTIVITY = "turnstile.run_tool"
SPECS_ACTIVITY = "turnstile.tool_specs"
GUARDRAIL_ACTIVITY = "turnstile.check_guardrail"
TASK_QUEUE = "turnstile"


class Options(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a run schedules its activities.

    `heartbeat_s`: how soon a worker that died is noticed (its activities heartbeat three times
    as often). `model_timeout_s`, `tool_timeout_s`: the longest one attempt of a model call, or
    of a tool without a `timeout_s` of its own, may take. `attempts`: how many times a model call
    or a replay-safe tool is tried when its worker is lost (any other tool is tried once).
    `retry_interval_s`: the wait before the first such retry (doubling after). `continue_after`:
    the history length past which the run continues as new from its dump, once no activity runs.
    """

    heartbeat_s: float = 10.0
    model_timeout_s: float = 600.0
    tool_timeout_s: float = 3600.0
    attempts: int = 5
    retry_interval_s: float = 1.0
    continue_after: int = 2000


DEFAULT_OPTIONS = Options()


class Input(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A workflow's first argument (its second is the loop's dump, or empty). `prompt` starts a
    run; without one a dump is resumed: `resumed` tells the loop it was (a dump from another
    process), else its outstanding commands are carried on (a continue-as-new), with `offset`,
    what the run's clock adds to `workflow.time()` (`Session.offset`). `fork`: a fork's parent
    log and where it stands on it (`Recorded.carried()`), to serve from. `toolbox`: a child
    run's tools, those of its sub-agent (`ChildRun.toolbox`); unset, the worker's own."""

    spec: LoopSpec
    model: str
    prompt: str | list[Message] | None = None
    resumed: bool = False
    offset: float = 0.0
    options: Options = DEFAULT_OPTIONS
    fork: bytes = b""
    toolbox: str | msgspec.UnsetType = msgspec.UNSET  # unset, left out: as before sub-agents


class ChildRun(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="type",
    tag="child_run",
):
    """A worker's answer to a sub-agent's call (`as_tool`): the child run to start, as a child
    workflow. `spec` with its tools' specs, `model` a name of the worker's models (empty: the
    parent's), `prompt` the call's, `toolbox` the sub-agent's path of names (`research`, or
    `research/search` for a child's own sub-agent): where the worker finds the child's tools."""

    spec: LoopSpec
    model: str
    prompt: str
    toolbox: str


def _plain(value: object) -> object:
    """A request's messages are a `History` view of the loop's ledger: sent as the list. A
    spec's `output` type is sent as the name it is imported by, `module:qualname`."""
    if isinstance(value, History):
        return list(value)
    if isinstance(value, type):
        return f"{value.__module__}:{value.__qualname__}"
    raise TypeError(f"cannot encode {type(value).__name__}")


encode = msgspec.json.Encoder(enc_hook=_plain).encode
decode_input = msgspec.json.Decoder(Input).decode
decode_call_model = msgspec.json.Decoder(CallModel).decode
decode_run_tool = msgspec.json.Decoder(RunTool).decode
decode_check = msgspec.json.Decoder(CheckGuardrail).decode
decode_outcome = msgspec.json.Decoder(
    ModelReplied | ModelFailed | ToolReturned | GuardrailChecked | ChildRun
).decode
decode_specs = msgspec.json.Decoder(tuple[ToolSpec, ...]).decode


def typed(spec: LoopSpec) -> LoopSpec:
    """`spec` as it came over JSON, its `output` type imported again by its name."""
    if not isinstance(spec.output, str):
        return spec
    module, _, name = spec.output.partition(":")
    output: object = importlib.import_module(module)
    for attribute in name.split("."):
        output = getattr(output, attribute)
    return msgspec.structs.replace(spec, output=output)


def shippable(spec: LoopSpec) -> LoopSpec:
    """`spec` if JSON carries it whole to a workflow; else a `ValueError` saying why. A typed
    `output` goes by its import name (the worker imports it), so it must be a class a module
    defines at its top level; a predicate in `stop_when` is code that cannot go at all."""
    try:
        decoded = typed(msgspec.json.decode(encode(spec), type=LoopSpec))
    except (TypeError, ValueError, ImportError, AttributeError) as e:
        raise ValueError(f"the spec cannot be sent to a workflow as JSON: {e}") from None
    if decoded != spec:
        raise ValueError(
            "the spec cannot be sent to a workflow as JSON: it holds code (a stop_when "
            "predicate, an output type not importable by its name) that would not come back "
            "the same"
        )
    return spec
