"""Per-class decoders generated from the attrs field definitions: the codec's fast path.

`turnledger.store.codec` structures events with a cattrs converter (ADR-0003). For a bulk
read that costs more than the msgpack unpacking itself: a hook call and a dispatch per field.
`build_decoder` generates, once per event class, a function that does the same strict checks
inline (``type(value) is int``, no coercion, no unknown key) and calls the class itself, so the
attrs converters and ``__attrs_post_init__`` validators — the domain's rules, kept in one
place — run exactly as on the slow path (ADR-0052).

The contract is one-sided: whenever a generated decoder returns an event, the converter would
have returned an equal one, field for field (``eq=False`` fields included); whenever anything
looks unusual it raises, and the codec falls back to the converter, which decides and explains
(E11). A type it does not know is handed to the converter's own hook for that type, so a new
field type is correct before it is fast.

The source of each generated function is registered with `linecache` under a file name of its
own, as cattrs does for the code it generates: a traceback through one shows its lines
, and each refusal names the field it refused.
"""

from __future__ import annotations

import enum
import linecache
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import attrs
import cattrs

__all__ = ["EXACT_SCALARS", "Decoder", "TaggedUnion", "build_decoder", "build_hook"]

Decoder = Callable[[dict[str, Any], UUID, int], Any]
"""``decoder(state, originator_id, originator_version) -> event``; raises when unsure."""

Hook = Callable[[Any], Any]

_COLUMNS: Final = ("originator_id", "originator_version")
EXACT_SCALARS: Final = (int, str, bool, bytes)
"""The types whose strict structure hook is the identity on a value of exactly that type."""


class _Reject(Exception):
    """The value is not one the fast path vouches for: the converter decides."""


@attrs.frozen
class TaggedUnion:
    """How the converter reads a tagged union (`cattrs.strategies.configure_tagged_union`):
    the tag's key and each tag's class."""

    key: str
    classes: Mapping[str, type]


class _Builder:
    def __init__(
        self,
        converter: cattrs.Converter,
        unions: Mapping[object, TaggedUnion],
        omitted: Mapping[type, frozenset[str]],
    ) -> None:
        self.converter = converter
        self.unions = unions
        self.omitted = omitted
        self.classes: dict[tuple[type, str | None, bool], Hook] = {}

    # -- one hook per type --

    def hook(self, type_: object) -> Hook:
        if type_ in self.unions:
            union = self.unions[type_]
            if all(self.plain(cls) for cls in union.classes.values()):
                return self.tagged(union)
            return self.delegate(type_)
        args = typing.get_args(type_)
        origin = typing.get_origin(type_)
        if (origin is typing.Union or origin is types.UnionType) and type(None) in args:
            rest = tuple(a for a in args if a is not type(None))
            inner_type: object = rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007
            if len(rest) == 1 or inner_type in self.unions:
                return _optional(self.hook(inner_type))
        if type_ in EXACT_SCALARS:
            return _exact(typing.cast(type, type_))
        if type_ is float:
            return _float
        if type_ is datetime:
            return _datetime
        if type_ is UUID:
            return _uuid
        if isinstance(type_, type) and issubclass(type_, enum.StrEnum | enum.IntEnum):
            return _enum(type_)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return _tuple_of(self.hook(args[0]))
        if isinstance(type_, type) and attrs.has(type_) and self.plain(type_):
            return self.attrs_class(type_)
        return self.delegate(type_)

    def delegate(self, type_: object) -> Hook:
        """The converter's own hook: correct by construction, for the types not handled here."""
        structure = self.converter.get_structure_hook(type_)

        def hook(value: Any) -> Any:
            return structure(value, type_)

        return hook

    def tagged(self, union: TaggedUnion) -> Hook:
        key = union.key
        by_tag = {tag: self.attrs_class(cls, skip=key) for tag, cls in union.classes.items()}

        def hook(value: Any) -> Any:
            if value.__class__ is not dict:
                raise _Reject
            return by_tag[value[key]](value)

        return hook

    @staticmethod
    def plain(cls: type) -> bool:
        """Whether the converter reads ``cls`` by its generated default: every field in
        ``__init__`` under its own name (anything else is left to the converter)."""
        return all(a.init and a.alias == a.name for a in attrs.fields(cls))

    # -- one generated function per attrs class --

    def attrs_class(self, cls: type, *, skip: str | None = None, event: bool = False) -> Hook:
        cache_key = (cls, skip, event)
        found = self.classes.get(cache_key)
        if found is not None:
            return found
        built = self.generate(cls, skip, event)
        self.classes[cache_key] = built
        return built

    def generate(self, cls: type, skip: str | None, event: bool) -> Hook:
        attrs.resolve_types(cls)
        names: dict[str, Any] = {"_cls": cls, "_Reject": _Reject, "_dict": dict}
        lines = ["  if o.__class__ is not _dict:", f"    raise _Reject({cls.__name__!r})",
                 "  kw = {}"]
        required = 0 if skip is None else 1  # the tag is a key of the map, not a field
        lines.append("  n = 0")
        omitted = self.omitted.get(cls, frozenset())
        for index, field in enumerate(attrs.fields(cls)):
            name = field.name
            if name in omitted:
                continue
            if event and name in _COLUMNS:
                lines.append(f"  kw[{name!r}] = {name}")
                continue
            names[f"_h{index}"] = self.hook(field.type)
            convert = self.inline(field.type, index, names, f"{cls.__name__}.{name}")
            if field.default is attrs.NOTHING:
                required += 1
                lines.append(f"  v = o[{name!r}]")
                lines.extend(f"  {line}" for line in convert)
                lines.append(f"  kw[{name!r}] = v")
            else:
                lines.append(f"  if {name!r} in o:")
                lines.append(f"    v = o[{name!r}]")
                lines.extend(f"    {line}" for line in convert)
                lines.append(f"    kw[{name!r}] = v")
                lines.append("    n += 1")
        lines.append(f"  if len(o) != n + {required}:")
        # an unknown key (the converter forbids them)
        lines.append(f"    raise _Reject({cls.__name__ + ': unknown key'!r})")
        lines.append("  return _cls(**kw)")
        params = "o, originator_id, originator_version" if event else "o"
        function = f"decode_{cls.__name__}"
        source = f"def {function}({params}):\n" + "\n".join(lines) + "\n"
        code = compile(source, _source_file(cls, function, source), "exec")
        exec(code, names)  # our own source, generated from the attrs fields
        decoder: Hook = names[function]
        return decoder

    def inline(self, type_: object, index: int, names: dict[str, Any], field: str) -> list[str]:
        """The statements that check (and convert) ``v`` of ``type_`` in place: the checks of
        the commonest types written out (a call per field is most of the cost), the others
        through the type's hook. A refusal names ``field``."""
        refuse = f"  raise _Reject({field!r})"
        optional = _optional_scalar(type_)
        if optional is not None and type_ not in self.unions:
            names[f"_t{index}"] = optional
            return [f"if v is not None and v.__class__ is not _t{index}:", refuse]
        if type_ in EXACT_SCALARS:
            names[f"_t{index}"] = type_
            return [f"if v.__class__ is not _t{index}:", refuse]
        if type_ is datetime:
            names["_datetime"] = datetime
            return ["if v.__class__ is not _datetime or v.tzinfo is None:", refuse]
        if isinstance(type_, type) and issubclass(type_, enum.StrEnum | enum.IntEnum):
            names[f"_t{index}"] = str if issubclass(type_, str) else int
            names[f"_m{index}"] = {member.value: member for member in type_}
            return [f"if v.__class__ is not _t{index}:", refuse, f"v = _m{index}[v]"]
        return [f"v = _h{index}(v)"]


def _source_file(cls: type, function: str, source: str) -> str:
    """The file name under which `linecache` holds ``source``, the generated ``function`` of
    ``cls``: a name of its own, unless the same source already holds one (the decoders of a
    class are generated again by each codec; the cache keeps one copy of each source).

    An entry without a modification time is one `linecache.checkcache` never drops."""
    lines = source.splitlines(keepends=True)
    base = f"<turnledger generated {function} {cls.__module__}.{cls.__qualname__}"
    name, count = base + ">", 1
    while True:
        entry = (len(source), None, lines, name)
        if linecache.cache.setdefault(name, entry) == entry:
            return name
        count += 1
        name = f"{base} #{count}>"


def _optional_scalar(type_: object) -> type | None:
    """``X`` when ``type_`` is ``X | None`` for an exactly checked scalar ``X``."""
    args = typing.get_args(type_)
    origin = typing.get_origin(type_)
    if (origin is typing.Union or origin is types.UnionType) and len(args) == 2:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and rest[0] in EXACT_SCALARS:
            return typing.cast(type, rest[0])
    return None


def _exact(expected: type) -> Hook:
    def hook(value: Any) -> Any:
        if value.__class__ is not expected:
            raise _Reject
        return value

    return hook


def _float(value: Any) -> float:
    if value.__class__ is float:
        return float(value)
    if value.__class__ is int:
        return float(value)
    raise _Reject


def _datetime(value: Any) -> datetime:
    if value.__class__ is not datetime or value.tzinfo is None:
        raise _Reject
    return value


def _uuid(value: Any) -> UUID:
    if value.__class__ is bytes and len(value) == 16:
        return UUID(bytes=value)
    raise _Reject


def _enum(cls: type[enum.Enum]) -> Hook:
    base = str if issubclass(cls, str) else int
    members = {member.value: member for member in cls}

    def hook(value: Any) -> Any:
        if value.__class__ is not base:
            raise _Reject
        return members[value]

    return hook


def _optional(inner: Hook) -> Hook:
    def hook(value: Any) -> Any:
        return None if value is None else inner(value)

    return hook


def _tuple_of(item: Hook) -> Hook:
    def hook(value: Any) -> tuple[Any, ...]:
        if value.__class__ is not list:
            raise _Reject
        return tuple([item(v) for v in value])

    return hook


def build_decoder(
    cls: type,
    converter: cattrs.Converter,
    *,
    unions: Mapping[object, TaggedUnion],
    omitted: Mapping[type, frozenset[str]],
) -> Decoder | None:
    """The fast decoder of event class ``cls``, or None when the converter reads it by a
    hook of its own (then every record of it takes the slow path).

    ``unions``: the tagged unions the converter is configured with (type -> tag key and
    classes); ``omitted``: the fields the converter never reads, per class.
    """
    if not _Builder.plain(cls):
        return None
    builder = _Builder(converter, unions, omitted)
    decoder: Decoder = builder.attrs_class(cls, event=True)  # type: ignore[assignment]
    return decoder


def build_hook(
    type_: object,
    converter: cattrs.Converter,
    *,
    unions: Mapping[object, TaggedUnion],
    omitted: Mapping[type, frozenset[str]],
) -> Hook:
    """The fast structuring function of a value of ``type_`` that is not an event (a
    snapshot's body, ADR-0060), generated as for the events.

    The same one-sided contract as `build_decoder`: when it returns a value, the converter
    would return an equal one; on anything unusual it raises, and the caller asks the
    converter, which decides and explains. ``unions`` and ``omitted`` as for `build_decoder`.
    """
    return _Builder(converter, unions, omitted).hook(type_)
