"""Parsed JSON as the dataclass it must be: every field of its declared type, or WrongType naming the field.
A parser is built once per type, so a plan of 8,000 shards is checked in tens of milliseconds; the path to a
wrong field is worked out only when one is found.
"""
from __future__ import annotations

import enum
import json
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any, Callable, Union

Parser = Callable[[Any], Any]


class WrongType(ValueError):
    """A JSON value not of its declared type: `path` (`inputs[0].read`) and what is wrong with it."""

    def __init__(self, what: str, path: str = "") -> None:
        super().__init__(f"{path or 'it'} {what}")
        self.what, self.path = what, path

    def inside(self, step: str) -> "WrongType":
        """The same complaint, seen from the object or list that holds the value (`step`: its key or `[i]`)."""
        joined = step + ("" if not self.path or self.path.startswith("[") else ".") + self.path
        return WrongType(self.what, joined)


def parse_as(tp: Any, value: Any, where: str = "") -> Any:
    """`value` (parsed JSON) as type `tp`, built of dataclasses, scalars, unions, lists, tuples, dict[str, X],
    Enums (by value) and Any (`where`: the name of `value`, for the message)."""
    try:
        return _parser(tp)(value)
    except WrongType as exc:
        raise (exc.inside(where) if where else exc) from None


@cache
def _parser(tp: Any) -> Parser:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is dict and not args:
        return _any if tp is Any else _dict_parser(_any)
    if is_dataclass(tp):
        return _object_parser(tp)
    if origin in (Union, types.UnionType):
        return _union_parser(args)
    if origin is list or origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _list_parser(_parser(args[0]), origin)
    if origin is tuple:
        return _tuple_parser(tuple(_parser(a) for a in args), _name(tp))
    if origin is dict:
        return _dict_parser(_parser(args[1]))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_parser(tp)
    return _scalar_parser(tp)


def _any(value: Any) -> Any:
    return value


def _scalar_parser(tp: type) -> Parser:
    accept = {int: (int,), float: (int, float), str: (str,), bool: (bool,), type(None): (type(None),)}[tp]
    expected = _name(tp)

    def parse(value: Any) -> Any:
        if type(value) in accept:  # not isinstance: true is no integer
            return value
        raise _wrong(value, expected)
    return parse


def _enum_parser(tp: type[enum.Enum]) -> Parser:
    expected = " or ".join(json.dumps(m.value) for m in tp)

    def parse(value: Any) -> Any:
        try:
            return tp(value)
        except (ValueError, TypeError):
            raise _wrong(value, expected) from None
    return parse


def _object_parser(cls: type) -> Parser:
    hints = typing.get_type_hints(cls)
    specs = [(f.name, _parser(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
             for f in fields(cls)]

    def parse(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _wrong(value, "an object")
        kwargs = {}
        for name, field_parser, required in specs:
            if name in value:
                try:
                    kwargs[name] = field_parser(value[name])
                except WrongType as exc:
                    raise exc.inside(name) from None
            elif required:
                raise WrongType("is missing", name)
        if len(kwargs) != len(value):
            raise WrongType(f"has a field hplt-shard does not write: {next(k for k in value if k not in kwargs)!r}")
        return cls(**kwargs)
    return parse


def _union_parser(args: tuple) -> Parser:
    nullable = type(None) in args
    options = [_parser(a) for a in args if a is not type(None)]
    expected = " or ".join(_name(a) for a in args)

    def parse(value: Any) -> Any:
        if value is None and nullable:
            return None
        if len(options) == 1:  # X | None: X's own complaint is the precise one
            return options[0](value)
        for option in options:
            try:
                return option(value)
            except WrongType:
                continue
        raise _wrong(value, expected)
    return parse


def _list_parser(item: Parser, kind: type) -> Parser:
    def parse(value: Any) -> Any:
        if type(value) is not list:
            raise _wrong(value, "a list")
        try:
            items = [item(v) for v in value]
        except WrongType:
            raise _first_wrong(item, value) from None
        return items if kind is list else tuple(items)
    return parse


def _tuple_parser(items: tuple[Parser, ...], expected: str) -> Parser:
    def parse(value: Any) -> Any:
        if type(value) is not list or len(value) != len(items):
            raise _wrong(value, expected)
        try:
            return tuple(p(v) for p, v in zip(items, value))
        except WrongType:
            raise _first_wrong(None, value, items) from None
    return parse


def _dict_parser(item: Parser) -> Parser:
    def parse(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _wrong(value, "an object")
        if item is _any:
            return value
        out = {}
        for k, v in value.items():
            try:
                out[k] = item(v)
            except WrongType as exc:
                raise exc.inside(k) from None
        return out
    return parse


def _first_wrong(item: Parser | None, value: list, items: tuple[Parser, ...] = ()) -> WrongType:
    """The complaint about the first element of `value` that its parser refuses, with its index."""
    for i, v in enumerate(value):
        try:
            (item or items[i])(v)
        except WrongType as exc:
            return exc.inside(f"[{i}]")
    return WrongType("is not what it should be")


def _name(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null"}
    return names.get(tp) or ("an object" if is_dataclass(tp) else str(tp).replace("typing.", ""))


def _wrong(value: Any, expected: str) -> WrongType:
    shown = json.dumps(value, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return WrongType(f"is {shown}, not {expected}")
