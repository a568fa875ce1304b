"""Presets and typed settings: a preset's layers merged once, every key and value checked where it was written.

A preset is a TOML file in ``configs/`` (``demo``, ``colab_qwen3_4b``, ...) with one table per phase. What a run uses
is the preset file with, in this order and nowhere else, the detected card's ``[gpu.<CARD>]`` tables, the
``--set section.key=value`` overrides (and the command-line flags, which are written as such overrides) and, in a
notebook, the hyperparameter form: :func:`merge` merges these :class:`Layer` s once and remembers which layer wrote
each key, so a bad value is reported where it was written (``file:line``, the ``--set`` text, the form).
:func:`from_dict` turns a table into its settings dataclass, checking names, types and a field's allowed values
(``Literal``); a field whose metadata names a ``Extra`` takes keys the dataclass does not declare (an environment's
own table, TRL's config fields) and checks them through it.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from agentrl.core.io import DataError

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[3]  # lib/agentrl/core/config.py
# an installed wheel carries configs/ and data/samples/ here (pyproject.toml: force-include); a checkout has none
BUNDLED = Path(__file__).resolve().parents[1] / "_bundled"
ROOTS = (REPO_ROOT, BUNDLED)


def preset_path(name_or_path: str | Path) -> Path:
    """Return the TOML file for a preset name (``configs/<name>.toml``) or an explicit path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise DataError(f"{p}: config file not found")
        return p
    for root in (Path.cwd(), *ROOTS):
        candidate = root / "configs" / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    known = sorted({f.stem for root in (Path.cwd(), *ROOTS) for f in (root / "configs").glob("*.toml")})
    raise DataError(f"unknown preset '{name_or_path}' (known: {', '.join(known) or 'none'})")


def data_file(path: str | Path) -> Path:
    """Return ``path`` when it exists; a relative path that does not exist from the working directory is looked up
    from the repository root, then from the installed wheel's copy (the bundled ``data/samples/`` files, from any
    directory). Returns the path as given when none exists, so the error names what the user wrote."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    for root in ROOTS:
        if (root / p).exists():
            return root / p
    return p


# ----------------------------------------------------------------------------- layers


@dataclasses.dataclass(frozen=True)
class Layer:
    """One source of preset values: the file, a card's table in it, a ``--set``, the notebook form. ``prefix`` is
    where ``data`` sits in ``text`` (a card's table ``gpu.T4`` is written under that prefix in the file)."""

    data: dict
    where: str
    text: str | None = None
    prefix: tuple[str, ...] = ()

    def at(self, path: tuple[str, ...]) -> str:
        """Return where ``path`` (a key inside ``data``) was written: ``file:line`` when the line is known."""
        if self.text is None:
            return self.where
        line = key_line(self.text, ".".join((*self.prefix, *path)))
        return f"{self.where}:{line}" if line else self.where


def read_preset(name_or_path: str | Path) -> Layer:
    """Return the preset file as a Layer (its tables, its path, its text for line numbers)."""
    path = preset_path(name_or_path)
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: invalid TOML ({exc})") from None
    return Layer(data, str(path), text)


def parse_set(expr: str) -> tuple[list[str], Any]:
    """Return ``(keys, value)`` of a ``section.key=value`` override; the value is read as a TOML value
    (``2``, ``1e-4``, ``true``, ``"text"``, ``[1, 2]``, ``{a = 1}``), and a bare word that is not one
    (``sequence``) as that string."""
    key, sep, raw = expr.partition("=")
    keys = [k.strip() for k in key.strip().split(".")]
    if not sep or not all(keys) or len(keys) < 2:
        raise DataError(f"--set {expr}: expected section.key=value (e.g. grpo.max_steps=2)")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return keys, value


def nest(keys: list[str] | tuple[str, ...], value: Any) -> dict:
    """Return ``{keys[0]: {keys[1]: ... value}}``."""
    out: Any = value
    for k in reversed(keys):
        out = {k: out}
    return out


def set_layer(expr: str) -> Layer:
    """Return the Layer of one ``--set section.key=value`` override."""
    keys, value = parse_set(expr)
    return Layer(nest(keys, value), f"--set {expr}")


@dataclasses.dataclass
class Merged:
    """The merged tables of a preset's layers and, for every key path, the layer that wrote it last."""

    data: dict
    origins: dict[tuple[str, ...], Layer]
    layers: list[Layer]

    def at(self, dotted: str) -> str:
        """Return where the key ``dotted`` (or the nearest table holding it) was written."""
        path = tuple(dotted.split("."))
        for n in range(len(path), 0, -1):
            layer = self.origins.get(path[:n])
            if layer is not None:
                return layer.at(path)
        return self.layers[0].where if self.layers else "preset"


def merge(layers: list[Layer]) -> Merged:
    """Return the layers merged in order (a later layer's key replaces an earlier one's; tables merge key by key),
    with the origin of every key. The one merge of preset values: card tables, ``--set`` and the form go through
    here."""
    data: dict = {}
    origins: dict[tuple[str, ...], Layer] = {}

    def into(dst: dict, src: dict, path: tuple[str, ...], layer: Layer) -> None:
        for k, v in src.items():
            here = (*path, k)
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                into(dst[k], v, here, layer)  # the table keeps the origin of the layer that made it
                continue
            dst[k] = _copy(v)
            for old in [p for p in origins if p[:len(here)] == here]:
                del origins[old]
            origins[here] = layer
            if isinstance(v, dict):
                for sub in _leaves(v, here):
                    origins[sub] = layer

    for layer in layers:
        into(data, layer.data, (), layer)
    return Merged(data, origins, list(layers))


def _leaves(table: dict, path: tuple[str, ...]):
    for k, v in table.items():
        yield (*path, k)
        if isinstance(v, dict):
            yield from _leaves(v, (*path, k))


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


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
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    extras = {name: f.metadata["extra"] for name, f in fields.items() if "extra" in f.metadata}
    kwargs: dict[str, Any] = {name: {} for name in extras}
    for name, value in data.items():
        path = f"{where}.{name}"
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
    origin = typing.get_origin(tp)
    if isinstance(value, list | tuple):
        return origin in (list, tuple)
    if isinstance(value, dict):
        return origin is dict or tp is dict or dataclasses.is_dataclass(tp)
    return origin not in (list, tuple, dict) and tp is not dict and not dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) in (list, tuple):
        return "a list"
    if typing.get_origin(tp) is dict or tp is dict:
        return "a table"
    return getattr(tp, "__name__", str(tp))


def key_line(text: str, dotted: str) -> int | None:
    """Return the 1-based line of TOML ``text`` where the key (or table) ``dotted`` is written, or where the
    nearest enclosing table or key that holds it is (an inline table, a dotted key); None when nothing matches."""
    target = dotted.split(".")
    best, best_len = None, 0
    table: list[str] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith(("'", '"')) else raw.strip()
        if line.startswith("["):
            table = [p.strip().strip('"').strip("'") for p in line.strip("[]").split(".")]
            path = table
        elif "=" in line:
            key = line.split("=", 1)[0].strip()
            path = table + [p.strip().strip('"').strip("'") for p in key.split(".")]
        else:
            continue
        common = 0
        for a, b in zip(path, target, strict=False):
            if a != b:
                break
            common += 1
        if common == len(target):  # the key itself, or the first table inside it (``[gpu.T4.sft]`` for gpu.T4)
            return n
        if common == len(path) and common > best_len:  # a table or key enclosing it (an inline table, ...)
            best, best_len = n, common
    return best


def to_dict(obj: Any) -> dict:
    """Return a dataclass config as a plain dict (for manifests), without the (always empty) ``moved`` fields."""
    return dataclasses.asdict(obj, dict_factory=lambda items: {k: v for k, v in items if k != "moved"})
