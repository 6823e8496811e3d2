"""`turnstile view`: a run as one HTML page that fetches nothing and shows every turn, its
calls and results escaped; forks drawn as branches. Checked in a headless chromium over the
DevTools protocol (on a pipe: no port, no new dependency)."""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from turnstile.core import (
    Compaction,
    Guards,
    Loop,
    LoopSpec,
    ModelError,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    Price,
    Resumed,
    ToolReturned,
    tool,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
)
from turnstile.core.request import Purpose
from turnstile.executors import Edit, Journal, ScriptedModel, cli, sync
from turnstile.executors._view import Branch, page, write_page

HOSTILE = "</script><script>console.error('injected')</script><img src=x onerror=alert(1)>&amp;"


@tool
def lookup(key: str) -> str:
    """A result that is markup and script."""
    return f"{key}: {HOSTILE}"


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


def calls(*calls: ToolCall) -> ModelResponse:
    return ModelResponse([Text("<b>looking</b>"), *calls], ModelStop.tool_use, Usage(100, 20))


def answer(text: str) -> ModelResponse:
    return ModelResponse([Text(text)], ModelStop.end_turn, Usage(100, 20))


SPEC = LoopSpec(
    tools=(lookup.spec, delete.spec),
    guards=Guards(max_model_retries=1),
    models=("big", "small"),
    prices={"big": Price(input=3.0, output=15.0), "small": Price(input=1.0, output=5.0)},
)


def journal_of_every_kind(path: Path) -> Path:
    """A run with a retry, a fallback, an approval, a denial, hostile results: 4 turns."""
    script = [
        calls(ToolCall("a", "lookup", {"key": "</script>"})),
        ModelError("overloaded", retryable=True),
        calls(ToolCall("d1", "delete", {"path": "x"})),
        calls(ToolCall("d2", "delete", {"path": "y"})),
        ModelError("overloaded", retryable=True),
        ModelError("overloaded", retryable=True),
        answer("<script>alert('done')</script>"),
    ]
    answers = iter([True, "not y"])
    sync.run(
        SPEC,
        "clean <up>",
        model=ScriptedModel(script),
        tools=[lookup, delete],
        approve=lambda c: next(answers),
        journal=str(path),
    )
    return path


# -- the page as text ----------------------------------------------------------------------


def test_every_string_from_the_run_is_escaped(tmp_path: Path) -> None:
    journal = journal_of_every_kind(tmp_path / "run.journal")
    assert cli.main(["view", str(journal), "-o", str(tmp_path / "run.html")]) == 0
    text = (tmp_path / "run.html").read_text()
    assert text.count("<script>") == 1 and text.count("</script>") == 1
    assert "<img" not in text and "<b>looking</b>" not in text
    assert "&lt;/script&gt;&lt;script&gt;console.error(" in text
    assert "&amp;amp;" in text  # an entity in a result is shown, not decoded


def test_the_page_fetches_nothing(tmp_path: Path) -> None:
    text = page([Branch("run", Journal.read(journal_of_every_kind(tmp_path / "j")))], SPEC)
    assert "default-src 'none'" in text
    assert not re.search(r"(src|href)=\"(?!#|data:)", text)  # links only within the page


def test_each_event_offers_the_command_that_forks_there(tmp_path: Path) -> None:
    journal = journal_of_every_kind(tmp_path / "my run.journal")
    events = Journal.read(journal)
    text = page([Branch("run", events, str(journal))], SPEC)
    for i in range(len(events)):
        forks = (
            f"turnstile fork &#x27;{journal}&#x27; --at {i} -o &#x27;my run-at-{i}.journal&#x27;"
        )
        assert forks + "</code>" in text


def test_retries_fallbacks_approvals_and_costs_are_shown(tmp_path: Path) -> None:
    text = page([Branch("run", Journal.read(journal_of_every_kind(tmp_path / "j")))], SPEC)
    assert "<b>model-2 failed</b> (retryable, big)" in text
    assert "<b>retry</b>" in text and "<b>fallback to small</b>" in text
    assert "<b>approved</b> <b>delete</b>" in text and "<b>denied</b> <b>delete</b>" in text
    assert "<b>awaits approval</b>: delete (d1)" in text
    # turn 1 on big: 100 in at 3.0, 20 out at 15.0 per million; the last turn on small
    assert "this call 100 in / 20 out · cost 0.0006" in text
    assert "so far 400 in / 80 out · cost 0.0020" in text


def test_an_approval_with_edited_arguments_shows_them_beside_the_call_as_made(
    tmp_path: Path,
) -> None:
    script = [calls(ToolCall("d1", "delete", {"path": "x"})), answer("done")]
    journal = str(tmp_path / "run.journal")
    sync.run(SPEC, "clean", model=ScriptedModel(script), tools=[lookup, delete],
             approve=lambda c: Edit({"path": "<y>"}), journal=journal)  # fmt: skip
    text = page([Branch("run", Journal.read(journal))], SPEC)
    assert "{&quot;path&quot;: &quot;x&quot;}" in text  # the call as the model made it
    approved = "<b>approved</b> <b>delete</b> <span class=id>(d1)</span>, edited: <pre"
    assert approved in text and "{&quot;path&quot;: &quot;&lt;y&gt;&quot;}</pre>" in text


def test_a_dumped_state_is_viewed_as_a_journal_is(tmp_path: Path) -> None:
    journal = journal_of_every_kind(tmp_path / "run.journal")
    dump = tmp_path / "state.json"
    dump.write_bytes(Journal.replay(journal, SPEC).dump())
    assert cli.main(["view", str(dump), "-o", str(tmp_path / "a.html")]) == 0
    assert cli.main(["view", str(journal), "-o", str(tmp_path / "b.html")]) == 0
    a, b = ((tmp_path / f).read_text() for f in ("a.html", "b.html"))
    assert a.replace("state.json", "run.journal").replace("state-at-", "run-at-") == b


def test_an_unwritable_page_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = journal_of_every_kind(tmp_path / "run.journal")
    assert cli.main(["view", str(journal), "-o", str(tmp_path / "no" / "run.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err


def forked(events: list[Any], at: int) -> list[Any]:
    """The run `events` hold, forked before event `at` (a tool's result) with another result."""
    loop = Loop.replay(SPEC, events[:at])
    old = events[at]
    assert type(old) is ToolReturned
    [ask] = loop.send(ToolReturned(old.call_id, "another result", now=old.now))
    loop.send(ModelReplied(ask.id, answer("so it goes"), now=old.now + 1))
    return loop.state.events


def test_a_fork_is_drawn_as_a_branch_from_where_it_leaves(tmp_path: Path) -> None:
    events = Journal.read(journal_of_every_kind(tmp_path / "j"))
    at = next(i for i, e in enumerate(events) if type(e) is ToolReturned)
    text = page([Branch("main", events), Branch("what-if", forked(events, at))], SPEC)
    [trunk, branch] = text.split('<section class="branch"')[1:]
    assert f'id="b0-e{at}"' in trunk and '↳ <a href="#b1">what-if</a> leaves here' in trunk
    assert f"from event #{at}, after {at} shared with main" in branch
    # the branch's first card shows its shared events dimmed; cards before it are left out
    assert 'id="b1-e0"' not in branch and 'class="ev reply sh" id="b1-e1"' in branch
    assert f'class="ev res" id="b1-e{at}"' in branch
    assert "another result" in branch and "another result" not in trunk
    assert "<h3>turn 4</h3>" in trunk and "<h3>turn 2</h3>" in branch


def fork_journal(path: Path, parent: dict[str, object], events: list[Any]) -> Path:
    """A fork's journal as `turnstile fork` writes one: schema 2, its header record naming
    its parent, then its events."""

    def record(payload: bytes) -> bytes:
        length = struct.pack("<I", len(payload))
        return struct.pack("<III", len(payload), zlib.crc32(length), zlib.crc32(payload)) + payload

    records = [record(msgspec.json.encode(x)) for x in [parent, *events]]
    path.write_bytes(b"turnstile-journal\n" + struct.pack("<I", 2) + b"".join(records))
    return path


def test_a_fork_s_journal_is_drawn_with_the_parent_it_names(tmp_path: Path) -> None:
    events = Journal.read(journal_of_every_kind(tmp_path / "main.journal"))
    at = next(i for i, e in enumerate(events) if type(e) is ToolReturned)
    mine = forked(events, at)
    named = {"path": "main.journal", "run": "r-1", "index": at, "change": {"results": {}}}
    fork = fork_journal(tmp_path / "what-if.journal", named, mine)
    write_page(tmp_path / "run.html", [(Loop.replay(SPEC, mine), str(fork))])
    text = (tmp_path / "run.html").read_text()
    assert f"<br>path: main.journal<br>run: r-1<br>index: {at}" in text
    assert "<br>change: {&quot;results&quot;:{}}" in text
    [trunk, branch] = text.split('<section class="branch"')[1:]
    assert trunk.startswith(' id="b0"><h2>main.journal</h2>')
    assert f"from event #{at}, after {at} shared with main.journal" in branch


def test_a_fork_whose_parent_is_gone_is_drawn_alone(tmp_path: Path) -> None:
    events = Journal.read(journal_of_every_kind(tmp_path / "main.journal"))
    fork = fork_journal(tmp_path / "fork.journal", {"path": "gone.journal", "index": 3}, events)
    write_page(tmp_path / "run.html", [(Loop.replay(SPEC, events), str(fork))])
    text = (tmp_path / "run.html").read_text()
    assert text.count('<section class="branch"') == 1
    assert f"parent: not found: {tmp_path / 'gone.journal'}" in text


# -- the page in a browser -----------------------------------------------------------------


def _chromium() -> str | None:
    return next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))),
        None,
    )


needs_chromium = pytest.mark.skipif(
    _chromium() is None and not os.environ.get("CI"),
    reason="needs Debian's chromium (apt-get install chromium), which .ci/run installs",
)


class DevTools:
    """Chromium, headless, driven over the DevTools protocol on its pipe (fds 3 and 4: JSON
    messages ended by NUL): open a file, collect console errors, read the DOM, screenshot."""

    def __init__(self, profile: Path) -> None:
        exe = _chromium()
        assert exe is not None, "CI installs chromium (.ci/run): it is missing"
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def wire() -> None:  # in the child: the pipe on the fds chromium reads and writes
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            # no sandbox: a container's root cannot give chromium one; the page is the test's
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--no-first-run", "--window-size=1200,900"],
            close_fds=False, preexec_fn=wire,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=self.session)

    def _messages(self) -> Iterator[dict[str, Any]]:
        while True:
            while b"\0" not in self._buffer:
                ready, _, _ = select.select([self._read], [], [], 60)
                assert ready, "chromium said nothing for 60 s"
                chunk = os.read(self._read, 1 << 20)
                assert chunk, "chromium closed its pipe"
                self._buffer += chunk
            message, self._buffer = self._buffer.split(b"\0", 1)
            yield json.loads(message)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        for reply in self._messages():
            if reply.get("id") == self._id:
                assert "error" not in reply, reply
                return reply["result"]  # type: ignore[no-any-return]
            self.events.append(reply)
        raise AssertionError("unreachable")

    def open(self, path: Path) -> None:
        self.call("Page.navigate", session=self.session, url=path.as_uri())
        if not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            for event in self._messages():
                self.events.append(event)
                if event.get("method") == "Page.loadEventFired":
                    break
        self.call("Runtime.evaluate", session=self.session, expression="1")  # flush the logs

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and the browser's own errors (a blocked fetch,
        a script the page's policy refused)."""
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(" ".join(str(a.get("value")) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"]["text"])
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", session=self.session, expression=expression, returnByValue=True
        )
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=self.session, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close")
        finally:
            self.proc.wait(timeout=30)
            os.close(self._write)
            os.close(self._read)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    devtools = DevTools(tmp_path / "profile")
    try:
        yield devtools
    finally:
        devtools.close()


@needs_chromium
def test_the_browser_check_sees_a_console_error(tmp_path: Path, browser: DevTools) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><title>x</title><script>console.error('seen')</script>")
    browser.open(bad)
    assert browser.errors() == ["seen"]


@needs_chromium
def test_the_page_loads_in_a_browser_without_error_and_shows_every_turn(
    tmp_path: Path, browser: DevTools
) -> None:
    events = Journal.read(journal_of_every_kind(tmp_path / "run.journal"))
    at = next(i for i, e in enumerate(events) if type(e) is ToolReturned)
    html = tmp_path / "run.html"
    html.write_text(page([Branch("main", events), Branch("what-if", forked(events, at))], SPEC))
    browser.open(html)
    assert browser.errors() == []
    titles = browser.evaluate(
        "[...document.querySelectorAll('section.branch')].map(s =>"
        " [...s.querySelectorAll('.card.turn h3')].map(h => h.textContent))"
    )
    assert titles == [["turn 1", "turn 2", "turn 3", "turn 4"], ["turn 1", "turn 2"]]
    # the hostile result is text on the page, not markup in it
    assert browser.evaluate("document.scripts.length") == 1
    assert browser.evaluate("document.images.length") == 0
    assert browser.evaluate(f"document.body.textContent.includes({json.dumps(HOSTILE)})")
    shot = browser.screenshot(tmp_path / "run.png")
    print(f"screenshot of the page: {shot}")
    assert shot.read_bytes().startswith(b"\x89PNG")
    # the page's own script runs under its policy: filtering hides the cards without a match
    shown = browser.evaluate(
        "const q = document.getElementById('q'); q.value = 'another result';"
        "q.dispatchEvent(new Event('input'));"
        "document.querySelectorAll('.card:not(.hidden)').length"
    )
    assert shown == 1 and browser.errors() == []


def test_a_compaction_and_its_summary_are_shown_where_they_came() -> None:
    def model(request: ModelRequest) -> ModelResponse:
        if request.purpose is Purpose.summarize:
            return ModelResponse([Text("files read: all x")], ModelStop.end_turn)
        n = sum(type(m) is ToolResults for m in request.messages)
        if n == 40:
            return answer("all x")
        return ModelResponse([ToolCall(f"r{n}", "read", {"n": n})], ModelStop.tool_use)

    @tool
    def read(n: int) -> str:
        """Read file n."""
        return "x" * 600

    guards = Guards(max_turns=None, context_window=8_000, reserve_tokens=1_000)
    spec = LoopSpec(guards=guards, compaction=Compaction(strategy="summarize"))
    run = sync.run(spec, "read them", model=ScriptedModel(model), tools=[read])
    assert run.state.compactions
    text = page([Branch("run", run.state.events)], spec)
    assert text.count('<article class="card summarize"><h3>summary</h3>') == len(
        run.state.compactions
    )
    assert "compacted (summarize): messages 2–" in text
    assert re.search(r"request</b> model-\d+ · \d+ of \d+ messages", text)  # what was left out


def test_a_resumed_model_call_stays_in_its_turn() -> None:
    loop = Loop(LoopSpec())
    loop.start("hi", 0.0)
    loop.send(Resumed(now=1.0))
    loop.send(ModelReplied("model-1", answer("hello"), now=2.0))
    text = page([Branch("run", loop.state.events)], LoopSpec())
    assert text.count('<article class="card turn">') == 1
    assert "<b>resumed</b> by a new process" in text
    assert "<b>request model-1 sent again</b> by the new process" in text


def test_events_the_spec_refuses_are_shown_as_recorded_after_a_note(tmp_path: Path) -> None:
    events = Journal.read(journal_of_every_kind(tmp_path / "j"))
    strict = LoopSpec(tools=SPEC.tools, guards=Guards(max_turns=1))  # the run took 4 turns
    text = page([Branch("run", events)], strict)
    assert '<article class="card err"><h3>the replay stops at event #' in text
    assert f'id="b0-e{len(events) - 1}"' in text and "<b>not finished</b>: phase ?" in text


def test_a_run_going_on_after_a_failed_one_starts_a_new_turn() -> None:
    loop = Loop(LoopSpec())
    loop.start("hi", 0.0)
    loop.send(ModelFailed("model-1", "boom", now=1.0))
    [ask] = loop.start([AssistantMessage([Text("(none)")]), UserMessage("again")], 2.0)
    loop.send(ModelReplied(ask.id, answer("hello"), now=3.0))
    text = page([Branch("run", loop.state.events)], LoopSpec())
    assert text.count('<article class="card start">') == 2
    assert text.count('<article class="card turn">') == 2 and "<b>retry</b>" not in text


def test_runs_given_together_are_drawn_as_the_branches_they_are(tmp_path: Path) -> None:
    main = journal_of_every_kind(tmp_path / "main.journal")
    events = Journal.read(main)
    at = next(i for i, e in enumerate(events) if type(e) is ToolReturned)
    with Journal(tmp_path / "what-if.journal") as other:
        for event in forked(events, at):
            other.append(event)
    out = tmp_path / "both.html"
    assert cli.main(["view", str(main), str(other.path), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.count('<section class="branch"') == 2
    assert f"from event #{at}, after {at} shared with main.journal" in text


def test_a_fork_with_no_event_of_its_own_shows_where_it_stands(tmp_path: Path) -> None:
    events = Journal.read(journal_of_every_kind(tmp_path / "j"))
    at = next(i for i, e in enumerate(events) if type(e) is ToolReturned)
    text = page([Branch("main", events), Branch("cut", events[:at])], SPEC)
    branch = text.split('<section class="branch"')[2]
    assert "<h3>turn 1</h3>" in branch and 'class="ev tool sh"' in branch
    assert "<b>not finished</b>: phase awaiting_tools, waiting on lookup (a)" in branch


def test_a_sub_agents_run_is_drawn_in_a_fold_under_its_call(tmp_path: Path) -> None:
    from tests.executors.subagent_world import PARENT, execute

    journal = tmp_path / "run.journal"
    execute("sync", tmp_path, journal=journal)
    write_page(tmp_path / "run.html", [(Journal.replay(journal, PARENT), str(journal))])
    text = (tmp_path / "run.html").read_text()
    folds = re.findall(r'<details class="sub"><summary>([^<]*)</summary>', text)
    assert folds == [
        f"sub-agent run · completed · 2 turns · 700 in / 70 out · {name}"
        for name in ("run.1-a1.journal", "run.1-a2.journal")
    ]
    assert "result of <b>note</b>" in text  # the child's own call, inside the fold
    assert "spent 700 in / 70 out · cost 0.0008" in text  # on the parent's result
    assert 'id="b0-1-a1-e3"' in text  # the child's events have ids of their own
