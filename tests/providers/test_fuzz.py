"""The codecs against a few thousand mutated real replies (`bench.fuzz`, whose full run is
`python -m bench.fuzz`): every input gives a reply a run can keep, or `DecodeError` or
`ProviderError`, and none under 10 KB takes more than 100 ms."""

from __future__ import annotations

from bench.fuzz import run


def test_mutated_replies_give_a_keepable_reply_or_a_typed_error_and_quickly() -> None:
    report = run(2_000, seed=7)
    assert report.inputs == 2_000
    assert not report.failures, "\n".join(report.lines())
    assert report.outcomes["reply"] and report.outcomes["DecodeError"]  # it reached both ends
