"""Presets and typed configs.

A preset is a TOML file in ``configs/`` (``demo``, ``colab_qwen3_4b``, ...) with one table per phase. Each
phase turns its table into a dataclass with :func:`from_dict`, which rejects unknown fields by name, and
command-line flags override single fields afterwards.
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


def load_preset(name_or_path: str | Path) -> dict:
    """Return the parsed preset as a dict (with ``_path`` set to its file)."""
    path = preset_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: invalid TOML ({exc})") from None
    data["_path"] = str(path)
    return data


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
