"""Presets: where they are, their layers merged once, and where each key was written.

A preset is a TOML file in ``configs/`` (``demo``, ``colab_qwen3_4b``, ...) with one table per phase. What a run uses
is the preset file with, in this order and nowhere else, the detected card's ``[gpu.<CARD>]`` tables, the
``--set section.key=value`` overrides (and the command-line flags, which are written as such overrides) and, in a
notebook, the hyperparameter form: :func:`merge` merges these :class:`Layer` s once and remembers which layer wrote
each key, so a bad value is reported where it was written (``file:line``, the ``--set`` text, the form). The values
are checked by agentrl.core.validate, the one validator.

A layer that sets a table-valued setting (a reward table, a mixture, a server's environment: a field typed as a
dict) replaces the earlier layers' table whole, with one line saying what it replaced (:func:`merge`'s ``replaces``);
sections (``[grpo]``, ``[grpo.search]``, ``[grpo.model.lora]``) merge key by key.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.core.io import DataError

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
    keys: tuple[str, ...] | None = None  # a ``--set``'s dotted key: a key inside a table-valued setting, not the table

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
    return Layer(nest(keys, value), f"--set {expr}", keys=tuple(keys))


@dataclasses.dataclass
class Merged:
    """The merged tables of a preset's layers and, for every key path, the layer that wrote it last; ``replaced``:
    one line per table-valued setting a later layer replaced whole."""

    data: dict
    origins: dict[tuple[str, ...], Layer]
    layers: list[Layer]
    replaced: list[str] = dataclasses.field(default_factory=list)

    def at(self, dotted: str) -> str:
        """Return where the key ``dotted`` (or the nearest table holding it) was written."""
        path = tuple(dotted.split("."))
        for n in range(len(path), 0, -1):
            layer = self.origins.get(path[:n])
            if layer is not None:
                return layer.at(path)
        return self.layers[0].where if self.layers else "preset"


def merge(layers: list[Layer], replaces: Callable[[tuple[str, ...]], bool] = lambda path: False) -> Merged:
    """Return the layers merged in order (a later layer's key replaces an earlier one's; sections merge key by key,
    and a table ``replaces(path)`` says is one setting's value, such as a reward table, is replaced whole, with a
    line in ``replaced`` naming what was replaced), with the origin of every key. The one merge of preset values:
    card tables, ``--set`` and the form go through here."""
    data: dict = {}
    origins: dict[tuple[str, ...], Layer] = {}
    replaced: list[str] = []

    def into(dst: dict, src: dict, path: tuple[str, ...], layer: Layer) -> None:
        for k, v in src.items():
            here = (*path, k)
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                inside = layer.keys is not None and len(layer.keys) > len(here)  # --set grpo.search.rewards.format=1
                if inside or not replaces(here):
                    into(dst[k], v, here, layer)  # the table keeps the origin of the layer that made it
                    continue
                if dst[k] != v:
                    dotted = ".".join(here)
                    was = Merged(data, origins, layers).at(dotted)
                    replaced.append(f"{layer.at(here)}: {dotted} = {_inline(v)} replaces {_inline(dst[k])} "
                                    f"({was}) whole; keys it leaves out are not kept")
            dst[k] = _copy(v)
            for old in [p for p in origins if p[:len(here)] == here]:
                del origins[old]
            origins[here] = layer
            if isinstance(v, dict):
                for sub in _leaves(v, here):
                    origins[sub] = layer

    for layer in layers:
        into(data, layer.data, (), layer)
    return Merged(data, origins, list(layers), replaced)


def _inline(table: dict) -> str:
    return "{" + ", ".join(f"{k} = {v!r}" for k, v in table.items()) + "}"


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
