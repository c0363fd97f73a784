"""The one serialization seam: domain events <-> (topic, msgpack payload) (E9, E10, E11, E12).

Events are attrs classes (un)structured by a cattrs converter built from
``cattrs.preconf.msgpack.make_converter()`` and packed with msgpack. The choices, recorded in
ADR-0003:

- the *topic* names the event class with a short stable name (``"turnledger:MessageAppended"``);
  it lives in the record's ``topic`` column, not in the payload;
- the *payload* is a msgpack map of every field except ``originator_id`` and
  ``originator_version`` (they live in the record's columns), plus ``class_version`` when the
  class is at version 2 or later;
- ``ConversationMessage`` is a tagged union: key ``"t"``, values ``"chat"``, ``"calls"``,
  ``"results"`` — stable names, independent of the Python class names;
- datetimes are msgpack Timestamps (extension -1); a naive datetime is refused when encoding,
  and a decoded datetime is always tz-aware UTC;
- UUIDs are 16 raw bytes; StrEnums are their string values; tuples come back as tuples;
  floats are always packed as floats (``1`` and ``1.0`` are equal values, so they must give
  equal bytes: E12);
- decoding is strict: scalars are type-checked rather than coerced (a corrupted ``"7"`` is not
  silently read as ``7``) and unknown keys are refused; the attrs validators of every value run.

Decoding runs the ``upcast_vN_vN+1(state)`` static methods of the class from the recorded
``class_version`` up to the class's current one before structuring (E10). Any failure while
decoding becomes `CorruptRecord` naming the session, the version and the cause in one line
(E11). Encoding is deterministic: the same event always gives the same bytes (E12).
"""

from __future__ import annotations

import enum
import functools
import itertools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final, TypeAlias
from uuid import UUID

import attrs
import cattrs
import msgpack
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.msgpack import make_converter as _make_msgpack_converter
from cattrs.strategies import configure_tagged_union

from turnledger.domain.blocks import BLOCK_TAGS, ContentBlock
from turnledger.domain.budget import AliasMap, Compaction, RuntimeProfile
from turnledger.domain.errors import InvalidMessage, UndecodableRecord, bounded
from turnledger.domain.events import (
    DomainEvent,
    HistoryTrimmed,
    TrimDecided,
    on_registry_change,
    registered_events,
)
from turnledger.domain.messages import (
    AssistantBlock,
    AssistantToolCalls,
    Chat,
    ChatMessage,
    ToolCall,
    ToolResult,
    ToolResults,
)
from turnledger.store.fastdecode import (
    EXACT_SCALARS,
    Decoder,
    TaggedUnion,
    build_decoder,
    build_hook,
)

__all__ = [
    "MESSAGE_TAGS",
    "EventCodec",
    "UndecodableRecord",
    "decode_event",
    "default_codec",
    "describe_error",
    "encode_event",
    "generated_decoder",
    "make_converter",
    "topic_for",
]

TOPIC_PREFIX: Final = "turnledger:"
"""Prefix of every topic of a turnledger event class."""

CLASS_VERSION_KEY: Final = "class_version"
"""Payload key holding the class version of the encoder; absent means version 1."""

MESSAGE_TAG_KEY: Final = "t"
"""Key of the ConversationMessage tag in an encoded message."""

MESSAGE_TAGS: Final[Mapping[type, str]] = types.MappingProxyType(
    {Chat: "chat", AssistantToolCalls: "calls", ToolResults: "results"}
)
"""The stable tag of each ConversationMessage variant. Never change a value: records hold it."""

BLOCK_TAG_KEY: Final = "t"
"""Key of the block tag in an encoded content block (values: `BLOCK_TAGS`, plus ``"tool_call"``
in an assistant message's blocks)."""

_ASSISTANT_BLOCK_TAGS: Final[Mapping[type, str]] = types.MappingProxyType(
    {**BLOCK_TAGS, ToolCall: "tool_call"}
)

# Fields added by issue 8: left out of a payload while they hold their default, so a message
# without blocks or provider fields encodes to the bytes it always had.
_NEW_MESSAGE_FIELDS: Final[Mapping[type, tuple[str, ...]]] = types.MappingProxyType(
    {
        ChatMessage: ("blocks", "extra", "envelope"),
        ToolCall: ("extra",),
        ToolResult: ("blocks", "is_error", "extra"),
        AssistantToolCalls: ("blocks", "extra"),
        RuntimeProfile: ("compaction",),  # issue 24: a default profile encodes as before
        Compaction: ("low_water", "learn_estimate"),  # issue 35: encodes as before without
    }
)

NEW_EVENT_FIELDS: Final[Mapping[type, tuple[str, ...]]] = types.MappingProxyType(
    {
        # Issue 35: left out of a payload while None, so a record made before them reads back
        # as written (None) and encodes to the bytes it had, without a class version step,
        # and a trim's records stay under the size at which a payload is zlib'd (ADR-0031).
        TrimDecided: ("budget", "estimate_correction"),
        HistoryTrimmed: ("tokens_before", "tokens_after", "budget"),
    }
)
"""Event fields added to a class at version 1: omitted from a payload at their default."""

_COLUMN_FIELDS: Final = ("originator_id", "originator_version")

EventType: TypeAlias = type[DomainEvent]


def topic_for(cls: EventType) -> str:
    """The default topic of an event class: ``"turnledger:" + class name``."""
    return TOPIC_PREFIX + cls.__name__


# --- converter ------------------------------------------------------------------------------

def _unstructure_datetime(value: datetime) -> datetime:
    # msgpack packs aware datetimes as Timestamps (exact to the microsecond). A naive one has
    # no instant: refuse it here with a clear message instead of msgpack's generic one.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"cannot encode naive datetime {value.isoformat()}: event times must be "
            "timezone-aware (use datetime.now(UTC))"
        )
    return value


def _structure_datetime(value: object, _: object) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise TypeError(f"expected a msgpack Timestamp, got {type(value).__name__}")
    return value


def _unstructure_uuid(value: UUID) -> bytes:
    return value.bytes


def _structure_uuid(value: object, _: object) -> UUID:
    if isinstance(value, UUID):  # the record's column, handed in by decode_event
        return value
    if isinstance(value, bytes) and len(value) == 16:
        return UUID(bytes=value)
    raise TypeError(f"expected a 16-byte UUID, got {type(value).__name__}")


def _strict(expected: type, convert: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
    """A structure hook that type-checks instead of coercing (``int("7")`` would hide rot)."""
    name = expected.__name__

    def hook(value: object, _: object) -> Any:
        if type(value) is expected:
            return value
        if convert is not None and type(value) is int:
            return convert(value)
        raise TypeError(f"expected {name}, got {type(value).__name__}")

    return hook


def _structure_enum(base: type) -> Callable[[Any, Any], Any]:
    def hook(value: object, cls: Callable[[object], Any]) -> Any:
        if type(value) is not base:
            raise TypeError(f"expected {base.__name__}, got {type(value).__name__}")
        return cls(value)

    return hook


def _is_float_type(type_: object) -> bool:
    return type_ is float or type_ == (float | None)


def _unstructure_float(value: float | None) -> float | None:
    # RuntimeProfile accepts an int ratio (1 means 1.0); packing it as an int would give two
    # byte strings for two equal events (E12).
    return None if value is None else float(value)


def _is_homogeneous_tuple(type_: object) -> bool:
    args = typing.get_args(type_)
    return typing.get_origin(type_) is tuple and len(args) == 2 and args[1] is Ellipsis


def _homogeneous_tuple_hook(
    type_: object, converter: cattrs.Converter
) -> Callable[[Any, Any], tuple[Any, ...]]:
    # cattrs' generic tuple hook re-inspects the type on every call; the element hook is
    # resolved once here, which halves the cost of decoding a message with tool calls.
    item_type = typing.get_args(type_)[0]
    item_hook = converter.get_structure_hook(item_type)
    # For the scalar types, whose strict hook returns a value of exactly that type unchanged,
    # one pass over the types replaces a hook call per item (a snapshot holds tens of
    # thousands of ints); anything else still goes item by item, for the error it names.
    exact = {item_type} if item_type in EXACT_SCALARS else None

    def hook(value: object, _: object) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected an array, got {type(value).__name__}")
        if exact is not None and exact.issuperset(map(type, value)):
            return tuple(value)
        return tuple([item_hook(item, item_type) for item in value])

    return hook


def _unstructure_alias_map(value: AliasMap) -> dict[str, list[object]]:
    # AliasMap is sorted by key, so equal maps pack to equal bytes (E12).
    return {key: [alias.model, alias.context_window] for key, alias in value.items()}


def _structure_alias_map(value: object, _: object) -> AliasMap:
    if not isinstance(value, dict):
        raise TypeError(f"expected a map of aliases, got {type(value).__name__}")
    pairs: list[tuple[str, tuple[str, int | None]]] = []
    for key, target in value.items():
        if not isinstance(target, list | tuple) or len(target) != 2:
            raise TypeError(f"alias {key!r}: expected [model, context_window]")
        model, window = target
        pairs.append((key, (model, window)))
    return AliasMap(pairs)


def make_converter(*, detailed_validation: bool = False) -> cattrs.Converter:
    """The cattrs converter of turnledger values and events (see the module docstring).

    Built fresh on every call; `default_codec` keeps one. ``detailed_validation`` makes errors
    carry the path of the offending field, at about 3 µs per event: the codec decodes with a
    plain converter and builds a detailed one only to explain a failure.
    """
    converter = _make_msgpack_converter(
        forbid_extra_keys=True, detailed_validation=detailed_validation
    )
    converter.register_unstructure_hook(datetime, _unstructure_datetime)
    converter.register_structure_hook(datetime, _structure_datetime)
    converter.register_unstructure_hook(UUID, _unstructure_uuid)
    converter.register_structure_hook(UUID, _structure_uuid)
    converter.register_structure_hook(int, _strict(int))
    converter.register_structure_hook(str, _strict(str))
    converter.register_structure_hook(bool, _strict(bool))
    converter.register_structure_hook(bytes, _strict(bytes))
    converter.register_structure_hook(float, _strict(float, float))
    # Class hooks dispatch on the MRO: without these, StrEnum fields would take the str hook
    # above and decode as plain strings (TrimReason.TURN_LIMIT == "turn_limit", but not `is`).
    converter.register_structure_hook(enum.StrEnum, _structure_enum(str))
    converter.register_structure_hook(enum.IntEnum, _structure_enum(int))
    converter.register_unstructure_hook_func(_is_float_type, _unstructure_float)
    converter.register_structure_hook_factory(_is_homogeneous_tuple, _homogeneous_tuple_hook)
    converter.register_unstructure_hook(AliasMap, _unstructure_alias_map)
    converter.register_structure_hook(AliasMap, _structure_alias_map)
    _configure_messages(converter)
    return converter


_MESSAGE_UNION: Final = Chat | AssistantToolCalls | ToolResults
_OPTIONAL_MESSAGE_ARGS: Final = frozenset({*MESSAGE_TAGS, type(None)})

# What the generated decoders must know of the converter configured below (ADR-0052): its
# tagged unions and the fields it never reads. Keep in step with `_configure_blocks` and
# `_configure_messages`; the property tests compare both paths on every event class.
_FAST_UNIONS: Final[Mapping[object, TaggedUnion]] = types.MappingProxyType({
    _MESSAGE_UNION: TaggedUnion(
        MESSAGE_TAG_KEY, {tag: cls for cls, tag in MESSAGE_TAGS.items()}
    ),
    ContentBlock: TaggedUnion(BLOCK_TAG_KEY, {tag: cls for cls, tag in BLOCK_TAGS.items()}),
    AssistantBlock: TaggedUnion(
        BLOCK_TAG_KEY, {tag: cls for cls, tag in _ASSISTANT_BLOCK_TAGS.items()}
    ),
})
_FAST_OMITTED: Final[Mapping[type, frozenset[str]]] = types.MappingProxyType(
    {ChatMessage: frozenset({"item"})}
)


def generated_decoder(type_: object, converter: cattrs.Converter) -> Callable[[Any], Any]:
    """The function generated to structure a value of ``type_`` that is not an event (a
    snapshot's body, ADR-0060, ADR-0074), like the events' decoders (ADR-0052).

    ``converter`` is one `make_converter` built, maybe with hooks of its own added for types
    this module does not configure; the function calls its hooks for the types it does not
    check inline. It raises on anything it does not vouch for, naming the field when it can.
    """
    return build_hook(type_, converter, unions=_FAST_UNIONS, omitted=_FAST_OMITTED)


def _is_optional_message(type_: object) -> bool:
    return frozenset(typing.get_args(type_)) == _OPTIONAL_MESSAGE_ARGS


def _configure_blocks(converter: cattrs.Converter) -> None:
    """Content blocks as tagged unions; the new message fields omitted at their default.

    ``ChatMessage.item`` is never stored: a session records the item itself
    (`turnledger.domain.messages.classify_appended`).
    """
    for cls in BLOCK_TAGS:
        converter.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True)
        )
    for union, tags in ((ContentBlock, BLOCK_TAGS), (AssistantBlock, _ASSISTANT_BLOCK_TAGS)):
        configure_tagged_union(
            union,
            converter,
            tag_generator=lambda cls, tags=tags: tags[cls],  # type: ignore[misc]
            tag_name=BLOCK_TAG_KEY,
        )
    for cls, names in _NEW_MESSAGE_FIELDS.items():
        fields = {name: override(omit_if_default=True) for name in names}
        if cls is ChatMessage:
            fields["item"] = override(omit=True)
            converter.register_structure_hook(
                cls, make_dict_structure_fn(
                    cls, converter, item=override(omit=True),
                    _cattrs_forbid_extra_keys=True,
                )
            )
        converter.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, converter, **fields)  # type: ignore[arg-type]
        )



def _configure_messages(converter: cattrs.Converter) -> None:
    """ConversationMessage as a tagged union; ``ConversationMessage | None`` keeps the tag."""
    _configure_blocks(converter)
    configure_tagged_union(
        _MESSAGE_UNION,
        converter,
        tag_generator=lambda cls: MESSAGE_TAGS[cls],
        tag_name=MESSAGE_TAG_KEY,
    )
    tagged_structure = converter.get_structure_hook(_MESSAGE_UNION)
    tagged_unstructure = converter.get_unstructure_hook(_MESSAGE_UNION)
    known_tags = frozenset(MESSAGE_TAGS.values())

    def structure_message(value: object, type_: object) -> Any:
        # cattrs would report an unknown tag as a missing field; say what is wrong instead.
        if not isinstance(value, dict):
            raise TypeError(f"expected a message map, got {type(value).__name__}")
        tag = value.get(MESSAGE_TAG_KEY)
        if tag not in known_tags:
            raise ValueError(f"unknown message tag {tag!r}")
        return tagged_structure(value, type_)

    def structure_optional(value: object, type_: object) -> Any:
        return None if value is None else structure_message(value, _MESSAGE_UNION)

    def unstructure_optional(value: object) -> Any:
        return None if value is None else tagged_unstructure(value)

    converter.register_structure_hook(_MESSAGE_UNION, structure_message)
    # Without these, cattrs treats `ConversationMessage | None` as a new union and drops the tag.
    converter.register_structure_hook_func(_is_optional_message, structure_optional)
    converter.register_unstructure_hook_func(_is_optional_message, unstructure_optional)


# --- errors ---------------------------------------------------------------------------------

def _format_exception(error: BaseException, _type: object) -> str:
    # cattrs' default text drops the message of a validator ("invalid value"); keep it, since
    # it names the offending field (InvalidMessage, InvalidProfile).
    if isinstance(error, KeyError):
        return "required field missing"
    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        return f"extra fields found ({', '.join(sorted(error.extra_fields))})"
    return _name_and_text(error)


def _name_and_text(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def describe_error(error: BaseException) -> str:
    """One line that says why a record could not be decoded (the cause part of CorruptRecord)."""
    if isinstance(error, cattrs.BaseValidationError):
        details = cattrs.transform_error(error, format_exception=_format_exception)
        text = "; ".join(details) if details else str(error)
    else:
        text = _name_and_text(error)
    return bounded(" ".join(text.split()))


# --- codec ----------------------------------------------------------------------------------

@attrs.frozen
class _EventClass:
    cls: EventType
    topic: str
    class_version: int
    unstructure: Callable[[Any], dict[str, Any]]
    structure: Callable[[Any, Any], Any]
    fast: Decoder | None = None
    """The generated decoder tried first (ADR-0052); None: the converter reads every record."""


class EventCodec:
    """Encodes events to (topic, payload) and back, for a registry of event classes.

    ``event_types`` is either classes (topic = ``"turnledger:" + class name``) or a mapping
    ``topic -> class`` for explicit topics; None: the registered ones (`registered_events`).
    Raises ``ValueError`` when two classes share a topic or when a topic is a prefix of another
    one: the hash chain (ADR-0004) hashes the topic and the payload back to back, and
    prefix-free topics keep that concatenation unambiguous.
    """

    def __init__(
        self,
        event_types: Iterable[EventType] | Mapping[str, EventType] | None = None,
        *,
        converter: cattrs.Converter | None = None,
    ) -> None:
        if event_types is None:
            event_types = registered_events()
        if isinstance(event_types, Mapping):
            pairs = list(event_types.items())
        else:
            pairs = [(topic_for(cls), cls) for cls in event_types]
        self.converter = converter if converter is not None else make_converter()
        self._custom_converter = converter is not None
        self._explainer: cattrs.Converter | None = None
        self._by_topic: dict[str, _EventClass] = {}
        self._by_class: dict[type, _EventClass] = {}
        for topic, cls in pairs:
            self._register(topic, cls)
        _check_prefix_free(self._by_topic)

    def _register(self, topic: str, cls: EventType) -> None:
        if not topic:
            raise ValueError(f"empty topic for {cls.__qualname__}")
        if topic in self._by_topic:
            raise ValueError(f"topic {topic!r} is used by two event classes")
        if cls in self._by_class:
            raise ValueError(f"{cls.__qualname__} is registered under two topics")
        class_version = getattr(cls, "class_version", 1)
        if type(class_version) is not int or class_version < 1:
            raise ValueError(f"{cls.__qualname__}.class_version must be an int >= 1")
        for step in range(1, class_version):
            if not callable(getattr(cls, f"upcast_v{step}_v{step + 1}", None)):
                raise ValueError(f"{cls.__qualname__} lacks upcast_v{step}_v{step + 1}")
        attrs.resolve_types(cls)
        omit = {name: override(omit=True) for name in _COLUMN_FIELDS}
        omit |= {name: override(omit_if_default=True) for name in NEW_EVENT_FIELDS.get(cls, ())}
        entry = _EventClass(
            cls=cls,
            topic=topic,
            class_version=class_version,
            unstructure=make_dict_unstructure_fn(cls, self.converter, **omit),  # type: ignore[arg-type]
            structure=self.converter.get_structure_hook(cls),
            fast=self._fast_decoder(cls),
        )
        self._by_topic[topic] = entry
        self._by_class[cls] = entry

    def _fast_decoder(self, cls: EventType) -> Decoder | None:
        """The generated decoder of ``cls`` for this codec's converter (ADR-0052); none for a
        converter passed in, whose hooks this module did not configure."""
        if self._custom_converter:
            return None
        return build_decoder(cls, self.converter, unions=_FAST_UNIONS, omitted=_FAST_OMITTED)

    @property
    def topics(self) -> tuple[str, ...]:
        """Every registered topic, in registration order."""
        return tuple(self._by_topic)

    def topic_of(self, cls: type) -> str:
        """The topic of a registered event class; ``TypeError`` when it is not registered."""
        try:
            return self._by_class[cls].topic
        except KeyError:
            raise TypeError(f"{cls.__qualname__} is not a registered event class") from None

    def encode_event(self, event: DomainEvent) -> tuple[str, bytes]:
        """(topic, payload) of one event; deterministic (E12).

        Raises `InvalidMessage` for a text that has no UTF-8 form (a lone surrogate),
        ``TypeError`` for an unregistered class, ``ValueError`` for a naive datetime or an
        integer msgpack cannot hold (beyond 64 bits). Nothing is stored then.
        """
        return self._encode(event, msgpack.Packer(datetime=True))

    def encode_events(self, events: Iterable[DomainEvent]) -> list[tuple[str, bytes]]:
        """`encode_event` of each event, in order: the same bytes, one msgpack packer for the
        batch (a packer costs more to build than a message event costs to pack)."""
        packer = msgpack.Packer(datetime=True)
        return [self._encode(event, packer) for event in events]

    def _encode(self, event: DomainEvent, packer: msgpack.Packer) -> tuple[str, bytes]:
        try:
            entry = self._by_class[type(event)]
        except KeyError:
            raise TypeError(f"{type(event).__qualname__} is not a registered event class") from None
        state = entry.unstructure(event)
        if entry.class_version > 1:
            state[CLASS_VERSION_KEY] = entry.class_version
        try:
            payload: bytes = packer.pack(state)
        except UnicodeEncodeError as error:
            # A lone surrogate (e.g. from a badly decoded tool output) has no UTF-8 form.
            raise InvalidMessage(
                f"cannot record {type(event).__name__}: a text is not valid Unicode "
                f"({error.reason} at index {error.start})"
            ) from None
        except (OverflowError, ValueError, TypeError) as error:
            raise ValueError(
                f"cannot encode {type(event).__name__}: {describe_error(error)}"
            ) from error
        return entry.topic, payload

    def decode_event(
        self, topic: str, payload: bytes, originator_id: UUID, originator_version: int
    ) -> DomainEvent:
        """Rebuild an event from its topic, payload and record columns (E10, E11).

        Upcasts an older payload (``upcast_vN_vN+1`` static methods, each given the state
        dict; one may mutate it in place or return a new dict), then structures it, so the
        attrs validators run. Raises `CorruptRecord` naming the session, the version and the
        cause for an unknown topic, a payload from a newer class version, or any decode error.
        """
        entry = self._by_topic.get(topic)
        if entry is None:
            raise UndecodableRecord(
                originator_id, originator_version, topic, f"unknown event type {topic!r}"
            )
        try:
            state = msgpack.unpackb(payload, timestamp=3)
            if not isinstance(state, dict):
                raise TypeError(f"payload is a {type(state).__name__}, not a map")
            state = self._upcast(entry, state)
        except Exception as error:  # any decode failure is a corrupt record (E11)
            cause = describe_error(error)
            raise UndecodableRecord(originator_id, originator_version, topic, cause) from error
        fast = entry.fast
        if fast is not None and originator_id.__class__ is UUID and (
            originator_version.__class__ is int
        ):
            try:
                decoded: DomainEvent = fast(state, originator_id, originator_version)
            except Exception:  # anything unusual: the converter decides (and explains)
                pass
            else:
                return decoded
        state["originator_id"] = originator_id
        state["originator_version"] = originator_version
        try:
            event: DomainEvent = entry.structure(state, entry.cls)
        except Exception as error:  # wrong types, missing fields, failing validators (E11)
            cause = describe_error(error)
            if not isinstance(error, cattrs.BaseValidationError):
                cause = self._explain(entry.cls, state) or cause
            raise UndecodableRecord(originator_id, originator_version, topic, cause) from error
        return event

    def _explain(self, cls: EventType, state: dict[str, Any]) -> str | None:
        """The cause of a structuring failure, with the path of the field (slow path only)."""
        if self._explainer is None:
            self._explainer = make_converter(detailed_validation=True)
        try:
            self._explainer.structure(state, cls)
        except Exception as error:
            return describe_error(error)
        return None

    @staticmethod
    def _upcast(entry: _EventClass, state: dict[str, Any]) -> dict[str, Any]:
        recorded = state.pop(CLASS_VERSION_KEY, 1)
        if type(recorded) is not int or recorded < 1:
            raise ValueError(f"invalid class_version {recorded!r}")
        if recorded > entry.class_version:
            raise ValueError(
                f"recorded by a newer version of {entry.cls.__qualname__} "
                f"(class_version {recorded} > {entry.class_version})"
            )
        for step in range(recorded, entry.class_version):
            upcast = getattr(entry.cls, f"upcast_v{step}_v{step + 1}")
            result = upcast(state)
            if result is not None:
                state = result
        return state


def _check_prefix_free(by_topic: Mapping[str, object]) -> None:
    ordered = sorted(by_topic)
    for shorter, longer in itertools.pairwise(ordered):
        if longer.startswith(shorter):
            raise ValueError(f"topic {shorter!r} is a prefix of {longer!r}")


@functools.cache
def default_codec() -> EventCodec:
    """The codec of the registered event classes (`registered_events`: `EVENT_TYPES` and what
    `register_event` added), built on first use (not at import) and again after a
    registration. A store keeps the codec it was opened with: register a class first."""
    return EventCodec()


on_registry_change(default_codec.cache_clear)


def encode_event(event: DomainEvent) -> tuple[str, bytes]:
    """(topic, payload) of ``event`` with the default codec; see `EventCodec.encode_event`."""
    return default_codec().encode_event(event)


def decode_event(
    topic: str, payload: bytes, originator_id: UUID, originator_version: int
) -> DomainEvent:
    """Rebuild an event with the default codec; see `EventCodec.decode_event`."""
    return default_codec().decode_event(topic, payload, originator_id, originator_version)

