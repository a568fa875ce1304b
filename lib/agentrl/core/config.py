"""Presets and typed configs.

A preset is a TOML file in ``configs/`` (``demo``, ``colab_qwen3_4b``, ...) with one table per phase. Each
phase turns its table into a dataclass with :func:`from_dict`, which rejects unknown fields by name, and
command-line flags override single fields afterwards. :func:`load_preset` with a schema (agentrl.app.presets)
checks the whole preset first and applies ``--set section.key=value`` overrides.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from agentrl.core.io import DataError

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[3]  # lib/agentrl/core/config.py


def preset_path(name_or_path: str | Path) -> Path:
    """Return the TOML file for a preset name (``configs/<name>.toml``) or an explicit path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise DataError(f"{p}: config file not found")
        return p
    for root in (Path.cwd(), REPO_ROOT):
        candidate = root / "configs" / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    known = sorted(f.stem for f in (REPO_ROOT / "configs").glob("*.toml"))
    raise DataError(f"unknown preset '{name_or_path}' (known: {', '.join(known) or 'none'})")


def data_file(path: str | Path) -> Path:
    """Return ``path`` when it exists; a relative path that does not exist from the working directory is looked up
    from the repository root too (the bundled ``data/samples/`` files, from any directory). Returns the path as given
    when neither exists, so the error names what the user wrote."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    candidate = REPO_ROOT / p
    return candidate if candidate.exists() else p


def load_preset(name_or_path: str | Path, sets: list[str] | tuple[str, ...] = (), schema: dict | None = None) -> dict:
    """Return the parsed preset as a dict (with ``_path`` set to its file), the ``--set section.key=value``
    overrides ``sets`` applied, and, given a ``schema`` (see :func:`validate_preset`), every table and key checked
    before anything else reads it: an unknown one is a DataError naming the file, the line and the nearest valid
    key."""
    path = preset_path(name_or_path)
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: invalid TOML ({exc})") from None
    if schema is not None:
        validate_preset(data, schema, where=str(path), text=text)
    for expr in sets or ():
        keys, value = parse_set(expr)
        if schema is not None:
            validate_preset(nest(keys, value), schema, where=f"--set {expr}")
        merge_into(data, nest(keys, value))
    if sets and schema is not None:
        validate_preset(data, schema, where=f"{path} with --set")
    data["_path"] = str(path)
    return data


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


def nest(keys: list[str], value: Any) -> dict:
    """Return ``{keys[0]: {keys[1]: ... value}}``."""
    out: Any = value
    for k in reversed(keys):
        out = {k: out}
    return out


def merge_into(base: dict, extra: dict) -> dict:
    """Merge table ``extra`` into ``base`` in place (sub-tables merged key by key) and return ``base``."""
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge_into(base[k], v)
        else:
            base[k] = v
    return base


# A schema maps a table name to what it may hold: a dataclass (its init fields; nested dataclass fields are
# sub-tables), a Keys (a closed set of key names), OPEN (any keys: reward weights, TRL's own fields validated by
# their owner), or a Tables(schema) whose every key is a sub-table validated against ``schema`` (the [gpu.<CARD>]
# overlays). Field metadata {"keys": callable} names the valid keys of a dict field (e.g. TRL's config fields).
OPEN = "open"


@dataclasses.dataclass(frozen=True)
class Keys:
    """A table whose keys are these names."""

    names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Tables:
    """A table of named sub-tables (``names``; empty = any name), each validated against ``schema`` (a callable
    returning it, so a schema may contain itself)."""

    schema: Any
    names: tuple[str, ...] = ()


def validate_preset(data: dict, schema: dict, *, where: str, text: str | None = None, prefix: str = "") -> None:
    """Raise DataError for the first unknown table or key of ``data`` (a preset or an override), naming
    ``where`` (the file), the line of the key in ``text`` when given, and the nearest valid key; then for the first
    value of the wrong type (as the phase's dataclass would refuse it). Returns None."""
    for name, value in data.items():
        if name.startswith("_"):
            continue
        full = f"{prefix}{name}"
        spec = schema.get(name)
        if spec is None:
            _unknown(full, name, [k for k in schema if not k.startswith("_")], where, text)
        _check(spec, value, full, where, text)


def _check(spec: Any, value: Any, full: str, where: str, text: str | None) -> None:
    if spec == OPEN:
        return
    if not isinstance(value, dict):
        if isinstance(spec, Keys | Tables) or dataclasses.is_dataclass(spec):
            raise DataError(f"{_at(where, text, full)}: '{full}' must be a table, got {value!r}")
        return
    if isinstance(spec, Keys):
        for k in value:
            if k not in spec.names:
                _unknown(f"{full}.{k}", k, list(spec.names), where, text)
        return
    if isinstance(spec, Tables):
        for k, sub in value.items():
            if spec.names and k not in spec.names:
                _unknown(f"{full}.{k}", k, list(spec.names), where, text)
            validate_preset(sub if isinstance(sub, dict) else {}, spec.schema(), where=where, text=text,
                            prefix=f"{full}.{k}.")
        return
    fields = {f.name: f for f in dataclasses.fields(spec) if f.init}
    hints = typing.get_type_hints(spec)
    for k, v in value.items():
        if k not in fields:
            _unknown(f"{full}.{k}", k, list(fields), where, text)
        tp = _table_type(hints[k])
        keys_of = fields[k].metadata.get("keys")
        if keys_of is not None and isinstance(v, dict):
            _check(Keys(tuple(keys_of())), v, f"{full}.{k}", where, text)
        elif tp is not None:
            _check(tp, v, f"{full}.{k}", where, text)
    try:
        from_dict(spec, value, full)
    except DataError as exc:  # a value of the wrong type: name the line of the field the message starts with
        field_path = str(exc).split(":", 1)[0]
        raise DataError(f"{_at(where, text, field_path)}: {exc}") from None


def _table_type(tp: Any) -> Any:
    """Return the dataclass a field of type ``tp`` holds (``X | None`` included), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return inner[0] if inner else None
    return None


def _unknown(full: str, name: str, known: list[str], where: str, text: str | None) -> typing.NoReturn:
    import difflib

    near = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    parent = full.rpartition(".")[0]
    hint = (f"did you mean '{parent + '.' if parent else ''}{near[0]}'?" if near
            else f"valid here: {', '.join(sorted(known))}")
    kind = "table" if not parent else "key"
    raise DataError(f"{_at(where, text, full)}: unknown {kind} '{full}' ({hint})")


def _at(where: str, text: str | None, dotted: str) -> str:
    line = key_line(text, dotted) if text else None
    return f"{where}:{line}" if line else where


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


def from_dict(cls: type[T], data: dict | None, where: str = "config") -> T:
    """Return ``cls(**data)`` with nested dataclasses built recursively and types checked.

    Unknown fields and values of the wrong type raise DataError naming ``where.field``.
    """
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise DataError(f"{where}: unknown field '{unknown[0]}' (known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, where: str) -> Any:
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
                return _coerce(arg, value, where)
            except DataError as exc:
                errors.append(exc)
        raise errors[0] if errors else DataError(f"{where}: invalid value {value!r}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise DataError(f"{where}: expected a table, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise DataError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_coerce(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise DataError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is bool and isinstance(value, bool):
        return value
    if tp in (int, str) and isinstance(value, tp) and not isinstance(value, bool):
        return value
    if tp is Path and isinstance(value, str | Path):
        return Path(value)
    raise DataError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def to_dict(obj: Any) -> dict:
    """Return a dataclass config as a plain dict (for manifests)."""
    return dataclasses.asdict(obj)


def override(obj: T, **changes: Any) -> T:
    """Return a copy of dataclass ``obj`` with the non-None ``changes`` applied."""
    return dataclasses.replace(obj, **{k: v for k, v in changes.items() if v is not None})
