"""The pytest plugin: test an agent against a recorded conversation, offline and exactly.

```python
@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_weather_agent(turnstile_client, snapshot):
    run = my_agent.run("北京和上海哪个更暖和?", model=turnstile_client)
    assert run.trajectory() == ["get_weather", "get_weather"]
    assert run == snapshot
```

`turnstile_client` is the provider's `Client` over its real SDK client, whose HTTP goes to a
replay of the trace: each request the agent sends must equal the recorded one, or the test fails
with a diff of the two bodies. `--turnstile-record=new` records the traces that do not exist yet
from the live API (key from the environment), `all` records them all again; `none` (the default)
only replays.
"""

from __future__ import annotations

__all__ = [
    "TraceMismatchFailure",
    "turnstile_async_client",
    "turnstile_client",
    "turnstile_network_transport",
    "turnstile_trace",
]

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._mismatch import TraceMismatchFailure

if TYPE_CHECKING:
    from turnstile.providers.client import WireClient
    from turnstile.providers.replay import Trace

    from ._pytest_traces import Cassette


_CALL_REPORT = pytest.StashKey[pytest.TestReport]()
_MISMATCHED = pytest.StashKey[bool]()
_RECORDED = pytest.StashKey[list[str]]()
_MARKER = (
    "turnstile_trace(path, *, provider=None, model=None, stream=None, **options): replay the "
    "model's HTTP exchanges from a wire trace (path relative to the test file, else the "
    "rootdir) to the turnstile_client / turnstile_async_client fixtures"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("turnstile")
    group.addoption(
        "--turnstile-record",
        choices=("none", "new", "all"),
        default="none",
        help="none: replay traces only (default); new: record the traces that do not exist yet "
        "from the live API; all: record every trace again",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)
    config.stash[_RECORDED] = []


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A regression file a simulation wrote (`*.simulation.json`) is a test: its seed replayed
    under its faults (`turnstile.executors.testing.simulate`)."""
    if file_path.name.endswith(".simulation.json"):
        from ._regression import SimulationFile

        return SimulationFile.from_parent(parent, path=file_path)
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def _keep_snapshots(item: pytest.Item) -> None:
    """Tell syrupy that the test did not get as far as its snapshots: it would count them as
    unused, advise `--snapshot-update` and, given it, delete them, while the snapshot is the
    record the changed agent is to be checked against once the trace matches again. Syrupy
    keeps the snapshots of skipped tests; its session (which its own `snapshot` fixture reads
    from `config._syrupy`) is told this one was, for its bookkeeping only."""
    session = getattr(item.config, "_syrupy", None)
    if session is not None and hasattr(session, "ran_item"):
        session.ran_item(item.nodeid, "skipped")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keeps the call's report for the trace's teardown checks; a mismatch that reached the test
    inside an exception group (a trio nursery's) is reported as itself. A test a mismatch
    failed keeps its snapshots."""
    report = yield
    if report.when == "teardown" and item.stash.get(_MISMATCHED, False):
        _keep_snapshots(item)  # after syrupy has seen the call's report
    if report.when != "call":
        return report
    item.stash[_CALL_REPORT] = report
    error = call.excinfo.value if call.excinfo is not None else None
    leaves = list(_leaves(error)) if isinstance(error, BaseExceptionGroup) else [error]
    if error is not None and all(isinstance(leaf, TraceMismatchFailure) for leaf in leaves):
        item.stash[_MISMATCHED] = True
        if isinstance(error, BaseExceptionGroup):
            report.longrepr = "\n\n".join(str(leaf) for leaf in leaves)
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    recorded = config.stash.get(_RECORDED, [])
    if recorded:
        terminalreporter.write_sep("-", "turnstile")
        for line in recorded:
            terminalreporter.write_line(line)


@pytest.fixture
def _turnstile_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    from ._pytest_traces import Cassette, locate, read_marker

    mark = request.node.get_closest_marker("turnstile_trace")
    if mark is None:
        pytest.fail(
            "the turnstile fixtures need a trace: mark the test with "
            '@pytest.mark.turnstile_trace("path/to/trace.<provider>.json")',
            pytrace=False,
        )
    marker = read_marker(mark)
    rootdir = request.config.rootpath
    path = locate(marker.path, request.node.path.parent, rootdir)
    shown = str(path.relative_to(rootdir)) if path.is_relative_to(rootdir) else str(path)
    mode = request.config.getoption("turnstile_record")
    cassette = Cassette(marker, path, mode, request.node.nodeid, shown)
    yield cassette
    report = request.node.stash.get(_CALL_REPORT, None)
    written = cassette.close(passed=report is not None and report.passed)
    if written is not None:
        request.config.stash[_RECORDED].append(written)


@pytest.fixture
def turnstile_trace(_turnstile_cassette: Cassette) -> Trace:
    """The test's `Trace`: the one replayed, or, while recording, the one being filled."""
    return _turnstile_cassette.trace


@pytest.fixture
def turnstile_client(request: pytest.FixtureRequest, _turnstile_cassette: Cassette) -> WireClient:
    """The provider's `Client` over its sync SDK client (`complete`), on the test's trace."""
    return _turnstile_cassette.client(
        sync=True, network=lambda: request.getfixturevalue("turnstile_network_transport")
    )


@pytest.fixture
def turnstile_async_client(
    request: pytest.FixtureRequest, _turnstile_cassette: Cassette
) -> WireClient:
    """The provider's `Client` over its async SDK client (`acomplete`, under trio or asyncio)."""
    return _turnstile_cassette.client(
        sync=False, network=lambda: request.getfixturevalue("turnstile_network_transport")
    )


@pytest.fixture
def turnstile_network_transport() -> Any:
    """Where recordings go: the live network (sync and async). Asked for only while recording;
    override it (with an `httpx2.MockTransport`, a transport through a proxy) to record from
    elsewhere."""
    from ._pytest_traces import LiveTransport

    return LiveTransport()
