"""Loading a model for LoRA training with one config and two backends.

- ``unsloth``: ``FastLanguageModel.from_pretrained`` + ``get_peft_model`` (4-bit or 16-bit, Unsloth's
  kernels and gradient checkpointing) when a CUDA GPU is present and unsloth is installed;
- ``transformers``: ``AutoModelForCausalLM`` + ``peft.get_peft_model`` everywhere else (the tested path).

``backend="auto"`` picks Unsloth when it can run in one process; under a distributed launch (``accelerate
launch`` with FSDP, DeepSpeed or several DDP processes) it picks transformers + peft, the path whose FSDP and
DDP settings are tested here. Asking for Unsloth without a GPU logs why and falls back, unless
``UNSLOTH_FORCE_CPU=1`` asks for Unsloth's CPU backend on purpose (that is how its code path is tested here).
The choice and the reason are returned so they reach the manifest.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from agentrl.core.cpu_precision import unmeasured_line, use_bf16
from agentrl.core.device import cuda_dtype, cuda_native_bf16
from agentrl.core.io import DataError
from agentrl.core.validate import AtLeast1, Moved, at_least, between
from agentrl.rollout.local import load_tokenizer
from agentrl.train.checkpoints import distributed_launch, fsdp, fsdp_activation_checkpointing
from agentrl.train.gpu_plan import adapter_rank
from agentrl.train.tiny import ensure_tiny_model

log = logging.getLogger(__name__)

DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class LoraSettings:
    """LoRA adapter shape (the seed used r 64, alpha 128, dropout 0.05 on all linear layers). The shape fields are
    None where the preset is silent: a fresh LoRA then takes :data:`FRESH` (r 16, alpha 32, every linear layer, no
    rsLoRA); continuing from an adapter, its own shape applies and a given one is an error."""

    r: AtLeast1 | None = None
    alpha: AtLeast1 | None = None
    # None: 0.05 for a fresh LoRA; continuing from an adapter, the adapter's own (a number replaces it: apply_dropout)
    dropout: between(0, 1, high_open=True) | None = None
    target_modules: list[str] | None = None
    use_rslora: bool | None = None

    def given(self) -> list[str]:
        """Return the shape fields the preset set (r, alpha, target_modules, use_rslora)."""
        return [k for k in ("r", "alpha", "target_modules", "use_rslora") if getattr(self, k) is not None]

    @property
    def rank(self) -> int:
        """The rank of a fresh LoRA."""
        return FRESH["r"] if self.r is None else self.r

    @property
    def scale(self) -> int:
        """The alpha of a fresh LoRA."""
        return FRESH["alpha"] if self.alpha is None else self.alpha

    @property
    def targets(self) -> list[str]:
        """The modules a fresh LoRA adapts."""
        return list(DEFAULT_TARGETS) if self.target_modules is None else list(self.target_modules)


FRESH = {"r": 16, "alpha": 32}  # a fresh LoRA's shape where the preset gives none


@dataclass
class ModelConfig:
    """Which model to train and how to load it."""

    name: str | None = None  # hub id or directory; None: the base model the adapter was trained on (base_model.txt)
    backend: Literal["auto", "unsloth", "transformers"] = "auto"
    max_seq_length: at_least(16) = 4096
    load_in_4bit: bool = False
    # auto = bf16 on a GPU with native bf16, fp16 on others (T4), fp32 on CPU
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    cpu_precision: Literal["auto", "bf16", "fp32"] = "auto"  # CPU training: bf16 autocast where measured faster
    fast_inference: bool = False  # Unsloth only: a colocated vLLM engine for GRPO generation
    gpu_memory_utilization: between(0, 1, low_open=True) = 0.5  # GPU memory share vLLM may take (fast_inference)
    lora: LoraSettings = field(default_factory=LoraSettings)
    moved: dict = field(default_factory=dict, metadata={"extra": Moved({
        "gradient_checkpointing": "gradient_checkpointing in the trainer's table ([sft] / [grpo] / [dpo]: TRL's "
                                  "field; agentrl applies it through Unsloth at load time on that backend)"})})


def base_model(cfg: ModelConfig, adapter: str | None) -> str:
    """Return the model to load: ``cfg.name``, else the base model ``adapter`` was trained on (its base_model.txt);
    a DataError when neither says."""
    if cfg.name:
        return cfg.name

    base = Path(adapter) / "base_model.txt" if adapter else None
    if base is not None and base.is_file():
        return base.read_text().strip()

    raise DataError("no model: set [<phase>.model] name" + (f" (the adapter {adapter} has no base_model.txt)"
                                                             if adapter else ""))


def require_model(name: str) -> None:
    """Raise a DataError naming ``name`` when it is a local path (absolute, relative with a directory, ``~``) that
    does not exist: a hub id is ``namespace/name``, and transformers would only fail later with a traceback."""
    p = Path(name).expanduser()
    local = name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.startswith("runs/")
    if local and not p.exists():
        raise DataError(f"model {name}: no such directory (a hub model is namespace/name; `agentrl models prepare "
                        "smollm2` and `agentrl tiny-model` build the offline ones)")


@dataclass
class LoadedModel:
    """A model ready for training, with how it was loaded."""

    model: object
    tokenizer: object
    backend: str
    reason: str


_FELL_BACK: set[str] = set()


def choose_backend(requested: str, *, cuda: bool | None = None, unsloth: bool | None = None) -> tuple[str, str]:
    """Return ``(backend, reason)`` for the requested backend on this machine (``cuda``: a CUDA GPU is usable,
    ``unsloth``: unsloth is installed; detected when None)."""
    if requested not in ("auto", "unsloth", "transformers"):
        raise DataError(f"model.backend must be auto, unsloth or transformers (got {requested!r})")
    if requested == "transformers":
        return "transformers", "requested"
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    has_unsloth = importlib.util.find_spec("unsloth") is not None if unsloth is None else unsloth
    forced_cpu = os.environ.get("UNSLOTH_FORCE_CPU") == "1"
    launch = distributed_launch()
    if requested == "auto" and launch:
        # Unsloth's single-GPU defaults (offloaded checkpointing, colocated vLLM) are what the presets size; across
        # processes the tested path is transformers + peft (FSDP/ZeRO shard the model, FSDP checkpoints layers)
        return "transformers", f"distributed launch ({launch}): auto picks transformers + peft"
    if has_unsloth and (cuda or forced_cpu):
        return "unsloth", "CUDA GPU present" if cuda else "UNSLOTH_FORCE_CPU=1 (Unsloth's CPU backend)"
    why = "no CUDA GPU" if not cuda else "unsloth is not installed"
    if requested == "unsloth":
        if why not in _FELL_BACK:  # a run asks several times (preflight, TRL's config, the load): one line
            _FELL_BACK.add(why)
            log.warning("Unsloth was requested but %s: falling back to transformers + peft "
                        "(install unsloth on a CUDA machine for its kernels)", why)
        return "transformers", f"unsloth requested but {why}: fell back"
    return "transformers", why


def unsloth_checkpointing(requested: bool) -> str | bool:
    """Return Unsloth's ``use_gradient_checkpointing`` for the run's ``gradient_checkpointing``: "unsloth"
    (offloaded) when asked, except under FSDP activation checkpointing, which already recomputes every layer (both
    would recompute each one twice)."""
    if not requested:
        return False
    if fsdp_activation_checkpointing():
        log.info("Unsloth gradient checkpointing off: FSDP's activation checkpointing recomputes the layers")
        return False
    return "unsloth"


def prepare_backend(cfg: ModelConfig) -> tuple[str, str]:
    """Return ``(backend, reason)`` for ``cfg`` on this machine (:func:`choose_backend`), with unsloth imported when
    it is the one: Unsloth patches trl and transformers when imported and warns (fewer optimisations) if they came
    first, so a run calls this before anything imports them (TRL's config is built after it)."""
    backend, reason = choose_backend(cfg.backend)
    check_fast_inference(cfg, backend)
    if backend == "unsloth":
        os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")  # never let Unsloth apt-get or git clone on its own
        import unsloth  # noqa: F401
    return backend, reason


def check_fast_inference(cfg: ModelConfig, backend: str) -> None:
    """Raise DataError when ``cfg`` asks Unsloth for a colocated vLLM engine under FSDP (Unsloth 2026.10.9
    refuses ``fast_inference`` with FSDP2: loader_utils.raise_if_fast_inference_under_fsdp2), before any model
    is downloaded."""
    if backend == "unsloth" and cfg.fast_inference and fsdp():
        raise DataError("grpo.model.fast_inference = true cannot run under FSDP (Unsloth's colocated vLLM is "
                        "single-process): launch without FSDP, or use backend = \"transformers\" with TRL's vLLM "
                        "(use_vllm = true, vllm_mode = \"server\" on separate GPUs; docs/scaling.md)")


# transformers' bitsandbytes optimisers of the AdamW family: torch's AdamW trains the same without the 8-bit state
BNB_ADAMW = ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit")
BNB_OTHER = ("ademamix", "ademamix_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit", "lion_8bit", "lion_32bit",
             "paged_lion_32bit", "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit")


def bitsandbytes_fallback(settings):
    """Return ``settings`` (SFT, GRPO or DPO settings) as they can run here: without bitsandbytes (e.g.
    ``AGENTRL_GPU_STACK=none`` on a runtime that lacks it) an AdamW 8-bit or paged optimiser becomes adamw_torch and
    ``load_in_4bit`` 16-bit weights, with ONE warning line saying what changed (the run's manifest records what ran);
    another bitsandbytes optimiser (Lion, AdEMAMix, RMSprop) is a DataError. Unchanged when bitsandbytes is
    importable."""
    if importlib.util.find_spec("bitsandbytes") is not None:
        return settings
    optim = settings.optim
    if optim in BNB_OTHER:
        raise DataError(f"optim = {optim!r} needs bitsandbytes, which is not installed: pip install "
                        "bitsandbytes, or choose an optimiser torch has (adamw_torch)")
    changes = {}
    if optim in BNB_ADAMW:
        changes["trl"] = {**settings.trl, "optim": "adamw_torch"}
    if settings.model.load_in_4bit:
        changes["model"] = replace(settings.model, load_in_4bit=False)
    if not changes:
        return settings
    what = [f"optim {optim} -> adamw_torch" if "trl" in changes else "",
            "load_in_4bit -> 16-bit weights (more GPU memory: agentrl gpu-plan)" if "model" in changes else ""]
    log.warning("bitsandbytes is not installed: %s (install bitsandbytes to train as the preset says)",
                ", ".join(w for w in what if w))
    return replace(settings, **changes)


def cuda_available() -> bool:
    """Return whether a CUDA GPU is usable."""
    import torch

    return torch.cuda.is_available()


def cuda_precision(cfg: ModelConfig | None = None) -> dict[str, bool]:
    """Return the Trainer's ``bf16`` / ``fp16`` flags for this machine's GPU: bf16 where it is native (compute
    capability >= 8.0), else fp16, which the Trainer runs with a loss scaler (T4-class cards). Without CUDA, bf16
    (the Trainer's CPU autocast) where ``cfg.cpu_precision`` or the measurement says so (agentrl.core.cpu_precision),
    else both False."""
    cuda = cuda_available()
    if not cuda:
        requested = cfg.cpu_precision if cfg else "auto"
        line = unmeasured_line("training", requested)
        if line:
            print(line)
        return {"bf16": use_bf16("train", requested), "fp16": False}
    native = cuda and cuda_native_bf16()
    return {"bf16": native, "fp16": cuda and not native}


def progress_bars() -> bool:
    """Return whether the Trainer's own tqdm bars are shown (a terminal reads stderr)."""
    return sys.stderr.isatty()


def _dtype(cfg: ModelConfig):
    import torch

    if torch.cuda.is_available():
        return cuda_dtype(cfg.dtype, log)
    return getattr(torch, cfg.dtype) if cfg.dtype not in ("auto", None) else torch.float32


def load_for_training(cfg: ModelConfig, *, lora: bool = True, adapter: str | None = None, seed: int | None = None,
                      gradient_checkpointing: bool = False) -> LoadedModel:
    """Return the model and tokenizer on the chosen backend (:func:`prepare_backend`): a fresh LoRA when ``lora``, or
    the trainable LoRA ``adapter`` (e.g. the SFT one, to continue with GRPO); the model is ``cfg.name``, else the one
    the adapter was trained on. ``seed`` seeds every RNG before the LoRA weights are initialised (the trainer seeds
    only later); ``gradient_checkpointing`` is the run's (Unsloth applies it at load time)."""
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise DataError(f"{adapter}: adapter not found (expected adapter_config.json in it)")
    cfg = replace(cfg, name=base_model(cfg, adapter))
    backend, reason = prepare_backend(cfg)
    log.info("training backend: %s (%s)", backend, reason)
    if Path(cfg.name).name == "tiny" and not Path(cfg.name).exists():  # the offline demo model: built on first use
        ensure_tiny_model(cfg.name)
    require_model(cfg.name)
    if seed is not None:
        from transformers import set_seed

        set_seed(seed)
    if backend == "unsloth":
        loaded = _load_unsloth(cfg, lora, reason, adapter, gradient_checkpointing)
    else:
        loaded = _load_transformers(cfg, lora, reason, adapter)
    if adapter is not None and cfg.lora.dropout is not None:
        apply_dropout(loaded.model, cfg.lora.dropout, backend, adapter)
    return loaded


FRESH_DROPOUT = 0.05  # a fresh LoRA's dropout when the preset names none (the seed's)


def fresh_dropout(cfg: ModelConfig) -> float:
    """Return the dropout of a fresh LoRA for ``cfg``: ``lora.dropout``, or FRESH_DROPOUT when unset."""
    return FRESH_DROPOUT if cfg.lora.dropout is None else float(cfg.lora.dropout)


def apply_dropout(model, p: float, backend: str, adapter: str) -> int:
    """Set the LoRA dropout of a model loaded from ``adapter`` to ``p`` (every LoRA layer and the adapter config
    saved with it); return the number of layers changed. On Unsloth, an adapter saved with dropout 0 runs Unsloth's
    fused LoRA kernels, which have no dropout: raising it there is a DataError rather than a setting ignored."""
    import torch

    old = {name: c.lora_dropout for name, c in getattr(model, "peft_config", {}).items()}
    if backend == "unsloth" and p > 0 and any(v == 0 for v in old.values()):
        raise DataError(f"grpo.model.lora.dropout = {p}: the adapter {adapter} was trained with dropout 0, which "
                        "Unsloth runs with fused LoRA kernels that have no dropout; keep 0 (remove the key) or "
                        "train the SFT adapter with the dropout wanted")
    changed = 0
    for module in model.modules():
        drops = getattr(module, "lora_dropout", None)
        if isinstance(drops, torch.nn.ModuleDict):
            for name in list(drops.keys()):
                drops[name] = torch.nn.Dropout(p=p) if p > 0 else torch.nn.Identity()
                changed += 1
    for c in getattr(model, "peft_config", {}).values():
        c.lora_dropout = p
    if old and any(v != p for v in old.values()):
        log.info("LoRA dropout of %s: %s -> %s (grpo.model.lora.dropout)", adapter, sorted(set(old.values())), p)
    return changed


def unsloth_load_args(cfg: ModelConfig, adapter: str | None = None, gradient_checkpointing: bool = False) -> dict:
    """Return the keyword arguments of Unsloth's ``FastLanguageModel.from_pretrained`` for ``cfg``: on CUDA the dtype
    agentrl picks (bf16 only where native, fp16 on a T4), else Unsloth's own choice (None)."""
    import torch

    # vLLM reserves LoRA slots of max_lora_rank: it must cover the adapter GRPO continues from (SFT used r 64)
    rank = max(cfg.lora.rank, adapter_rank(adapter) or 0)
    extra = {"fast_inference": True, "gpu_memory_utilization": cfg.gpu_memory_utilization,
             "max_lora_rank": rank} if cfg.fast_inference else {}
    dtype = _dtype(cfg) if torch.cuda.is_available() or cfg.dtype not in ("auto", None) else None
    return {"model_name": str(adapter or cfg.name), "max_seq_length": cfg.max_seq_length, "dtype": dtype,
            "load_in_4bit": cfg.load_in_4bit, "load_in_16bit": not cfg.load_in_4bit,
            "use_gradient_checkpointing": unsloth_checkpointing(gradient_checkpointing), **extra}


def _load_unsloth(cfg: ModelConfig, lora: bool, reason: str, adapter: str | None = None,
                  gradient_checkpointing: bool = False) -> LoadedModel:
    from unsloth import FastLanguageModel

    args = unsloth_load_args(cfg, adapter, gradient_checkpointing)
    checkpointing = args["use_gradient_checkpointing"]
    model, tokenizer = FastLanguageModel.from_pretrained(**args)
    if adapter is not None:  # Unsloth loads base + adapter from the adapter directory
        for name, param in model.named_parameters():
            param.requires_grad_("lora_" in name)
    elif lora:
        model = FastLanguageModel.get_peft_model(
            model, r=cfg.lora.rank, lora_alpha=cfg.lora.scale, lora_dropout=fresh_dropout(cfg),
            target_modules=cfg.lora.targets, use_rslora=bool(cfg.lora.use_rslora), bias="none",
            use_gradient_checkpointing=checkpointing, random_state=3407, max_seq_length=cfg.max_seq_length)
    return LoadedModel(model, tokenizer, "unsloth", reason)


def _load_transformers(cfg: ModelConfig, lora: bool, reason: str, adapter: str | None = None) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": _dtype(cfg)}
    if cfg.load_in_4bit:
        if torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes"):
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                               bnb_4bit_compute_dtype=kwargs["dtype"])
        else:
            log.warning("load_in_4bit needs CUDA and bitsandbytes: loading in %s instead", kwargs["dtype"])
    tokenizer = load_tokenizer(cfg.name)
    model = AutoModelForCausalLM.from_pretrained(cfg.name, **kwargs)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    elif lora:
        from peft import LoraConfig, get_peft_model

        present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        targets = [t for t in cfg.lora.targets if t in present]
        if not targets:
            raise DataError(f"model.lora.target_modules {cfg.lora.targets} match no module of {cfg.name}")
        model = get_peft_model(model, LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.scale,
                                                 lora_dropout=fresh_dropout(cfg), target_modules=targets,
                                                 use_rslora=bool(cfg.lora.use_rslora), bias="none",
                                                 task_type="CAUSAL_LM"))
    return LoadedModel(model, tokenizer, "transformers", reason)
