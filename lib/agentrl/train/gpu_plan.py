"""Will a preset fit a GPU? A memory estimate of SFT and GRPO per card, and the per-card preset settings.

``agentrl gpu-plan --config colab_qwen3_4b --gpu T4`` prints, for each training phase of the preset, the
weights, LoRA adapter (fp32) + gradients + optimizer state, activations at the configured lengths, the
logits of the loss and, for GRPO with vLLM, the engine's share (weights it holds, LoRA slots, runtime
overhead) and what is left for the KV cache, in GiB; then whether it fits and what to change if not.

The estimate is arithmetic on the model's shapes, not a measurement (no GPU is lent to this project);
tests/test_gpu_plan.py holds it against published figures: vLLM's own memory log of Unsloth's Qwen3-4B
GRPO notebook on a T4 and Unsloth's stated minimum VRAM per model size.

A preset may carry per-card settings in ``[gpu.<CARD>.<phase>...]`` tables, merged over its phase tables when it is
loaded for that card (agentrl.app.presets.load; the CLI's ``--gpu``, default: the detected card; the notebooks do the
same).
Everything here is stdlib only: the Colab setup cell imports it before anything is installed.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentrl.core.io import DataError

GIB = 1024**3


@dataclass(frozen=True)
class Card:
    """A GPU class: the memory torch reports as total (GiB), compute capability, bf16 support."""

    name: str
    gib: float
    sm: tuple[int, int]
    bf16: bool


# total memory as torch reports it (Unsloth's banner "Max memory: ... GB" prints total_memory / 1024**3), read from
# Unsloth notebook outputs on each card: T4 14.741, L4 22.161, A100-SXM4-40GB 39.557, A100-SXM4-80GB 79.151,
# H100 80GB HBM3 79.179
CARDS = {
    "T4": Card("T4", 14.741, (7, 5), False),
    "L4": Card("L4", 22.161, (8, 9), True),
    "A100-40": Card("A100-40", 39.557, (8, 0), True),
    "A100-80": Card("A100-80", 79.151, (8, 0), True),
    "H100": Card("H100", 79.179, (9, 0), True),
}


def card_for(name: str, memory_mib: float) -> str:
    """Return the card class (a key of CARDS) for a GPU's name and memory; unknown cards go by memory."""
    upper = name.upper()
    if "T4" in upper:
        return "T4"
    if "L4" in upper and "L40" not in upper:
        return "L4"
    if "A100" in upper:
        return "A100-80" if memory_mib > 60_000 else "A100-40"
    if "H100" in upper or "H200" in upper or "H800" in upper:
        return "H100"
    gib = memory_mib / 1024
    return next((c.name for c in sorted(CARDS.values(), key=lambda c: -c.gib) if gib >= c.gib * 0.97), "T4")


@dataclass(frozen=True)
class GPU:
    """One GPU as ``nvidia-smi`` reports it."""

    name: str
    driver: str
    compute_cap: tuple[int, int]
    memory_mib: int

    @property
    def card(self) -> str:
        """The card class (a key of CARDS)."""
        return card_for(self.name, self.memory_mib)


NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total",
                    "--format=csv,noheader,nounits"]


def parse_nvidia_smi(text: str) -> list[GPU]:
    """Return the GPUs in the output of :data:`NVIDIA_SMI_QUERY` (one ``name, driver, 7.5, 15360`` line each)."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        major, _, minor = parts[2].partition(".")
        gpus.append(GPU(parts[0], parts[1], (int(major), int(minor or 0)), int(float(parts[3]))))
    return gpus


def query_gpus() -> list[GPU]:
    """Return this machine's GPUs from ``nvidia-smi`` (empty without one or without the tool)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else []


def resolve_card(requested: str | None) -> str | None:
    """Return the card class for ``--gpu``: a CARDS key as given, the first GPU's class for ``auto`` (None
    without a GPU), None for ``none``."""
    if requested in (None, "", "auto"):
        gpus = query_gpus()
        return gpus[0].card if gpus else None
    if requested == "none":
        return None
    if requested not in CARDS:
        raise DataError(f"--gpu {requested}: unknown GPU class (choose from {', '.join(CARDS)}, auto, none)")
    return requested


def adapter_rank(adapter: str | None) -> int | None:
    """Return the LoRA rank ``r`` saved in ``adapter/adapter_config.json``, or None without an adapter."""
    if adapter is None:
        return None
    return int(json.loads((Path(adapter) / "adapter_config.json").read_text()).get("r") or 0) or None


@dataclass(frozen=True)
class Arch:
    """The shapes of a decoder-only transformer (the config.json fields that size its memory)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    def shapes(self) -> dict[str, tuple[int, int]]:
        """Return ``{module: (in_features, out_features)}`` of the linear layers of one decoder layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}

    @property
    def linear_params(self) -> int:
        """Parameters in the decoder layers' linear layers (what 4-bit quantisation shrinks)."""
        return self.layers * sum(i * o for i, o in self.shapes().values())

    @property
    def params(self) -> int:
        """All parameters: linear layers, embeddings (and an untied LM head), norms."""
        norms = self.layers * (2 * self.hidden + 2 * self.head_dim) + self.hidden
        return self.linear_params + self.vocab * self.hidden * (1 if self.tied else 2) + norms

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Return vLLM's KV-cache bytes per token: K and V, every layer, every KV head."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


# from each model's config.json on the Hugging Face hub
ARCHS = {
    "qwen3-0.6b": Arch(28, 1024, 3072, 16, 8, 128, 151936, True),
    "qwen3-1.7b": Arch(28, 2048, 6144, 16, 8, 128, 151936, True),
    "qwen3-4b": Arch(36, 2560, 9728, 32, 8, 128, 151936, True),
    "qwen3-8b": Arch(36, 4096, 12288, 32, 8, 128, 151936, False),
    "qwen2.5-0.5b": Arch(24, 896, 4864, 14, 2, 64, 151936, True),
    "qwen2.5-1.5b": Arch(28, 1536, 8960, 12, 2, 128, 151936, True),
    "qwen2.5-3b": Arch(36, 2048, 11008, 16, 2, 128, 151936, True),
    "qwen2.5-7b": Arch(28, 3584, 18944, 28, 4, 128, 152064, False),
    "qwen2.5-14b": Arch(48, 5120, 13824, 40, 8, 128, 152064, False),
    "llama-3.2-3b": Arch(28, 3072, 8192, 24, 8, 128, 128256, True),
    "llama-3.1-8b": Arch(32, 4096, 14336, 32, 8, 128, 128256, False),
    "mistral-7b-v0.3": Arch(32, 4096, 14336, 32, 8, 128, 32768, False),
    "smollm2-135m": Arch(30, 576, 1536, 9, 3, 64, 49152, True),
}


def arch_for(model: str) -> Arch:
    """Return the shapes of ``model``: its config.json when it is a local directory, else the ARCHS entry whose
    name the hub id contains (``unsloth/Qwen3-4B-Instruct-2507`` -> qwen3-4b)."""
    config = Path(model) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text(encoding="utf-8"))
        c = c.get("text_config", c)
        heads = c["num_attention_heads"]
        return Arch(c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"], heads,
                    c.get("num_key_value_heads") or heads, c.get("head_dim") or c["hidden_size"] // heads,
                    c["vocab_size"], bool(c.get("tie_word_embeddings", False)))
    short = model.rsplit("/", 1)[-1].lower()
    for key in sorted(ARCHS, key=len, reverse=True):
        if short.startswith(key) or short.replace("meta-", "").startswith(key):
            return ARCHS[key]
    raise DataError(f"gpu-plan: unknown model {model!r}: give a local directory with config.json, or one of "
                    f"{', '.join(ARCHS)}")


OPTIMIZER_BYTES = {"adamw_8bit": 2, "paged_adamw_8bit": 2, "adamw_bnb_8bit": 2, "sgd": 0, "adafactor": 4}
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's supported max_lora_rank values
CONTEXT_GIB = 0.5  # CUDA context, cuBLAS workspaces, allocator slack
# vLLM's profiled activation peak (0.88 GiB) + CUDA graphs (0.34 GiB) for Qwen3-4B (hidden 2560) on a T4, from vLLM's
# log in Unsloth's Qwen3 (4B) GRPO notebook; scaled by hidden size for other models
VLLM_RUNTIME_GIB_PER_HIDDEN = (0.88 + 0.34) / 2560
LOGIT_CHUNK = 1024  # tokens per chunk of a chunked loss (TRL's chunked_nll, Unsloth's fused cross entropy)


@dataclass
class Plan:
    """The estimate of one phase on one card: parts in GiB, what must fit where, and advice."""

    phase: str
    card: str
    parts: dict[str, float] = field(default_factory=dict)
    limit: float = 0.0  # GiB the training side may use
    vllm: dict[str, float] = field(default_factory=dict)  # budget, weights, lora, runtime, kv, kv_needed
    advice: list[str] = field(default_factory=list)

    @property
    def training(self) -> float:
        """GiB the training side needs (every part)."""
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        """True when training fits its share and the vLLM KV cache holds at least one full sequence."""
        kv_ok = not self.vllm or self.vllm["kv"] >= self.vllm["kv_one_sequence"]
        return self.training <= self.limit and kv_ok


def _lora_rank(rank: int) -> int:
    return next((r for r in VLLM_LORA_RANKS if r >= rank), rank)


def _weights(arch: Arch, four_bit: bool) -> float:
    if not four_bit:
        return arch.params * 2 / GIB
    # NF4: 4 bits + double-quantised absmax (~0.127 bits) per linear weight; embeddings, head, norms stay 16-bit
    return (arch.linear_params * 4.127 / 8 + (arch.params - arch.linear_params) * 2) / GIB


def _lora(arch: Arch, rank: int, targets: list[str]) -> int:
    return arch.layers * rank * sum(i + o for m, (i, o) in arch.shapes().items() if m in targets)


def _activations(arch: Arch, tokens: int, checkpointing: bool, offload: bool) -> float:
    """GiB of saved activations for ``tokens`` tokens in one micro-batch (16-bit): per layer the norm inputs and
    outputs, q/k/v, attention output and the four MLP tensors; with checkpointing one layer plus a hidden state per
    layer (Unsloth moves those to CPU memory)."""
    kv = arch.kv_heads * arch.head_dim
    layer = tokens * (7 * arch.hidden + 2 * kv + 4 * arch.intermediate) * 2
    if not checkpointing:
        return arch.layers * layer / GIB
    kept = 2 if offload else arch.layers
    return (layer + kept * tokens * arch.hidden * 2) / GIB


def _unsloth(model) -> bool:
    # "auto" is Unsloth on a CUDA machine where the setup cell installed it; this plans one process on one card
    # (under accelerate launch "auto" picks transformers: agentrl.train.models.choose_backend)
    return model.backend in ("unsloth", "auto")


def _training_parts(arch: Arch, model, lora_rank: int, optim: str, tokens: int, logits: float,
                    shared_weights: bool, checkpointing: bool) -> dict[str, float]:
    lora = _lora(arch, lora_rank, model.lora.targets)
    unsloth = _unsloth(model)
    parts = {"weights": 0.0 if shared_weights else _weights(arch, model.load_in_4bit),
             "lora (fp32)": lora * 4 / GIB, "gradients (fp32)": lora * 4 / GIB,
             f"optimizer ({optim})": lora * OPTIMIZER_BYTES.get(optim, 8) / GIB,
             "activations": _activations(arch, tokens, checkpointing, unsloth),
             "logits": logits, "cuda context": CONTEXT_GIB}
    return {k: round(v, 2) for k, v in parts.items()}


def plan_sft(settings, card: str) -> Plan:
    """Return the estimate of an SFT run (``SFTSettings``) on ``card``."""
    arch, c = arch_for(settings.model.name), CARDS[card]
    tokens = settings.per_device_train_batch_size * settings.max_length
    logits = 2 * min(tokens, LOGIT_CHUNK) * arch.vocab * 4 / GIB  # fp32 logits of one chunk and their gradient
    p = Plan("sft", card, _training_parts(arch, settings.model, settings.model.lora.rank, settings.optim, tokens,
                                          logits, False, settings.gradient_checkpointing), limit=c.gib)
    _advise(p, settings.model, settings.gradient_checkpointing, tokens,
            "sft.per_device_train_batch_size or sft.max_length")
    return p


def plan_grpo(settings, card: str, adapter_rank: int | None = None, prompt_tokens: int = 512) -> Plan:
    """Return the estimate of a GRPO run (``GRPOSettings``) on ``card``; ``prompt_tokens`` is the prompt
    (system prompt + question) each completion follows."""
    arch, c, m = arch_for(settings.model.name), CARDS[card], settings.model
    rank = max(m.lora.rank, adapter_rank or 0)
    batch = settings.per_device_train_batch_size
    seq = prompt_tokens + settings.max_completion_length
    tokens = batch * seq
    unsloth_vllm = _unsloth(m) and m.fast_inference
    trl_vllm = settings.use_vllm and settings.vllm_mode == "colocate" and not unsloth_vllm
    if _unsloth(m):  # Unsloth's GRPO computes log-probs in chunks
        logits = 2 * min(tokens, LOGIT_CHUNK) * arch.vocab * 4 / GIB
    else:
        # TRL 1.14.2 (_full_logits_logps): the model returns the micro-batch's completion logits in 16-bit
        # (logits_to_keep), its fused Triton log-prob/entropy kernel saves them for the backward pass and writes
        # a gradient of the same size and dtype there (no fp32 copy on CUDA): two 16-bit tensors at the peak
        logits = 2 * batch * settings.max_completion_length * arch.vocab * 2 / GIB
    p = Plan("grpo", card, _training_parts(arch, m, rank, settings.optim, tokens, logits, unsloth_vllm,
                                           settings.gradient_checkpointing), limit=c.gib)
    if unsloth_vllm or trl_vllm:
        util = m.gpu_memory_utilization if unsloth_vllm else settings.vllm_gpu_memory_utilization
        budget = util * c.gib
        v = {"budget": budget, "weights": _weights(arch, m.load_in_4bit and unsloth_vllm),
             # Unsloth serves the adapter through vLLM's LoRA slots; TRL pushes merged weights instead
             "lora slots": _lora(arch, _lora_rank(rank), list(arch.shapes())) * 2 / GIB if unsloth_vllm else 0.0,
             "runtime": VLLM_RUNTIME_GIB_PER_HIDDEN * arch.hidden}
        v["kv"] = budget - v["weights"] - v["lora slots"] - v["runtime"]
        v["kv_one_sequence"] = arch.kv_bytes_per_token() * m.max_seq_length / GIB
        v["sequences"] = max(0.0, v["kv"]) / v["kv_one_sequence"]
        p.vllm = {k: round(x, 2) for k, x in v.items()}
        p.limit = c.gib - budget
        _advise_vllm(p, settings, util, unsloth_vllm)
    _advise(p, m, settings.gradient_checkpointing, tokens,
            "grpo.per_device_train_batch_size or grpo.max_completion_length")
    return p


def _advise(p: Plan, model, checkpointing: bool, tokens: int, lengths: str) -> None:
    over = p.training - p.limit
    if over <= 0:
        return
    if not model.load_in_4bit and p.parts.get("weights", 0) > 0:
        p.advice.append(f"load_in_4bit = true in [{p.phase}.model] (weights {p.parts['weights']:.1f} GiB -> about "
                        f"a third)")
    if not checkpointing:
        p.advice.append(f"gradient_checkpointing = true in [{p.phase}]")
    share = p.parts["activations"] + p.parts["logits"]
    if share > 0:
        p.advice.append(f"lower {lengths}: activations + logits take {share:.1f} GiB for {tokens} tokens per "
                        f"micro-batch (raise gradient_accumulation_steps to keep the batch)")
    p.advice.insert(0, f"training needs {p.training:.1f} GiB but has {p.limit:.1f} GiB ({over:.1f} GiB over)")


def _advise_vllm(p: Plan, settings, util: float, unsloth: bool) -> None:
    v, key = p.vllm, ("grpo.model.gpu_memory_utilization" if unsloth else "grpo.vllm_gpu_memory_utilization")
    if v["kv"] < v["kv_one_sequence"]:
        need = (v["weights"] + v["lora slots"] + v["runtime"] + v["kv_one_sequence"] * settings.num_generations)
        p.advice.append(f"vLLM's KV cache ({v['kv']:.2f} GiB) cannot hold one {settings.model.max_seq_length}-token "
                        f"sequence ({v['kv_one_sequence']:.2f} GiB): raise {key} from {util} to "
                        f"{math.ceil(need / CARDS[p.card].gib * 100) / 100} (one group of "
                        f"{settings.num_generations} in parallel), load in 4-bit, or lower grpo.model.max_seq_length")
    elif v["sequences"] < settings.num_generations:
        p.advice.append(f"note: vLLM holds {v['sequences']:.1f} full-length sequences at once, fewer than "
                        f"num_generations ({settings.num_generations}): generation queues (slower, not an error)")


def plans(sft, grpo, card: str) -> list[Plan]:
    """Return the SFT and GRPO estimates on ``card`` of a preset's settings (``sft`` / ``grpo``: SFTSettings /
    GRPOSettings of the preset loaded for ``card``, or None when it has no such table)."""
    out = []
    if sft is not None:
        out.append(plan_sft(sft, card))
    if grpo is not None:
        rank = None
        if grpo.adapter:  # the SFT adapter's rank sizes vLLM's LoRA slots; before SFT ran, the preset's SFT rank
            try:
                rank = adapter_rank(grpo.adapter)
            except OSError:
                rank = sft.model.lora.rank if sft is not None else None
        if grpo.model.name is None and sft is not None:  # GRPO continues the SFT adapter of the SFT model

            grpo = replace(grpo, model=replace(grpo.model, name=sft.model.name))
        out.append(plan_grpo(grpo, card, rank))
    return out


def format_plan(p: Plan) -> str:
    """Return a printable table of one estimate, its verdict and advice."""
    lines = [f"{p.phase} on {p.card} ({CARDS[p.card].gib:.1f} GiB, sm {CARDS[p.card].sm[0]}{CARDS[p.card].sm[1]}):"]
    if p.vllm:
        v = p.vllm
        lines.append(f"  vLLM share {v['budget']:6.2f} GiB: weights {v['weights']:.2f}, "
                     f"LoRA slots {v['lora slots']:.2f}, runtime {v['runtime']:.2f}, KV cache {v['kv']:.2f} "
                     f"(one sequence {v['kv_one_sequence']:.2f}, {v['sequences']:.1f} at once)")
    for k, x in p.parts.items():
        lines.append(f"  {k:<24}{x:6.2f} GiB")
    lines.append(f"  {'training total':<24}{p.training:6.2f} GiB of {p.limit:.2f} available")
    lines.append(f"  -> {'FITS' if p.fits else 'DOES NOT FIT'}")
    lines += [f"     {a}" for a in p.advice]
    return "\n".join(lines)
