"""TRL's config fields, as a preset's ``[sft]`` / ``[grpo]`` / ``[dpo]`` tables are checked against them.

A trainer table's keys are TRL's field names (``per_device_train_batch_size``, ``max_completion_length``,
``importance_sampling_level``, ...) or agentrl's own (agentrl.train.configs). Checking them must not import TRL
(12-16 s here, and on a GPU machine Unsloth has to be imported before it): the installed TRL's fields, their types,
defaults and allowed values are read once in a subprocess and cached on disk per installed version of TRL and
transformers (``~/.cache/agentrl/``), so every command checks a preset in milliseconds and against the TRL it runs.

Allowed values come from the field's type where TRL declares one (transformers' enums: ``lr_scheduler_type``,
``optim``, ``save_strategy``, ...) and, for the string fields TRL only checks inside its training step (after the
model has loaded), from :data:`CHOICES`, which tests/test_trl_fields.py holds against the installed TRL's help texts.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import subprocess
import sys
import types
import typing
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from agentrl.core.io import DataError
from agentrl.core.validate import Extra, SettingError, coerce, unknown

CONFIGS = {"sft": "SFTConfig", "grpo": "GRPOConfig", "dpo": "DPOConfig"}
FORMAT = 1  # of the cached description: bump when describe() changes

# string fields TRL 1.14 checks only in the training step (grpo_trainer._compute_loss, dpo_trainer's loss): checked
# here before anything loads
CHOICES = {
    "grpo": {"loss_type": ("grpo", "dapo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"),
             "importance_sampling_level": ("token", "sequence"), "scale_rewards": ("group", "batch", "none"),
             "vllm_mode": ("server", "colocate")},
    "dpo": {"loss_type": ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
                          "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")},
    "sft": {},
}


# the ranges of TRL's numeric fields (TRL checks few of them, and those only when its config is built or in the
# training step, after the model has loaded): checked with the preset, before anything loads. Every numeric field of
# the installed TRL's configs has one (tests/test_settings_ranges.py holds this table against them).
_COUNT, _COUNT0, _POS, _NONNEG = Field(ge=1), Field(ge=0), Field(gt=0), Field(ge=0)
_UNIT, _PORT = Field(ge=0, le=1), Field(ge=1, le=65535)
RANGES = {
    "common": {
        "per_device_train_batch_size": _COUNT, "per_device_eval_batch_size": _COUNT, "num_train_epochs": _POS,
        "max_steps": Field(ge=-1), "learning_rate": _POS, "warmup_steps": _NONNEG, "weight_decay": _NONNEG,
        "adam_beta1": Field(ge=0, lt=1), "adam_beta2": Field(ge=0, lt=1), "adam_epsilon": _POS,
        "gradient_accumulation_steps": _COUNT, "max_grad_norm": _NONNEG, "label_smoothing_factor": _UNIT,
        "neftune_noise_alpha": _NONNEG, "torch_empty_cache_steps": _COUNT, "logging_steps": _POS, "eval_steps": _POS,
        "eval_delay": _NONNEG, "eval_accumulation_steps": _COUNT, "save_steps": _POS, "save_total_limit": _COUNT,
        "seed": _COUNT0, "data_seed": _COUNT0, "dataloader_num_workers": _COUNT0, "dataloader_prefetch_factor": _COUNT,
        "ddp_bucket_cap_mb": _COUNT, "ddp_timeout": _COUNT, "local_rank": Field(ge=-1), "router_aux_loss_coef": _NONNEG,
        "dataset_num_proc": _COUNT, "max_length": _COUNT, "pad_to_multiple_of": _COUNT,
        "ref_model_mixup_alpha": _UNIT, "ref_model_sync_steps": _COUNT,
    },
    "sft": {},
    "grpo": {
        "num_generations": Field(ge=2), "num_generations_eval": _COUNT, "max_completion_length": _COUNT,
        "generation_batch_size": _COUNT, "steps_per_generation": _COUNT, "temperature": _POS,
        "top_p": Field(gt=0, le=1), "top_k": _COUNT0, "min_p": _UNIT, "repetition_penalty": _POS,
        "vllm_server_port": _PORT, "vllm_server_timeout": _POS, "vllm_group_port": _PORT,
        "vllm_gpu_memory_utilization": Field(gt=0, le=1), "vllm_max_model_length": _COUNT,
        "vllm_tensor_parallel_size": _COUNT, "beta": _NONNEG, "num_iterations": _COUNT, "epsilon": _POS,
        "delta": _POS, "epsilon_high": _NONNEG, "sapo_temperature_neg": _POS, "sapo_temperature_pos": _POS,
        "vespo_k_pos": _NONNEG, "vespo_lambda_pos": _NONNEG, "vespo_k_neg": _NONNEG, "vespo_lambda_neg": _NONNEG,
        "top_entropy_quantile": _UNIT, "entropy_coef": _NONNEG, "entropy_coef_min": _NONNEG,
        "entropy_coef_max": _NONNEG, "entropy_coef_delta": _NONNEG, "entropy_target": Field(allow_inf_nan=False),
        "max_tool_calling_iterations": _COUNT0, "vllm_importance_sampling_clip_max": _POS,
        "vllm_importance_sampling_clip_min": _NONNEG, "off_policy_mask_threshold": _NONNEG,
        "num_completions_to_print": _COUNT0, "vllm_importance_sampling_cap": _POS,
    },
    "dpo": {"precompute_ref_batch_size": _COUNT, "ld_alpha": _UNIT, "f_alpha_divergence_coef": _POS,
            "label_smoothing": Field(ge=0, lt=0.5), "beta": _POS, "discopop_tau": _POS},
}


def field_range(kind: str, name: str) -> Any:
    """Return the range (a pydantic ``Field``) of TRL's numeric field ``name``, None for a field without one."""
    return RANGES[kind].get(name, RANGES["common"].get(name))


def _ranged(tp: Any, rng: Any) -> Any:
    """Return ``tp`` with the numbers it takes constrained to ``rng`` (``int | None`` -> ``Annotated[int, rng] |
    None``)."""
    if tp in (int, float):
        return typing.Annotated[tp, rng]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.Union[tuple(_ranged(a, rng) for a in typing.get_args(tp))]  # noqa: UP007
    return tp


def _descriptor(tp: Any) -> Any:
    """Return a JSON description of a type hint: a type name, ``{"choices": [...]}``, ``{"list": d}``,
    ``{"dict": d}`` or ``{"union": [...]}``; any other class is "any" (TRL's own __post_init__ checks it)."""
    if tp is type(None):
        return "none"
    if tp in (bool, int, float, str):
        return tp.__name__
    origin = typing.get_origin(tp)
    if origin is Literal:
        return {"choices": list(typing.get_args(tp))}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"choices": [e.value for e in tp]}
    if origin in (typing.Union, types.UnionType):
        args = list(typing.get_args(tp))
        if any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):
            args = [a for a in args if a is not str]  # ``SchedulerType | str``: TrainingArguments converts to the enum
        return {"union": [_descriptor(a) for a in args]}
    if origin in (list, tuple):
        inner = typing.get_args(tp)
        return {"list": _descriptor(inner[0]) if inner else "any"}
    if origin is dict or tp is dict:
        return {"dict": "any"}
    return "any"


def _type(desc: Any) -> Any:
    """Return the type hint a description stands for (what agentrl.core.config.coerce checks)."""
    if isinstance(desc, str):
        return {"none": type(None), "bool": bool, "int": int, "float": float, "str": str}.get(desc, Any)
    if "choices" in desc:
        return Literal[tuple(desc["choices"])]
    if "list" in desc:
        return list[_type(desc["list"])]
    if "dict" in desc:
        return dict
    args = tuple(_type(d) for d in desc["union"])
    return Any if Any in args else typing.Union[args]  # noqa: UP007 - built from a tuple


def _default(f: dataclasses.Field) -> Any:
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    value = value.value if isinstance(value, enum.Enum) else value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


def describe() -> dict:
    """Return ``{kind: {field: {"type": description, "default": value}}}`` for the installed TRL's configs (imports
    TRL: run in a subprocess, :func:`fields`)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    out = {}
    for kind, name in CONFIGS.items():
        cls = getattr(trl, name)
        hints = typing.get_type_hints(cls)
        out[kind] = {f.name: {"type": _descriptor(hints[f.name]), "default": _default(f)}
                     for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    return out


def _cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentrl"
    versions = "-".join(f"{p}{_version(p)}" for p in ("trl", "transformers"))
    return root / f"trl-fields-{versions}-v{FORMAT}.json"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


_FIELDS: dict | None = None


def fields(kind: str) -> dict[str, dict]:
    """Return TRL's fields of ``kind`` ("sft", "grpo", "dpo") as ``{name: {"type", "default"}}``: from this process
    when TRL is already imported, else from the cache file, else from a subprocess (then cached)."""
    global _FIELDS
    if _FIELDS is None:
        _FIELDS = _load()
    return _FIELDS[kind]


def _load() -> dict:
    if "trl" in sys.modules:
        return describe()
    path = _cache_file()
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    code = "import json, sys; from agentrl.train.trl_fields import describe; json.dump(describe(), sys.stdout)"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})
    except (OSError, subprocess.SubprocessError) as exc:
        raise DataError(f"cannot read TRL's config fields ({exc})") from None
    if proc.returncode != 0:
        raise DataError(f"cannot read TRL's config fields: {proc.stderr.strip()[-500:]}")
    found = json.loads(proc.stdout)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(found))
        tmp.replace(path)
    except OSError:  # a read-only home: every process reads TRL's fields anew, slower but right
        pass
    return found


def field_type(kind: str, name: str) -> Any:
    """Return the type a value of TRL's field ``name`` must have (with :data:`CHOICES` as a Literal, and its range
    from :data:`RANGES`)."""
    choices = CHOICES[kind].get(name)
    tp = _type(fields(kind)[name]["type"])
    rng = field_range(kind, name)
    if rng is not None:
        tp = _ranged(tp, rng)
    if choices is None:
        return tp
    if typing.get_origin(tp) in (list, tuple) or (typing.get_origin(tp) in (typing.Union, types.UnionType) and any(
            typing.get_origin(a) in (list, tuple) for a in typing.get_args(tp))):  # DPO's loss_type: loss names
        return typing.Union[Literal[choices], list[Literal[choices]]]  # noqa: UP007
    return Literal[choices] if tp is str else typing.Union[Literal[choices], tp]  # noqa: UP007


def default(kind: str, name: str) -> Any:
    """Return TRL's default of field ``name`` (None where it is not a plain value)."""
    return fields(kind)[name]["default"]


class TRLFields(Extra):
    """The keys of a trainer table that are TRL config fields (agentrl.core.config.Extra): a name TRL's config has,
    with a value of its type; ``owned`` are the fields agentrl derives itself (refused, naming what sets them)."""

    def __init__(self, kind: str, owned: dict[str, str]):
        self.kind, self.owned = kind, owned

    def names(self) -> list[str]:
        """Return the TRL fields a preset may set."""
        return [n for n in fields(self.kind) if n not in self.owned]

    def type_of(self, key: str) -> Any:
        """Return the type of TRL's field ``key`` (None when TRL's config has no such field)."""
        return field_type(self.kind, key) if key in fields(self.kind) else None

    def coerce(self, key: str, value: Any, path: str, at, table: dict | None = None) -> Any:
        """Return ``value`` checked as TRL's field ``key``; KeyError when TRL's config has no such field."""
        if key in self.owned:
            where = at(path)
            raise DataError(f"{where + ': ' if where else ''}{path}: agentrl sets TRL's {key} itself "
                            f"({self.owned[key]})")
        if key not in fields(self.kind):
            raise KeyError(key)
        try:
            return coerce(field_type(self.kind, key), value, path, at)
        except SettingError as exc:  # its key is the value at fault (an item of a list: dpo.loss_type[1])
            where = at(path)
            raise DataError(f"{where + ': ' if where else ''}{exc.key}: {exc}") from None


def check_names(kind: str, table: dict, path: str, at, own: list[str]) -> None:
    """Raise the unknown-key DataError for the first key of ``table`` that is neither one of ``own`` nor a TRL
    field of ``kind`` (used where a table is read without being built)."""
    for key in table:
        if key not in own and key not in fields(kind):
            unknown(f"{path}.{key}", [*own, *fields(kind)], at)
