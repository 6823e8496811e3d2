"""The public surface is deliberate: each public module's `__all__` is pinned here, so a name that
appears or vanishes by accident fails a test (as trio's test_exports does). A package shows in
`dir()` only its `__all__` and its public submodules; removed names stay removed."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

EXPORTS = {
    "turnstile.core": [
        "Approved",
        "AwaitApproval",
        "CallModel",
        "Cancelled",
        "CheckGuardrail",
        "Command",
        "Compaction",
        "CorruptState",
        "Denied",
        "Event",
        "Finish",
        "GuardrailChecked",
        "Guards",
        "InvalidHistory",
        "InvalidObservation",
        "InvalidSpec",
        "Loop",
        "LoopSpec",
        "LoopState",
        "ModelError",
        "ModelFailed",
        "ModelReplied",
        "ModelRequest",
        "Observation",
        "Price",
        "ProtocolError",
        "Resumed",
        "RunTool",
        "Started",
        "StopReason",
        "Tick",
        "Tool",
        "ToolContext",
        "ToolOutcome",
        "ToolReturned",
        "ToolSpec",
        "ToolStarted",
        "TurnstileError",
        "tool",
    ],
    "turnstile.core.conditions": ["HasToolCall", "TextContains", "TurnCountIs"],
    "turnstile.core.decoding": ["decoded", "shallow"],
    "turnstile.core.diagram": ["Decision", "dot", "mermaid"],
    "turnstile.core.guardrails": ["FinalAnswer", "Guardrail", "GuardrailFunction", "guardrail"],
    "turnstile.core.messages": [
        "AssistantMessage",
        "Audio",
        "Document",
        "History",
        "HistoryProblem",
        "Image",
        "Instructions",
        "Message",
        "ModelResponse",
        "ModelStop",
        "Opaque",
        "Part",
        "ResultPart",
        "Text",
        "Thinking",
        "ToolCall",
        "ToolResult",
        "ToolResults",
        "Usage",
        "UserMessage",
        "UserPart",
        "estimate_tokens",
        "history_problems",
        "text_of",
        "validate_history",
    ],
    "turnstile.core.request": [
        "CachePolicy",
        "OUTPUT_TOOL",
        "OutputFormat",
        "Purpose",
        "ServerTool",
        "ToolChoice",
        "UseTool",
    ],
    "turnstile.core.state": [
        "CallStatus",
        "Compacted",
        "INTERRUPTED",
        "PendingCall",
        "PendingCheck",
        "Phase",
    ],
    "turnstile.providers": [
        "ArgumentsDelta",
        "DecodeError",
        "Delta",
        "MissingAPIKey",
        "MissingExtra",
        "ModelRouter",
        "ProviderError",
        "TextDelta",
        "ThinkingDelta",
        "UnsupportedContent",
        "WireCache",
        "model_client",
        "portable",
    ],
    "turnstile.providers.client": ["WireClient", "takes"],
    "turnstile.providers.extras": ["missing_extra", "required"],
    "turnstile.providers.anthropic_messages": [
        "Client",
        "StreamAccumulator",
        "decode",
        "decode_request",
        "encode",
    ],
    "turnstile.providers.openai_chat": [
        "Client",
        "DIALECTS",
        "Dialect",
        "StreamAccumulator",
        "TokenLimitField",
        "decode",
        "encode",
    ],
    "turnstile.providers.openai_responses": ["Client", "StreamAccumulator", "decode", "encode"],
    "turnstile.providers.replay": [
        "AsyncRecordingTransport",
        "AsyncReplayTransport",
        "CLIENTS",
        "RecordedTools",
        "RecordingTransport",
        "ReplayMismatch",
        "ReplayTransport",
        "Trace",
        "TraceError",
        "client_and_transport",
        "client_for",
        "load_trace",
        "offline_sdk",
        "prompt_for",
        "spec_for",
    ],
    "turnstile.executors": [
        "Agent",
        "ApprovalNeeded",
        "AsyncModelClient",
        "ChildApproval",
        "CorruptJournal",
        "Divergence",
        "Edit",
        "Failure",
        "Fork",
        "Journal",
        "ModelCallFailed",
        "ModelCallFinished",
        "ModelCallStarted",
        "ModelClient",
        "ModelRetry",
        "OutputDelta",
        "ParentChanged",
        "Run",
        "RunFailed",
        "RunFinished",
        "ScriptedModel",
        "Session",
        "ToolCallFinished",
        "ToolCallStarted",
        "ToolRunner",
        "Toolbox",
        "TornJournal",
        "Update",
        "ainvoke",
        "as_tool",
        "divergence",
        "fork",
        "invoke",
        "transcript",
    ],
    "turnstile.executors.aio": ["Updates", "run", "updates"],
    "turnstile.executors.cli": ["main"],
    "turnstile.executors.mcp": ["MCPTools", "offered_name", "outcome", "tool_spec"],
    "turnstile.executors.otel": ["Tracing"],
    "turnstile.executors.sandbox": [
        "ALWAYS_REQUIRED",
        "DEFAULT_LIMITS",
        "Egress",
        "LAYERS",
        "Layer",
        "Sandbox",
        "SandboxLimits",
        "SandboxUnavailable",
        "Secret",
        "TIERS",
        "Tier",
        "UnsendableDeps",
        "Workspace",
        "available_layers",
        "available_tiers",
    ],
    "turnstile.executors.sync": ["call_model", "run"],
    "turnstile.executors.temporal": [
        "LoopHandle",
        "LoopWorkflow",
        "Options",
        "TASK_QUEUE",
        "dev_server",
        "run",
        "start",
        "temporal_binary",
        "worker",
    ],
    "turnstile.executors.testing": [
        "Fault",
        "FaultKind",
        "Faults",
        "Outcome",
        "ScriptedModel",
        "SimulationFailed",
        "SimulationReport",
        "TranscriptExtension",
        "Violation",
        "assert_history_valid",
        "calls",
        "replay",
        "replayed",
        "run_async",
        "simulate",
        "trajectory",
    ],
    "turnstile.executors.testing.pytest_plugin": [
        "TraceMismatchFailure",
        "turnstile_async_client",
        "turnstile_client",
        "turnstile_network_transport",
        "turnstile_trace",
    ],
}
"""Every public module (no part of its dotted name starts with `_`) and its `__all__`, sorted."""

REEXPORTING = [
    *(name for name in EXPORTS if hasattr(importlib.import_module(name), "__path__")),
    "turnstile.core.conditions",
    "turnstile.core.decoding",
    "turnstile.core.diagram",
    "turnstile.core.guardrails",
    "turnstile.core.messages",
    "turnstile.core.request",
    "turnstile.core.state",
]
"""Modules that only gather names (the packages and the core's public submodules): everything
public in their `dir()` is in `__all__`, or is a public submodule."""


def _public_modules() -> list[str]:
    found = []
    for root in ("turnstile.core", "turnstile.providers", "turnstile.executors"):
        found.append(root)
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, f"{root}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                found.append(info.name)
    return sorted(found)


def test_every_public_module_s_exports_are_pinned() -> None:
    assert _public_modules() == sorted(EXPORTS)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_all_is_exactly_the_pinned_list(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == EXPORTS[name]
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_exported_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = [export for export in module.__all__ if not hasattr(module, export)]
    assert missing == []


def _is_submodule(module: ModuleType, name: str) -> bool:
    value = getattr(module, name)
    return isinstance(value, ModuleType) and value.__name__ == f"{module.__name__}.{name}"


@pytest.mark.parametrize("name", REEXPORTING)
def test_nothing_public_outside_all(name: str) -> None:
    module = importlib.import_module(name)
    # pytest rewrites the asserts of a plugin's distribution: it adds names like "@py_builtins"
    public = [n for n in dir(module) if n.isidentifier() and not n.startswith("_")]
    stray = [n for n in public if n not in module.__all__ and not _is_submodule(module, n)]
    assert stray == []  # an import (`Any`, `TYPE_CHECKING`...) is private: `import x as _x`


def test_the_core_exports_at_most_forty_names() -> None:
    core = importlib.import_module("turnstile.core")
    assert len(core.__all__) <= 40


def test_each_name_has_one_public_home() -> None:
    homes: dict[str, list[str]] = {}
    for name in REEXPORTING:
        if name.startswith("turnstile.core"):
            for export in EXPORTS[name]:
                homes.setdefault(export, []).append(name)
    assert {export: where for export, where in homes.items() if len(where) > 1} == {}


def test_lazy_submodules_are_listed_yet_imported_only_when_used() -> None:
    executors = importlib.import_module("turnstile.executors")
    assert {"aio", "sandbox", "sync"} <= set(dir(executors))
    assert executors.aio is importlib.import_module("turnstile.executors.aio")
    code = textwrap.dedent(
        """
        import sys
        import turnstile.executors
        assert "anyio" not in sys.modules and "turnstile.executors.aio" not in sys.modules
        assert "turnstile.executors.sandbox" not in sys.modules
        assert "aio" in dir(turnstile.executors)
        import turnstile.executors.testing as testing
        assert "syrupy" not in sys.modules and "TranscriptExtension" in dir(testing)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("turnstile.core", "Cancel"),  # Cancelled
        ("turnstile.core", "StepCountIs"),  # turnstile.core.conditions.TurnCountIs
        ("turnstile.executors", "trio"),  # turnstile.executors.aio
        ("turnstile.core", "Text"),  # turnstile.core.messages.Text, and the other moved names
    ],
)
def test_removed_and_moved_names_are_gone_from_the_old_home(module: str, name: str) -> None:
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), name)


def test_the_version_is_the_one_in_pyproject_read_when_asked() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    core = importlib.import_module("turnstile.core")
    assert core.__version__ == importlib.metadata.version("turnstile")
    assert core.__version__ == project["project"]["version"]
    with pytest.raises(AttributeError):
        core.__versoin__  # noqa: B018


def test_the_async_executor_s_old_module_name_is_gone() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("turnstile.executors.trio")
