"""Responses items converted without the round-trip check are exactly the checked ones (ADR-0059).

`exact_openai_responses_item` skips `from_responses_items`' check (ADR-0042) for the item shapes
whose conversion is exact by construction. These properties hold it to the checked path
(`from_openai_responses_item`, `to_openai_responses`) over items of those shapes and of every
near miss (other types and roles, subclasses, tuples, NaN, non-string keys, None, lists where
strings go, odd summaries...): an item it converts gives the very message the checked path
gives (every field, `envelope` included, of the same types: the same stored bytes), and comes
back as a dict equal to the item with values of the same types; `from_responses_items`
accepts, converts and refuses (same error text) exactly as the checked path does.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.integrations import Text, turn_items
from tests.properties import examples
from turnledger.domain.blocks import canonical_json
from turnledger.domain.errors import InvalidMessage
from turnledger.domain.events import MessageAppended
from turnledger.domain.messages import check_appended
from turnledger.domain.providers import (
    exact_openai_responses_item,
    from_openai_responses_item,
    plain,
    to_openai_responses,
)
from turnledger.integrations.openai_agents import from_responses_items
from turnledger.store.codec import encode_event

from .test_codec import NOW, SESSION


class Name(str):
    """A str subclass: equal to its text, not of its type."""


class Count(int):
    """An int subclass."""


# --- strict comparison: equal values of the same types --------------------------------------

def strict(value: object) -> object:
    """``value`` as a nested form whose equality also compares types (and every attrs field,
    those left out of ``==`` included); dicts compare whatever their key order."""
    kind = type(value)
    if attrs.has(kind):
        return (kind, tuple((f.name, strict(getattr(value, f.name))) for f in attrs.fields(kind)))
    if isinstance(value, dict):
        pairs = [(strict(k), strict(v)) for k, v in value.items()]
        return (kind, sorted(pairs, key=repr))
    if isinstance(value, list | tuple):
        return (kind, [strict(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return (kind, "nan")
    return (kind, value)


# --- items: the exact shapes and their near misses ------------------------------------------

texts = st.text(max_size=12)
names = st.sampled_from(["id", "status", "annotations", "logprobs", "type", "role", "content",
                         "call_id", "name", "arguments", "output", "summary",
                         "encrypted_content", "text", "é", 'q"uote', "a\\b", "%s", "{}"])
json_leaves = (st.none() | st.booleans() | st.integers() | texts
               | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names | texts, inner, max_size=3),
    max_leaves=6,
)
odd_values = st.one_of(
    st.builds(Name, texts),
    st.builds(Count, st.integers()),
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(-0.0),
    st.tuples(texts),
    st.dictionaries(st.integers(), texts, min_size=1, max_size=2),
    st.lists(st.tuples(texts), min_size=1, max_size=2),
    st.lists(st.builds(Name, texts), min_size=1, max_size=2),
    st.just(b"bytes"),
    st.just(""),
    st.just([]),
    st.none(),
)
words = st.sampled_from(["input_text", "output_text", "summary_text", "input_image", "message",
                         "reasoning", "function_call", "function_call_output", "user",
                         "assistant", "system", "developer", "tool"])
any_values = st.one_of(st.just(""), words, words, texts, json_values, odd_values)
odd_keys = names | texts | st.builds(Name, names) | st.integers(-2, 2) | st.none()


@st.composite
def extras(draw: st.DrawFn) -> dict[str, Any]:
    """Fields beside the interpreted ones, exact JSON: mostly strings and empty lists, as the
    SDK's (``id``, ``status``, ``annotations``)."""
    if draw(st.booleans()):
        return draw(st.dictionaries(names | texts, texts | st.just([]), max_size=3))
    return draw(st.dictionaries(names | texts, json_values, max_size=3))


def _with_extras(draw: st.DrawFn, base: dict[str, Any], interpreted: tuple[str, ...]) -> Any:
    fields = draw(extras())
    return {**{k: v for k, v in fields.items() if k not in interpreted}, **base}


SHAPES = ("text", "parts", "call", "output", "reasoning")


@st.composite
def exact_items(draw: st.DrawFn, shape: str | None = None) -> dict[str, Any]:
    """An item of one of the exact shapes (exact_openai_responses_item's docstring)."""
    shape = shape or draw(st.sampled_from(SHAPES))
    if shape in ("text", "parts"):
        role = draw(st.sampled_from(["user", "assistant", "system"]))
        kind = "output_text" if role == "assistant" else "input_text"
        content: Any = draw(texts) if shape == "text" else [
            _with_extras(draw, {"type": kind, "text": draw(texts)}, ("type", "text"))
            for _ in range(draw(st.integers(1, 3)))
        ]
        base = {"role": role, "content": content}
        if draw(st.booleans()):
            base["type"] = "message"
        return _with_extras(draw, base, ("role", "content", "type"))
    if shape == "call":
        base = {"type": "function_call", "call_id": draw(st.text(min_size=1, max_size=8)),
                "name": draw(st.text(min_size=1, max_size=8)), "arguments": draw(texts)}
    elif shape == "output":
        base = {"type": "function_call_output", "call_id": draw(st.text(min_size=1, max_size=8)),
                "output": draw(texts)}
    else:
        thinking = draw(texts)
        base = {"type": "reasoning",
                "summary": [{"type": "summary_text", "text": thinking}] if thinking else []}
        if draw(st.booleans()):
            base["encrypted_content"] = draw(texts)
    return _with_extras(draw, base, tuple(base))


def _places(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a nested item."""
    out: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            out += [(value, key), *_places(inner)]
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out += [(value, index), *_places(inner)]
    return out


@st.composite
def near_misses(draw: st.DrawFn, shape: str | None = None) -> Any:
    """An exact item with one change somewhere: a value replaced (by an odd value, another
    type, a subclass, another type name...), a field added or removed."""
    item = draw(exact_items(shape))
    container, key = draw(st.sampled_from(_places(item)))
    change = draw(st.sampled_from(["replace", "add", "remove"]))
    if change == "replace":
        container[key] = draw(any_values)
    elif change == "add" and isinstance(container, dict):
        container[draw(odd_keys)] = draw(any_values)
    elif change == "add" and isinstance(container[key], dict):
        container[key][draw(odd_keys)] = draw(any_values)
    else:
        del container[key]
    return item


@st.composite
def others(draw: st.DrawFn) -> Any:
    """Items of other types (kept whole, checked), and values that are no item at all."""
    kinds = st.sampled_from(["web_search_call", "item_reference", "message", "reasoning"])
    item = {"type": draw(kinds | any_values), "id": draw(texts)}
    item.update(draw(st.dictionaries(odd_keys, any_values, max_size=2)))
    return draw(st.just(item) | any_values)


items = st.one_of(exact_items(), near_misses(), near_misses(), others())


def checked(raw: list[Any]) -> list[Any]:
    """``from_responses_items`` before ADR-0059: every item converted, exported and compared
    (and, since issue 33, held to what an append checks, with the item's index)."""
    out = []
    for i, value in enumerate(raw):
        item = plain(value)
        try:
            converted = from_openai_responses_item(item)
            check_appended(converted)
        except InvalidMessage as error:
            raise InvalidMessage(f"items[{i}]: {error}") from None
        if to_openai_responses((converted,)) != [item]:
            raise InvalidMessage(
                f"items[{i}] (type {item.get('type', 'message')!r}) would not be returned "
                "exactly as it was added; it was not recorded"
            )
        out.append(converted)
    return out


def outcome(convert: Any, raw: list[Any]) -> object:
    try:
        return ("converted", strict(convert(raw)))
    except Exception as error:  # the checked path's errors are not all InvalidMessage
        return ("raised", type(error), str(error))


SETTINGS = settings(max_examples=examples(400), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# --- properties -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@SETTINGS
@given(data=st.data())
def test_e11_an_item_converted_without_the_check_is_the_checked_message_and_comes_back(
    shape: str, data: st.DataObject,
) -> None:
    """exact(i) is None, or exact(i) is from_openai_responses_item(i) field for field, types
    included, and to_openai_responses of it is [i], values of the same types; an item of an
    exact shape is never None."""
    item = data.draw(exact_items(shape) | near_misses(shape) | near_misses(shape))
    converted = exact_openai_responses_item(item)
    if converted is None:
        return
    assert strict(from_openai_responses_item(item)) == strict(converted)
    assert strict([item]) == strict(to_openai_responses((converted,)))


@SETTINGS
@given(st.sampled_from(SHAPES).flatmap(exact_items))
def test_e11_every_item_of_an_exact_shape_takes_the_exact_path(item: Any) -> None:
    """The shapes the docstring names all convert without the check."""
    assert exact_openai_responses_item(item) is not None


@SETTINGS
@given(st.lists(items, max_size=4))
def test_e11_from_responses_items_accepts_converts_and_refuses_as_the_checked_path(
    raw: list[Any],
) -> None:
    """Same messages (types included) for the same items; the same error, same text, for the
    items the checked path refuses."""
    assert outcome(checked, raw) == outcome(from_responses_items, raw)


@SETTINGS
@given(st.dictionaries(st.text(), st.text() | st.just([]), max_size=4), st.text(min_size=1))
def test_e11_extras_of_strings_are_written_as_canonical_json_writes_them(
    fields: dict[str, Any], call_id: str,
) -> None:
    """The extra text written for string and empty-list fields (any characters: quotes,
    backslashes, control characters, surrogates) is canonical_json's."""
    item = {**fields, "type": "function_call", "call_id": call_id, "name": "f", "arguments": ""}
    rest = {k: v for k, v in item.items() if k not in ("type", "call_id", "name", "arguments")}
    converted = exact_openai_responses_item(item)
    assert converted is not None
    ((call,),) = [converted.tool_calls]  # type: ignore[union-attr]
    assert (canonical_json(rest) if rest else "") == call.extra


CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"}
REASONING = {"type": "reasoning", "id": "rs_1",
             "summary": [{"type": "summary_text", "text": "plan"}]}
ANSWER = {"type": "message", "role": "assistant", "id": "m1",
          "content": [{"type": "output_text", "text": "hi", "annotations": []}]}
NEAR_MISSES = [
    {**CALL, "name": ""},
    {**CALL, "call_id": ""},
    {**CALL, "name": Name("f")},
    {**CALL, "arguments": None},
    {**CALL, "id": ("fc_1",)},
    {**CALL, "id": float("nan")},
    {**CALL, "id": float("inf")},
    {**CALL, "id": Count(1)},
    {**CALL, "id": {1: "x"}},
    {**CALL, 1: "x"},
    {**CALL, "id": [["x", ("y",)]]},
    {**CALL, "type": Name("function_call")},
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text",
                                                                  "text": "x"}]},
    {"type": "function_call_output", "call_id": "c1", "output": None},
    {"type": "function_call_output", "call_id": "c1"},
    {**REASONING, "summary": [{"type": "summary", "text": "plan"}]},
    {**REASONING, "summary": [{"type": "summary_text", "text": "plan", "x": 1}]},
    {**REASONING, "summary": [{"type": "summary_text", "text": "a"},
                              {"type": "summary_text", "text": "b"}]},
    {**REASONING, "summary": [{"type": "summary_text", "text": ""}]},
    {**REASONING, "summary": [{"type": "summary_text", "text": Name("plan")}]},
    {**REASONING, "summary": None},
    {**REASONING, "encrypted_content": Name("sig")},
    {**ANSWER, "role": "user"},
    {**ANSWER, "role": "developer"},
    {**ANSWER, "role": "tool"},
    {**ANSWER, "content": [{"type": "input_text", "text": "hi"}]},
    {**ANSWER, "content": [{"type": "refusal", "refusal": "no"}]},
    {**ANSWER, "content": [{"type": "output_text", "text": "hi", "annotations": [("a",)]}]},
    {**ANSWER, "content": []},
    {**ANSWER, "content": None},
    {**ANSWER, "type": None},
    {"role": "user", "content": "hi", "type": "input_text"},
]


@pytest.mark.parametrize("item", NEAR_MISSES, ids=repr)
def test_e11_a_near_miss_is_converted_and_checked(item: Any) -> None:
    """An item just outside the exact shapes takes the checked path, which accepts, converts
    or refuses it as it always did."""
    assert exact_openai_responses_item(item) is None
    assert outcome(checked, [item]) == outcome(from_responses_items, [item])


def test_e11_the_sdks_items_take_the_exact_path() -> None:
    """The items the SDK records in a turn (benchmark turn, SDK dumps) need no check."""
    sdk_turn = [
        {"content": "question 1", "role": "user"},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"id": "rs_1", "summary": [{"text": "plan 1", "type": "summary_text"}],
         "type": "reasoning"},
        {"id": "rs_2", "summary": [], "type": "reasoning", "encrypted_content": "gAAA"},
        {"id": "rs_3", "summary": [], "type": "reasoning", "encrypted_content": None},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": [
            {"type": "url_citation", "start_index": 0, "end_index": 1, "url": "https://x.y",
             "title": "é"}]}, {"type": "output_text", "text": "b"}]},
        {"arguments": '{"q": "q1"}', "call_id": "call_1", "name": "lookup",
         "type": "function_call", "id": "fc_1", "status": "completed"},
        {"call_id": "call_1", "output": "value of q1", "type": "function_call_output"},
        {"id": "msg_2", "content": [{"annotations": [], "logprobs": [], "text": "answer 2",
                                     "type": "output_text"}],
         "role": "assistant", "status": "completed", "type": "message"},
    ]
    for item in [*sdk_turn, *turn_items(7, Text())]:
        assert exact_openai_responses_item(item) is not None, item


def test_e11_messages_converted_without_the_check_are_stored_as_the_checked_ones() -> None:
    """The MessageAppended payload of each benchmark item is byte for byte the checked one."""
    turn = turn_items(3, Text())
    for position, (fast, slow) in enumerate(zip(from_responses_items(turn), checked(turn))):
        assert encode_event(MessageAppended(SESSION, 2, NOW, position, slow)) == encode_event(
            MessageAppended(SESSION, 2, NOW, position, fast)
        )
