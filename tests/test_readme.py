"""The README's first screen is true: its set-up commands are the ones CI runs, its agent runs as
written against a recorded trace, its approval pauses and resumes across processes, its failed
run says why, and its links land on pages of the docs. (Every block also runs alone in
tests/test_docs.py; here is what each must show.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .test_docs import ROOT, Block, blocks, run_group

README = (ROOT / "README.md").read_text()
BLOCKS = blocks(ROOT / "README.md")


def _group(name: str) -> list[Block]:
    return [b for b in BLOCKS if b.opts.get("group") == name]


def test_the_readme_opens_with_the_two_setup_commands() -> None:
    first_block = re.search(r"```\n(.*?)```", README, re.S).group(1).splitlines()
    assert first_block == [
        "pip install -e . && turnstile demo",
        "pip install -e '.[test]' && pytest",
    ]


def test_the_readme_is_one_short_page() -> None:
    assert len(README.splitlines()) <= 200


def test_the_agent_is_twenty_lines_over_a_provider_s_official_sdk() -> None:
    [agent, _] = _group("agent")
    code = [line for line in agent.code.splitlines() if line.strip()]
    assert len(code) <= 20
    assert 'Agent(LoopSpec(output=Answer), model="openai:gpt-4.1"' in agent.code  # one value
    assert "openai_chat.Client(openai.OpenAI()" in README  # what the model string builds
    assert "@tool" in agent.code and agent.code.count("def ") == 2  # two tools
    assert "on_update=" in agent.code and "TextDelta" in agent.code  # streamed text
    assert "LoopSpec(output=Answer)" in agent.code  # a typed answer
    assert "OPENAI_BASE_URL" in README  # the one line to any OpenAI-compatible server


def test_the_agent_streams_its_text_then_prints_its_typed_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [agent, test] = _group("agent")
    [(namespace, printed)] = run_group([agent], tmp_path, monkeypatch)
    run = namespace["run"]
    assert run.output == namespace["Answer"](city="Rome", temp_c=24.0)
    assert run.trajectory() == ["get_weather", "get_weather", "local_time", "final_answer"]
    streamed, answer = printed.rstrip("\n").rsplit("\n", 1)
    assert "Rome is warmer" in streamed  # the text came first, as it streamed
    assert answer == "Answer(city='Rome', temp_c=24.0)"
    assert "turnstile_trace" in test.code and "assert run == snapshot" in test.code


def test_the_approval_pauses_in_one_process_and_resumes_in_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pause, resume = _group("approvals")
    assert "needs_approval=True" in pause.code and "approve=" in resume.code
    [(first, printed)] = run_group([pause], tmp_path, monkeypatch)
    assert first["run"].finish is None and "name='refund'" in printed
    assert "refunded" not in first["run"].transcript()  # nothing refunded yet
    assert (tmp_path / "refund.journal").exists()
    # the second block defines none of the first's names: it imports refund.py, as a new
    # process would, and resumes from the journal
    assert "def refund" not in resume.code and "journal=" in resume.code
    [(second, printed)] = run_group([resume], tmp_path, monkeypatch)
    assert second["run"].stop_reason == "completed" and printed.startswith("Done:")
    assert "refunded 30" in second["run"].transcript()


def test_the_failed_run_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [failed] = [b for b in BLOCKS if "bad-key" in b.opts.get("replay", "")]
    [(namespace, printed)] = run_group([failed], tmp_path, monkeypatch)
    error = namespace["run"].error
    assert error.status == 401 and error.kind == "invalid_api_key" and not error.retryable
    assert printed.startswith("model_error Failure(")


def test_every_link_into_the_docs_lands_on_a_page() -> None:
    site = "https://turnstile-dev.github.io/turnstile/"
    links = re.findall(re.escape(site) + r"([a-z/-]*)", README)
    assert len(links) >= 10
    for link in links:
        page = ROOT / "docs" / (link.rstrip("/") or "index")
        assert page.with_suffix(".md").exists() or (page / "index.md").exists(), link


def test_the_license_the_package_declares_is_the_one_it_ships() -> None:
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "turnstile maintainers" in text
    assert "LICENSE" in (importlib.metadata.metadata("turnstile").get_all("License-File") or [])
    assert project["urls"]["Documentation"] == "https://turnstile-dev.github.io/turnstile/"
    assert project["urls"]["Documentation"] in README
