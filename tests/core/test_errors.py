"""turnstile raises one short hierarchy of its own: every error is a `TurnstileError`, and each
carries what its catcher needs (the field, the call ids, the provider's kind of failure)."""

from __future__ import annotations

import pytest
from turnstile.core import (
    CorruptState,
    InvalidHistory,
    InvalidObservation,
    InvalidSpec,
    ModelError,
    ProtocolError,
    TurnstileError,
)
from turnstile.core.messages import HistoryProblem


@pytest.mark.parametrize(
    ("error", "kinds"),
    [
        (ProtocolError("x"), (TurnstileError,)),
        (InvalidObservation("x", path="now"), (ProtocolError, TurnstileError)),
        (InvalidSpec("x", field="Guards.max_turns"), (TurnstileError, ValueError)),
        (InvalidHistory([HistoryProblem(0, None, "x")]), (TurnstileError,)),
        (CorruptState("x"), (TurnstileError,)),
        (ModelError("x"), (TurnstileError,)),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
def test_every_error_is_a_turnstile_error_of_its_kind(
    error: Exception, kinds: tuple[type, ...]
) -> None:
    assert all(isinstance(error, kind) for kind in kinds)


def test_a_spec_error_is_caught_where_a_value_error_is() -> None:
    with pytest.raises(ValueError, match=r"^Guards.max_turns: must be 1 or more$"):
        raise InvalidSpec("must be 1 or more", field="Guards.max_turns")


def test_an_invalid_observation_names_its_field_first_when_it_has_one() -> None:
    named = InvalidObservation("Expected str, got int", path="response.content[0].text")
    assert named.path == "response.content[0].text"
    assert str(named) == "response.content[0].text: Expected str, got int"
    unnamed = InvalidObservation("expected a str or a list of messages")
    assert unnamed.path == "" and str(unnamed) == "expected a str or a list of messages"


def test_a_history_problem_says_where_and_which_call() -> None:
    assert str(HistoryProblem(3, "c1", "tool call has no result")) == (
        "message 3: tool call has no result (call c1)"
    )
    assert str(HistoryProblem(0, None, "no messages to start from")) == (
        "message 0: no messages to start from"
    )


def test_an_invalid_history_lists_every_problem_and_the_calls_they_concern() -> None:
    error = InvalidHistory(
        [
            HistoryProblem(1, "a", "tool call has no result"),
            HistoryProblem(1, None, "ends with the model's reply"),
            HistoryProblem(4, "b", "result without a call"),
        ]
    )
    assert error.call_ids == ["a", "b"]
    assert error.positions == [1, 1, 4]
    assert str(error) == (
        "message 1: tool call has no result (call a); message 1: ends with the model's reply; "
        "message 4: result without a call (call b)"
    )


def test_a_model_error_keeps_what_the_provider_said_about_it() -> None:
    error = ModelError(
        "rate_limit_error: slow down (HTTP 429)",
        retryable=True,
        kind="rate_limit_error",
        retry_after=7.5,
        status=429,
        model="claude-sonnet-4-5",
    )
    assert str(error) == error.message == "rate_limit_error: slow down (HTTP 429)"
    assert (error.retryable, error.kind, error.retry_after, error.status, error.model) == (
        True,
        "rate_limit_error",
        7.5,
        429,
        "claude-sonnet-4-5",
    )
    plain = ModelError("boom")
    assert (plain.retryable, plain.kind, plain.retry_after, plain.status, plain.model) == (
        False,
        "",
        None,
        None,
        None,
    )
