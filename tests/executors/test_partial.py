"""A JSON text cut short anywhere says a prefix of its final value, and the whole text says the
whole value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from turnstile.executors._partial import partial_json

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
ANSWERS = st.lists(JSON, max_size=4) | st.dictionaries(st.text(), JSON, max_size=4) | st.text()
"""What an answer is at its top: a number alone that may go on reads as what came so far."""


def is_prefix(part: Any, whole: Any) -> bool:
    """Whether `part` is what `whole` looks like before its text ended."""
    if isinstance(whole, dict):
        return isinstance(part, dict) and all(
            k in whole and is_prefix(v, whole[k]) for k, v in part.items()
        )
    if isinstance(whole, list):
        return (
            isinstance(part, list)
            and len(part) <= len(whole)
            and all(is_prefix(p, w) for p, w in zip(part, whole, strict=False))
        )
    if isinstance(whole, str):
        return isinstance(part, str) and whole.startswith(part)
    return part == whole


@settings(max_examples=300, deadline=None)
@given(value=ANSWERS, indent=st.sampled_from([None, 2]), ascii=st.booleans())
def test_every_prefix_says_a_prefix_of_the_value(
    value: Any, indent: int | None, ascii: bool
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii)
    for end in range(len(text)):
        part = partial_json(text[:end])
        assert part is None or is_prefix(part, value), (text[:end], part)
    assert partial_json(text) == value


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"city": "Ro', {"city": "Ro"}),
        ('{"city": "Rome", "temp', {"city": "Rome"}),
        ('{"city": "Rome", "temp_c":', {"city": "Rome"}),
        ('{"city": "Rome", "temp_c": 2', {"city": "Rome"}),
        ('{"city": "Rome", "temp_c": 24,', {"city": "Rome", "temp_c": 24}),
        ('{"tags": ["a", "b', {"tags": ["a", "b"]}),
        ('{"note": "a \\u00e9 b \\u00', {"note": "a é b "}),
        ('{"note": "quote \\', {"note": "quote "}),
        ('{"ok": tru', {}),
        ("", None),
        ("  ", None),
    ],
)
def test_what_a_cut_text_says(text: str, said: Any) -> None:
    assert partial_json(text) == said


@pytest.mark.parametrize("text", ['{"a" 1', "}", "[1, 2]]", '{"a": 1, ]'])
def test_a_text_that_is_no_json_start_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        partial_json(text)
