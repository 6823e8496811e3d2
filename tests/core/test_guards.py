"""Guards: settings no run could use are refused, naming why."""

from __future__ import annotations

from typing import Any

import pytest
from turnstile.core import Guards


@pytest.mark.parametrize(
    ("given", "says"),
    [
        # a window within the reserve once stopped every run on context_budget before its first call
        ({"context_window": 1000}, "context_window: must be larger than reserve_tokens"),
        ({"context_window": 18_000}, "context_window: must be larger than reserve_tokens"),
        # once the final request carried an empty message, an invalid history
        ({"finalize_prompt": ""}, "finalize_prompt"),
        ({"finalize_prompt": "  \n"}, "finalize_prompt"),
    ],
)
def test_guards_no_run_could_use_are_refused_naming_why(given: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Guards(**given)


def test_a_small_window_with_a_reserve_to_match_is_fine() -> None:
    assert Guards(context_window=1000, reserve_tokens=200).context_window == 1000


def test_guard_settings_that_make_no_sense_are_refused() -> None:
    import pytest

    for bad in (
        {"max_repeated_calls": 1},
        {"max_turns": 0},
        {"max_model_retries": -1},
        {"max_output_retries": -1},
    ):
        with pytest.raises(ValueError, match="Guards"):
            Guards(**bad)
