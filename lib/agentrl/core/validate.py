"""The one validator of settings: a table becomes its settings dataclass with every name, type, allowed value and
range checked, the value's origin in every message.

:func:`from_dict` turns a table into its settings dataclass, checking names, types and a field's allowed values
(``Literal``) and its range: a field's type carries its constraint where the field is declared
(``top_k: AtLeast1 = 3``, ``Annotated[float, Field(gt=0)]``, :data:`ExistingFile`), checked by pydantic, with the
value's origin (agentrl.core.config: ``file:line``, the ``--set`` text, the flag) in the message. A field whose
metadata names a ``Extra`` takes keys the dataclass does not declare (an environment's own table, TRL's config
fields) and checks them through it; one whose metadata names ``moved`` is not a key any more (the library sets it).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from agentrl.core.config import data_file
from agentrl.core.io import DataError

T = TypeVar("T")

# ----------------------------------------------------------------------------- ranges


def _existing(names: tuple[str, ...]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value in names or any(n.endswith(":") and value.startswith(n) for n in names):
            return value
        if Path(value).parts[:1] == ("runs",):  # an earlier phase writes it: the phase reading it checks it
            return value
        # a relative path is found as data_file finds it (the working directory, the repository, the installed wheel)
        if not data_file(value).is_file():
            shown = [f"{n}..." if n.endswith(":") else repr(n) for n in names]
            also = f" or one of {', '.join(shown)}" if names else ""
            raise ValueError(f"no such file {value!r}{also} (a relative path is read from {Path.cwd()}, then from "
                             "the repository or the installed wheel)")
        return value
    return check


def file_or(*names: str) -> Any:
    """Return the type of an input file that must exist when the preset is read, or one of ``names`` (a named
    source; a name ending in ``:`` is a prefix, ``hf:``). A relative path under ``runs/`` is an earlier phase's
    output (``agentrl multihop-rag`` writes ``runs/multihop_rag/``): the phase that reads it says when it is missing."""
    return Annotated[str, AfterValidator(_existing(names))]


# the ranges settings declare, as pydantic constraints on the type: what coerce checks before anything loads
AtLeast0 = Annotated[int, Field(ge=0)]  # a count that may be 0 (0 = none / off, as the field says)
AtLeast1 = Annotated[int, Field(ge=1)]  # a count of at least one
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # a duration, a rate, a scale
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # a weight, a threshold: 0 or more
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # a share or a score threshold in [0, 1]
Finite = Annotated[float, Field(allow_inf_nan=False)]  # any number but inf and nan (a reward weight, a threshold)
ExistingFile = file_or()  # an input file that must exist when the run starts


def at_least(n: int) -> Any:
    """Return the type of whole numbers of at least ``n``."""
    return Annotated[int, Field(ge=n)]


def between(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Any:
    """Return the type of numbers in ``[low, high]`` (an open end excludes it: ``between(0, 1, low_open=True)`` is
    (0, 1])."""
    return Annotated[float, Field(**{"gt" if low_open else "ge": low, "lt" if high_open else "le": high},
                                  allow_inf_nan=False)]


@functools.cache
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp)


_PHRASES = {"greater_than_equal": "must be at least {ge}", "greater_than": "must be greater than {gt}",
            "less_than_equal": "must be at most {le}", "less_than": "must be below {lt}",
            "finite_number": "must be a finite number"}


def check_range(tp: Any, value: Any, where: str) -> Any:
    """Return ``value`` when it satisfies the constraints of ``tp`` (an ``Annotated`` type), else a SettingError at
    ``where`` saying which (pydantic validates; the words are ours: "must be at least 1, got 0")."""
    try:
        _adapter(tp).validate_python(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        phrase = _PHRASES.get(err["type"])
        if phrase is not None:
            ctx = err.get("ctx", {})
            bounds = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in ctx.items()}
            raise SettingError(where, f"{phrase.format(**bounds)}, got {value!r}") from None
        message = str(err.get("ctx", {}).get("error") or err["msg"])
        raise SettingError(where, message.removeprefix("Value error, ")) from None
    return value


# ----------------------------------------------------------------------------- typed settings


class SettingError(DataError):
    """A setting's value is wrong; ``key`` is its dotted path inside the table being read (the location is added by
    :func:`from_dict`)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


class Extra:
    """Keys a settings dataclass takes besides its own fields, collected into one dict field (field metadata
    ``{"extra": Extra(...)}``): an environment's table, TRL's config fields. ``names()`` are the keys it takes (for
    "did you mean"), ``coerce(key, value, path, at)`` returns the checked value or raises KeyError when the key is
    not one of its names (``table`` is the whole table being read)."""

    def names(self) -> list[str]:
        """Return the keys this extra takes."""
        return []

    def type_of(self, key: str) -> Any:
        """Return the type of the value ``key`` takes here (a settings dataclass, a dict, ...), None when unknown."""
        return None

    def coerce(self, key: str, value: Any, path: str, at: Callable[[str], str], table: dict | None = None) -> Any:
        """Return ``value`` checked for ``key`` (KeyError: not a key of this extra); ``table`` is the whole table
        being read."""
        raise KeyError(key)


class Moved(Extra):
    """Keys that moved elsewhere (an Extra that takes none): each is refused with where it went."""

    def __init__(self, moved: dict[str, str]):
        self.moved = moved

    def coerce(self, key: str, value: Any, path: str, at: Callable[[str], str], table: dict | None = None) -> Any:
        """Raise the DataError naming where ``key`` went; KeyError for a key that never existed."""
        if key not in self.moved:
            raise KeyError(key)
        raise DataError(_located(at, path, f"{path} is no longer a key here: use {self.moved[key]}"))


def from_dict(cls: type[T], data: dict | None, where: str = "config", at: Callable[[str], str] | None = None) -> T:
    """Return ``cls(**data)`` with nested dataclasses built recursively, names, types and allowed values checked.

    ``where`` is the table's dotted path (``grpo``); ``at(dotted)`` says where a key was written (``file:line``, a
    ``--set``). A bad key or value raises DataError ``"<at>: <where.key>: <what>"``; an unknown key names the nearest
    valid one. Keys the dataclass does not declare go to its Extra fields (:class:`Extra`), else are unknown.
    """
    at = at or (lambda dotted: "")
    data = dict(data or {})
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    extras = {name: f.metadata["extra"] for name, f in fields.items() if "extra" in f.metadata}
    kwargs: dict[str, Any] = {name: {} for name in extras}
    for name, value in data.items():
        path = f"{where}.{name}"
        if name in fields and "moved" in fields[name].metadata:  # set by the library, not a preset key any more
            raise DataError(_located(at, path, f"{path} is no longer a key here: use {fields[name].metadata['moved']}"))
        if name in fields and name not in extras:
            kwargs[name] = _coerce(hints[name], value, path, at)
            continue
        for field_name, extra in extras.items():
            try:
                kwargs[field_name][name] = extra.coerce(name, value, path, at, data)
                break
            except KeyError:
                continue
        else:
            known = [n for n in fields if n not in extras] + [k for e in extras.values() for k in e.names()]
            unknown(path, known, at)
    try:
        return cls(**kwargs)
    except SettingError as exc:
        path = f"{where}.{exc.key}"
        raise DataError(_located(at, path, f"{path}: {exc}")) from None


def unknown(path: str, known: list[str], at: Callable[[str], str]) -> typing.NoReturn:
    """Raise the DataError of an unknown key ``path`` (dotted), naming the nearest of ``known`` (its siblings)."""
    parent, _, name = path.rpartition(".")
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    shown = sorted(known)
    listed = ", ".join(shown[:25]) + (f", ... ({len(shown)} keys)" if len(shown) > 25 else "")
    hint = f"did you mean '{parent + '.' if parent else ''}{near[0]}'?" if near else f"valid here: {listed}"
    kind = "table" if not parent else "key"
    raise DataError(_located(at, path, f"unknown {kind} '{path}' ({hint})"))


def _located(at: Callable[[str], str], path: str, message: str) -> str:
    where = at(path)
    return f"{where}: {message}" if where else message


def _coerce(tp: Any, value: Any, where: str, at: Callable[[str], str]) -> Any:
    try:
        return coerce(tp, value, where, at)
    except SettingError as exc:  # its key is the dotted path of the value at fault (a dict's entry, a list's item)
        raise DataError(_located(at, exc.key, f"{exc.key}: {exc}")) from None


def coerce(tp: Any, value: Any, where: str, at: Callable[[str], str] | None = None) -> Any:
    """Return ``value`` as type ``tp`` (unions, lists, dicts, ``Literal`` choices, nested dataclasses); a SettingError
    whose key is the dotted path of the value at fault (``where`` or inside it) otherwise."""
    at = at or (lambda dotted: "")
    origin = typing.get_origin(tp)
    if origin is Annotated:  # a type with its range: the value as that type, then the range
        return check_range(tp, coerce(typing.get_args(tp)[0], value, where, at), where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(arg, value, where, at)
            except (SettingError, DataError) as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        # the member of the value's own kind (a list for a list, ...) says best what is wrong with it
        kinds = [a for a in args if a is not type(None)]
        same = [e for a, e in zip(kinds, errors, strict=True) if _same_kind(a, value)]
        if len(same) == 1:
            raise same[0]
        raise SettingError(where, f"expected {_type_name(tp)}, got {value!r}")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.5)
            raise SettingError(where, f"{value!r} is not one of {', '.join(map(repr, choices))}"
                                      + (f" (did you mean {near[0]!r}?)" if near else ""))
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise SettingError(where, f"expected a table, got {value!r}")
        return from_dict(tp, value, where, at)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise SettingError(where, f"expected a list, got {value!r}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [coerce(inner, v, f"{where}[{i}]", at) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise SettingError(where, f"expected a table, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2:
            return {k: coerce(args[1], v, f"{where}.{k}", at) for k, v in value.items()}
        return dict(value)
    if tp is Any or tp is object:
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is bool and isinstance(value, bool):
        return value
    if tp in (int, str) and isinstance(value, tp) and not isinstance(value, bool):
        return value
    if tp is Path and isinstance(value, str | Path):
        return Path(value)
    raise SettingError(where, f"expected {_type_name(tp)}, got {value!r}")


def _same_kind(tp: Any, value: Any) -> bool:
    """Whether ``value`` is of the kind type ``tp`` describes (a list, a table, a scalar)."""
    tp = bare(tp)
    origin = typing.get_origin(tp)
    if isinstance(value, list | tuple):
        return origin in (list, tuple)
    if isinstance(value, dict):
        return origin is dict or tp is dict or dataclasses.is_dataclass(tp)
    return origin not in (list, tuple, dict) and tp is not dict and not dataclasses.is_dataclass(tp)


def bare(tp: Any) -> Any:
    """Return ``tp`` without its range (``Annotated[int, Field(ge=1)]`` -> ``int``)."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def table_valued(tp: Any) -> bool:
    """Whether a field of type ``tp`` holds a table as its value (a dict: rewards, a mixture), which a later layer
    replaces whole, rather than a section of settings (a dataclass) merged key by key."""
    args = [bare(a) for a in typing.get_args(bare(tp))] if typing.get_origin(bare(tp)) in (
        typing.Union, types.UnionType) else [bare(tp)]
    return any(a is dict or typing.get_origin(a) is dict for a in args)


def _type_name(tp: Any) -> str:
    tp = bare(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) in (list, tuple):
        return "a list"
    if typing.get_origin(tp) is dict or tp is dict:
        return "a table"
    return getattr(tp, "__name__", str(tp))
