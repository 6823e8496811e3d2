import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from turnstile.providers._errors import DecodeError
from turnstile.providers._sse import SSEDecoder, SSEEvent, events_json, parse_sse

ANTHROPIC_LIKE = (
    "event: message_start\n"
    'data: {"type":"message_start","message":{"id":"msg_01"}}\n'
    "\n"
    "event: ping\n"
    'data: {"type": "ping"}\n'
    "\n"
    ": keep-alive comment\n"
    "event: content_block_delta\n"
    'data: {"type":"content_block_delta","delta":{"text":"北京"}}\n'
    "\n"
)


def feed_all(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def test_named_events_with_json_data() -> None:
    assert parse_sse(ANTHROPIC_LIKE) == [
        SSEEvent("message_start", '{"type":"message_start","message":{"id":"msg_01"}}'),
        SSEEvent("ping", '{"type": "ping"}'),
        SSEEvent("content_block_delta", '{"type":"content_block_delta","delta":{"text":"北京"}}'),
    ]


@pytest.mark.parametrize("eol", ["\r\n", "\r", "\n"])
def test_every_line_ending_gives_the_same_events(eol: str) -> None:
    assert parse_sse(ANTHROPIC_LIKE.replace("\n", eol)) == parse_sse(ANTHROPIC_LIKE)


def test_mixed_line_endings_in_one_stream() -> None:
    assert parse_sse("data: a\r\ndata: b\rdata: c\n\r\nevent: e\rdata: d\r\r") == [
        SSEEvent(None, "a\nb\nc"),
        SSEEvent("e", "d"),
    ]


def test_data_lines_join_with_newline_and_keep_inner_spaces() -> None:
    text = "data: first\ndata:second\ndata:  indented\ndata\ndata: last\n\n"
    assert parse_sse(text) == [SSEEvent(None, "first\nsecond\n indented\n\nlast")]


def test_comments_unknown_fields_and_ids_are_ignored() -> None:
    text = ": ping\nid: 7\nretry: 100\nfoo: bar\ndata: x\n\n:\n\n"
    assert parse_sse(text) == [SSEEvent(None, "x")]


def test_event_without_data_is_not_dispatched() -> None:
    assert parse_sse("event: ping\n\ndata: y\n\n") == [SSEEvent(None, "y")]


def test_event_name_does_not_leak_into_the_next_event() -> None:
    assert parse_sse("event: a\ndata: 1\n\ndata: 2\n\n") == [
        SSEEvent("a", "1"),
        SSEEvent(None, "2"),
    ]


def test_unfinished_event_at_end_of_stream_is_dropped() -> None:
    assert parse_sse("data: done\n\ndata: cut off") == [SSEEvent(None, "done")]
    assert parse_sse("data: done\n\ndata: no blank line\n") == [SSEEvent(None, "done")]


def test_crlf_split_between_chunks_is_one_line_break() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\r") == []
    assert decoder.feed(b"\ndata: b\n\n") == [SSEEvent(None, "a"), SSEEvent(None, "b")]
    assert decoder.close() == []


def test_trailing_cr_is_settled_by_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r\r") == []
    assert decoder.close() == [SSEEvent(None, "x")]


def test_utf8_character_split_between_chunks() -> None:
    raw = "data: 北京😀\n\n".encode()
    chunks = [raw[:7], raw[7:8], raw[8:12], raw[12:]]
    assert feed_all(chunks) == [SSEEvent(None, "北京😀")]


def test_byte_order_mark_is_dropped_once() -> None:
    raw = "\ufeffdata: a\n\n".encode()
    assert feed_all([raw[:1], raw[1:]]) == [SSEEvent(None, "a")]
    assert parse_sse("\ufeff\ufeffdata: a\n\n") == []


def test_invalid_utf8_becomes_replacement_character() -> None:
    assert feed_all([b"data: \xff\n\n"]) == [SSEEvent(None, "\ufffd")]


def test_decoder_is_reusable_after_close() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: half")
    decoder.close()
    assert decoder.feed(b"data: whole\n\n") == [SSEEvent(None, "whole")]


def test_events_json_skips_done_and_empty_data() -> None:
    text = 'data: {"a": 1}\n\ndata:\n\ndata: [DONE]\n\n'
    assert events_json(text) == [{"a": 1}]


def test_events_json_keeps_order_and_unicode() -> None:
    payloads = events_json(ANTHROPIC_LIKE)
    assert [p["type"] for p in payloads] == ["message_start", "ping", "content_block_delta"]
    assert payloads[2]["delta"]["text"] == "北京"


def test_events_json_names_the_event_that_is_not_json() -> None:
    with pytest.raises(DecodeError) as info:
        events_json('data: {"ok": true}\n\ndata: {oops\n\n')
    assert info.value.path == "events[1].data"


def test_events_json_rejects_non_object_payloads() -> None:
    with pytest.raises(DecodeError, match="expected a JSON object, got list"):
        events_json("data: [1, 2]\n\n")


def test_done_is_an_ordinary_event_for_the_decoder() -> None:
    assert parse_sse("data: [DONE]\n\n") == [SSEEvent(None, "[DONE]")]


line_text = st.text(
    alphabet=st.sampled_from(list('ab :é北😀\ufeff\x00{}"')) | st.characters(codec="utf-8"),
    max_size=12,
).filter(lambda s: "\r" not in s and "\n" not in s)
eols = st.sampled_from(["\n", "\r", "\r\n"])


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[str, list[SSEEvent]]:
    """A well-formed stream and the events it must give."""
    lines: list[str] = []
    expected: list[SSEEvent] = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            lines.append(":" + draw(line_text))
        name = draw(st.none() | line_text.filter(lambda s: s.strip() == s and s != ""))
        if name is not None:
            lines.append(f"event: {name}")
        data = draw(st.lists(line_text, min_size=1, max_size=3))
        lines.extend(f"data: {line}" for line in data)
        lines.append("")
        expected.append(SSEEvent(name, "\n".join(data)))
    text = ""
    for line in lines:
        eol = draw(eols)
        if not line and eol == "\n" and text.endswith("\r"):
            eol = "\r"  # CR then LF would be one line break, not a blank line
        text += line + eol
    return text, expected


def split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(raw)) for c in cuts})
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


@settings(max_examples=150, deadline=None)
@given(event_streams(), st.lists(st.integers(0, 400), max_size=30))
def test_any_split_of_a_well_formed_stream_gives_its_events(
    stream: tuple[str, list[SSEEvent]], cuts: list[int]
) -> None:
    text, expected = stream
    assert parse_sse(text) == expected
    assert feed_all(split(text.encode(), cuts)) == expected


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("data:event \r\n北😀x")), max_size=120),
    st.lists(st.integers(0, 400), max_size=30),
)
def test_any_split_of_any_text_gives_the_same_events_as_the_whole(
    text: str, cuts: list[int]
) -> None:
    raw = text.encode()
    assert feed_all(split(raw, cuts)) == feed_all([raw])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80), st.lists(st.integers(0, 100), max_size=20))
def test_any_split_of_any_bytes_gives_the_same_events_as_the_whole(
    raw: bytes, cuts: list[int]
) -> None:
    assert feed_all(split(raw, cuts)) == feed_all([raw])


def _seconds_to_parse(raw: bytes, chunk: int) -> float:
    decoder = SSEDecoder()
    start = time.perf_counter()
    events = [e for i in range(0, len(raw), chunk) for e in decoder.feed(raw[i : i + chunk])]
    elapsed = time.perf_counter() - start
    assert len(events) == 1 and len(events[0].data) == len(raw) - len("data: \n\n")
    return elapsed


def test_a_long_event_in_small_chunks_costs_time_in_proportion_to_its_size() -> None:
    """The parser's work on a chunk may not depend on how much it holds already: a 1 MB event
    in 1 KB chunks once took seconds (4 MB: minutes), rescanning the whole buffer for a line
    end each time."""
    raw = b"data: " + b"x" * 4_000_000 + b"\n\n"  # rescanning: 8 GB read, minutes
    fastest = min(_seconds_to_parse(raw, 1024) for _ in range(2))
    assert fastest < 10.0  # a guard against the quadratic path, not a speed target
