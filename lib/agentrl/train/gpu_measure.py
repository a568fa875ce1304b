"""``agentrl gpu-plan --measure``: a preset's SFT and GRPO run for a few real steps on this machine, before any
weights are downloaded, and the measured peak memory and step time are set beside the plan (agentrl.train.gpu_plan).

The model is the preset's architecture with random weights: its ``config.json`` when the preset names a local
directory, else the shapes :data:`agentrl.train.gpu_plan.ARCHS` holds for it (taken from each model's config on the
hub, so no network is needed), else the hub's config. The weights are written once to a scratch directory, so every
backend (transformers + peft, Unsloth, 4-bit) loads them the way it loads a real checkpoint. The tokenizer is the
project's tiny offline BPE tokenizer with Qwen3's chat template: only shapes and lengths matter here. SFT trains on
synthetic agent conversations of about ``max_length`` tokens at the preset's micro-batch; GRPO continues that adapter
in the SQL environment with its tool in the rollouts, at the preset's batch and completion length (a random model
never stops, so every completion runs to the limit, as the plan assumes). On a machine without CUDA the shapes and
lengths shrink to :data:`CPU` (the CI check of this command): step times are printed, memory is not compared.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agentrl import envs
from agentrl.core.io import DataError, write_json
from agentrl.core.manifest import write_manifest
from agentrl.core.progress import quiet_library_output
from agentrl.data.export import to_trl
from agentrl.train import gpu_plan
from agentrl.train.grpo import run_grpo
from agentrl.train.models import bitsandbytes_fallback
from agentrl.train.sft import run_sft
from agentrl.train.tiny import ensure_tiny_model

STEPS = {"sft": 3, "grpo": 2}  # the first step warms up (kernels, allocator): the median of the others is reported
# the CPU check: every shape and length small enough for a 2-core machine; the code path is the GPU's
CPU = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 8192}
CPU_LENGTHS = {"max_length": 384, "sft_batch": 2, "num_generations": 2, "max_completion_length": 32}
# model family -> (model_type, architecture) of a config built from gpu_plan.ARCHS shapes
FAMILIES = {"qwen3": ("qwen3", "Qwen3ForCausalLM"), "qwen2.5": ("qwen2", "Qwen2ForCausalLM"),
            "llama": ("llama", "LlamaForCausalLM"), "mistral": ("mistral", "MistralForCausalLM"),
            "smollm2": ("llama", "LlamaForCausalLM")}
OFF_BY = 0.10  # a measured peak further than this from the plan is reported as the plan's error


def model_config(model: str, cpu: bool) -> dict:
    """Return the ``config.json`` (a dict) of ``model``'s architecture: a local directory's own, else one built from
    the shapes gpu_plan knows for the hub id, else the hub's (network); shrunk to :data:`CPU` when ``cpu``."""
    local = Path(model) / "config.json"
    if local.is_file():
        config = json.loads(local.read_text(encoding="utf-8"))
    else:
        short = model.rsplit("/", 1)[-1].lower()
        family = next((f for f in sorted(FAMILIES, key=len, reverse=True) if short.startswith(f)), None)
        if family is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(model).to_dict()  # a model gpu_plan has no shapes for: the hub's
        else:
            a = gpu_plan.arch_for(model)
            model_type, architecture = FAMILIES[family]
            config = {"model_type": model_type, "architectures": [architecture], "hidden_size": a.hidden,
                      "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
                      "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
                      "vocab_size": a.vocab, "tie_word_embeddings": a.tied, "max_position_embeddings": 32768,
                      "rms_norm_eps": 1e-6, "hidden_act": "silu"}
    config = {**config, **(CPU if cpu else {})}
    config.pop("quantization_config", None)  # a pre-quantised checkpoint's: the random weights are 16-bit
    return config


def random_model(model: str, out: Path, device: str) -> Path:
    """Write ``model``'s architecture with random 16-bit weights and the tiny tokenizer to ``out``; return ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tokenizer_dir = ensure_tiny_model()  # the offline BPE tokenizer with Qwen3's chat template
    out.mkdir(parents=True, exist_ok=True)
    for f in tokenizer_dir.iterdir():
        if f.is_file() and f.suffix in (".json", ".jinja", ".txt") and f.name not in ("config.json",
                                                                                       "generation_config.json"):
            shutil.copy(f, out / f.name)
    ids = json.loads((tokenizer_dir / "config.json").read_text())
    config = {**model_config(model, device == "cpu"), "torch_dtype": "bfloat16",
              **{k: ids[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in ids}}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    with torch.device(device):
        net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), dtype=torch.bfloat16)
    net.save_pretrained(out)
    del net
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def sft_rows(tokenizer, n: int, target: int) -> list[dict]:
    """Return ``n`` TRL rows (agent trajectories: system, question, an SQL tool call, its result, the answer) of
    about ``target`` tokens each, mostly assistant text (what carries the loss)."""
    rng = random.Random(0)
    words = ["table", "rows", "count", "select", "where", "answer", "city", "year", "value", "total", "the", "of"]
    tools = [{"type": "function", "function": {"name": "execute_sql", "description": "Run one SQL statement",
                                               "parameters": {"type": "object", "properties": {
                                                   "query": {"type": "string", "description": "SQL"}},
                                                   "required": ["query"]}}}]

    def row(i: int, k: int) -> dict:
        text = " ".join(rng.choice(words) for _ in range(k))
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "execute_sql", "arguments": json.dumps({"query": 'SELECT COUNT(*) FROM "t"'})}}
        return to_trl({"id": f"measure-{i}", "tools": tools, "messages": [
            {"role": "system", "content": "You are a database agent. Use the execute_sql tool."},
            {"role": "user", "content": f"Question {i}: how many rows does the table have?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": text[: len(text) // 4]},
            {"role": "assistant", "content": f"{text}\n<answer>{k}</answer>"}]})

    def length(r: dict) -> int:
        return len(tokenizer.apply_chat_template(r["messages"], tools=json.loads(r["tools"]), tokenize=True,
                                                 return_dict=True)["input_ids"])

    lo, hi = 8, 8
    while length(row(0, hi)) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 4:  # the most words that still fit under target tokens
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if length(row(0, mid)) <= target else (lo, mid)
    return [row(i, lo) for i in range(n)]


def meter(device: str):
    """Return a TrainerCallback recording each step's time and the peak CUDA memory allocated from the start of
    training (``.steps``: seconds, ``.peak``, ``.reserved``: bytes)."""
    import torch
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        def __init__(self):
            self.steps, self.peak, self.reserved, self.t0 = [], 0, 0, 0.0

        def _sync(self):
            if device == "cuda":
                torch.cuda.synchronize()

        def on_train_begin(self, args, state, control, **kwargs):
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()

        def on_step_begin(self, args, state, control, **kwargs):
            self._sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self._sync()
            self.steps.append(time.perf_counter() - self.t0)
            if device == "cuda":
                self.peak = max(self.peak, torch.cuda.max_memory_allocated())
                self.reserved = max(self.reserved, torch.cuda.max_memory_reserved())

    return Meter()


@dataclasses.dataclass
class Measured:
    """One phase's measurement beside its plan."""

    phase: str
    steps: list[float]
    tokens_per_step: int
    peak_gib: float | None  # None on CPU
    plan_gib: float | None  # the plan's training total less its CUDA-context allowance (not in max_memory_allocated)
    limit_gib: float | None
    advice: list[str]
    note: str = ""

    @property
    def step_s(self) -> float:
        """The median step time after the first (warm-up) step."""
        return statistics.median(self.steps[1:] or self.steps)

    def verdict(self) -> str:
        """Return ``fits``, ``does not fit: <what to change>``, or what a CPU run can and cannot say."""
        if self.peak_gib is None:
            return "CPU: shapes shrunk, memory not measured (run on the GPU)"
        context = gpu_plan.CONTEXT_GIB
        if self.limit_gib is not None and self.peak_gib + context > self.limit_gib:
            change = "; ".join(self.advice) or "lower the batch or the lengths, or turn on gradient checkpointing"
            return f"does not fit ({self.peak_gib + context:.1f} of {self.limit_gib:.1f} GiB): {change}"
        off = "" if not self.plan_gib or abs(self.peak_gib / self.plan_gib - 1) <= OFF_BY else \
            f"; the plan is off by {100 * (self.peak_gib / self.plan_gib - 1):+.0f}% (docs/colab.md)"
        return f"fits ({self.peak_gib + context:.1f} of {self.limit_gib:.1f} GiB){off}" if self.limit_gib else \
            f"measured{off}"


def _phase(name: str, m, tokens: int, plan, cpu: bool, note: str) -> Measured:
    if not m.steps:
        raise DataError(f"gpu-plan --measure: {name} ran no step")
    planned = round(plan.training - plan.parts.get("cuda context", 0.0), 2) if plan else None
    return Measured(name, m.steps, tokens, None if cpu else m.peak / gpu_plan.GIB, planned,
                    plan.limit if plan else None, list(plan.advice) if plan else [], note)


def measure(preset, card: str | None, out: Path, steps: dict | None = None) -> list[Measured]:
    """Run the preset's SFT and GRPO for a few steps on this machine (CUDA when present, else the CPU at tiny shapes)
    with random weights of its model; return one Measured per phase and write ``out/measure.json`` + manifest."""
    import torch

    steps = {**STEPS, **(steps or {})}
    quiet_library_output()  # the phases' progress lines, not the libraries' loading and map bars
    cpu = not torch.cuda.is_available()
    device = "cpu" if cpu else "cuda"
    sft0 = preset.sft() if "sft" in preset else None
    grpo0 = preset.grpo() if "grpo" in preset else None
    model = (sft0.model.name if sft0 else None) or (grpo0.model.name if grpo0 else None)
    if not model:
        raise DataError(f"gpu-plan --measure: {preset.path} names no model ([sft.model] or [grpo.model] name)")
    out.mkdir(parents=True, exist_ok=True)
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(dir=out, prefix="scratch-") as scratch:
        scratch = Path(scratch)
        t = time.perf_counter()
        mdir = random_model(model, scratch / "model", device)
        print(f"random weights of {model}'s architecture on {device} ({time.perf_counter() - t:.0f} s)", flush=True)
        adapter = None
        if sft0 is not None:
            results.append(_measure_sft(preset, card, mdir, scratch, steps["sft"], device))
            adapter = scratch / "runs" / "sft" / "measure_sft" / "adapter"
        if grpo0 is not None:
            results.append(_measure_grpo(preset, card, mdir, scratch, steps["grpo"], device, adapter))
    report = {"preset": preset.name, "card": card, "device": device, "model": model,
              "phases": [{**dataclasses.asdict(r), "step_s": r.step_s, "verdict": r.verdict()} for r in results]}
    write_json(out / "measure.json", report)
    write_manifest(out, phase="gpu-plan", config=preset.describe(), extra={"measure": report})
    return results


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _measure_sft(preset, card, mdir: Path, scratch: Path, n: int, device: str) -> Measured:
    from transformers import AutoTokenizer

    base = preset.sft()
    cpu = device == "cpu"
    max_length = CPU_LENGTHS["max_length"] if cpu else base.max_length
    batch = CPU_LENGTHS["sft_batch"] if cpu else base.per_device_train_batch_size
    tokenizer = AutoTokenizer.from_pretrained(str(mdir))
    rows = sft_rows(tokenizer, batch * n, int(max_length * 0.97))
    data = scratch / "data"
    (data / "trl").mkdir(parents=True)
    (data / "trl" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokens = len(tokenizer.apply_chat_template(rows[0]["messages"], tools=json.loads(rows[0]["tools"]),
                                               tokenize=True, return_dict=True)["input_ids"])
    p = preset.with_layer({"sft": {
        "name": "measure_sft", "data": str(data), "model": {"name": str(mdir)}, "max_steps": n,
        "per_device_train_batch_size": batch, "gradient_accumulation_steps": 1, "max_length": max_length,
        "logging_steps": 1, "report_to": [], "check_questions": 0, "merge": False, "save_strategy": "no"}},
        "gpu-plan --measure")
    settings = bitsandbytes_fallback(p.sft())  # what runs here (and what the plan must size): 8-bit Adam needs bnb
    plan = gpu_plan.plan_sft(settings, card) if card and not cpu else None
    m = meter(device)
    run_sft(settings, p.heldout, runs=scratch / "runs", overwrite=True, callbacks=[m])
    _free(device)
    return _phase("sft", m, batch * tokens, plan, cpu, f"batch {batch} x {tokens} tokens, optim {settings.optim}")


def _measure_grpo(preset, card, mdir: Path, scratch: Path, n: int, device: str, adapter: Path | None) -> Measured:
    base = preset.grpo()
    cpu = device == "cpu"
    table = {"name": "measure_grpo", "env": envs.MEASURE, "model": {"name": str(mdir)}, "max_steps": n,
             "gradient_accumulation_steps": 1, "eval_questions": 0, "report_to": [], "log_completions": False,
             "save_strategy": "no", "logging_steps": 1, "skip_equal_groups": False,
             "adapter": str(adapter) if base.adapter and adapter and adapter.is_dir() else ""}
    if cpu:
        g = CPU_LENGTHS["num_generations"]
        table.update(num_generations=g, per_device_train_batch_size=g,
                     max_completion_length=CPU_LENGTHS["max_completion_length"])
    vllm = base.use_vllm or base.model.fast_inference
    note = ""
    if vllm and (cpu or importlib.util.find_spec("vllm") is None):
        table.update(use_vllm=False)
        table["model"]["fast_inference"] = False
        note = "vLLM not installed here: generation measured with transformers' generate; "
        print(f"note: {note.rstrip('; ')}", flush=True)
    p = preset.with_layer({"grpo": table}, "gpu-plan --measure")
    settings = bitsandbytes_fallback(p.grpo())
    plan = gpu_plan.plans(None, settings, card)[0] if card and not cpu else None
    m = meter(device)
    run_grpo(settings, p.heldout, p.data, runs=scratch / "runs", overwrite=True, callbacks=[m])
    _free(device)
    tokens = settings.per_device_train_batch_size * settings.max_completion_length
    start = "SFT" if settings.adapter else "fresh"
    return _phase("grpo", m, tokens, plan, cpu, f"{note}{settings.num_generations} generations x "
                  f"{settings.max_completion_length} tokens, env {settings.env}, adapter {start}")


def format_measured(results: list[Measured], preset: str, card: str | None, device: str) -> str:
    """Return the printed table: per phase the step time, tokens/s, measured peak vs plan, and the verdict."""
    where = f"on {card}" if device == "cuda" else "on the CPU at tiny shapes (the plan needs the card's run)"
    lines = [f"gpu-plan --measure: {preset} {where}, random weights of its model's architecture",
             f"{'phase':<6} {'steps':>5} {'s/step':>8} {'tokens/s':>9} {'peak GiB':>9} {'plan GiB':>9} {'ratio':>6}"
             "  verdict"]
    for r in results:
        peak = f"{r.peak_gib:9.2f}" if r.peak_gib is not None else f"{'n/a':>9}"
        plan = f"{r.plan_gib:9.2f}" if r.plan_gib is not None else f"{'n/a':>9}"
        ratio = f"{r.peak_gib / r.plan_gib:6.2f}" if r.peak_gib is not None and r.plan_gib else f"{'':>6}"
        lines.append(f"{r.phase:<6} {len(r.steps):>5} {r.step_s:8.2f} {r.tokens_per_step / r.step_s:9,.0f} "
                     f"{peak} {plan} {ratio}  {r.verdict()}")
        lines.append(f"{'':<6} {r.note}")
    return "\n".join(lines)
