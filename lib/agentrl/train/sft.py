"""Phase 03: LoRA SFT on curated agent trajectories with TRL's SFTTrainer, then a check with the new adapter.

Only assistant tokens carry loss (tool calls and final answers; prompts and tool responses do not):
TRL's ``assistant_only_loss`` with the ``{% generation %}`` training variant of the chat template, or
Unsloth's ``train_on_responses_only`` when TRL does not know the template. Sequences longer than
``max_length`` are dropped (default: a cut trajectory teaches the model to stop mid-task) or truncated,
and counted. Output, under ``runs/sft/<name>/``::

    adapter/        LoRA adapter + tokenizer (PeftModel, or vLLM with --enable-lora --max-lora-rank 64)
    merged/         16-bit merged model, when merge = true
    check/base/     agent run of the base model on held-out questions
    check/sft/      the same questions with the adapter
    metrics.json    loss curve, eval loss, before/after check metrics
    manifest.json   config, backend (and why), versions, counts
    trainer/runs/   TensorBoard logs
    log.jsonl       every logged step (loss, learning rate, grad norm, eval loss)
    trainer/checkpoint-<step>/  every ``save_steps`` steps; ``agentrl sft --resume`` continues from the last
    trainer/earlier-<n>/        an earlier run's checkpoints, moved aside by a run without --resume (--overwrite
                                deletes them instead)
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.core.io import DataError
from agentrl.train.models import ModelConfig
from agentrl.train.trl_args import sft_fields

log = logging.getLogger(__name__)


@dataclass
class SFTSettings:
    """The ``[sft]`` table of a preset."""

    name: str = "sft"
    data: str = "runs/data/sft_demo"  # curated dataset directory (trl/ export inside) or a trl .jsonl
    model: ModelConfig = field(default_factory=ModelConfig)
    adapter: str | None = None  # continue training this LoRA adapter (rejection-sampling fine-tuning: SFT's)
    epochs: float = 3.0
    max_steps: int = -1
    learning_rate: float = 2e-4
    lr_scheduler: str = "cosine"
    warmup: float = 0.03  # a fraction of the steps (< 1) or a number of steps
    weight_decay: float = 0.0
    optim: str = "adamw_torch"
    batch_size: int = 2
    grad_accum: int = 8
    max_length: int = 4096
    overlong: str = "drop"  # drop | truncate
    packing: bool = False
    eval_steps: int | None = None  # None = evaluate once per epoch
    logging_steps: int = 10
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # add "wandb" when configured
    seed: int = 42
    merge: bool = False
    check_questions: int = 20  # held-out questions for the inference check (0 = skip)
    check_offset: int | None = None  # where to start: [demo].train_questions, else 0; SFT-data questions skipped
    check_max_new_tokens: int = 128
    save_steps: int = 0  # a checkpoint (adapter, optimizer, RNG, trainer state) every N steps; 0 = none
    save_total_limit: int = 2  # checkpoints kept (older ones are deleted as new ones are written)
    trl: dict[str, Any] = field(default_factory=dict, metadata={"keys": sft_fields})  # any other SFTConfig field


def sft_config(preset: dict | None = None, **overrides) -> SFTSettings:
    """Return the preset's ``[sft]`` settings with non-None overrides (any SFTSettings field; ``model_name`` and
    ``backend`` go to the model table). An unknown override or a ``[sft.trl]`` field TRL lacks (or agentrl sets
    itself) is a DataError."""
    from dataclasses import replace

    from agentrl.core.config import from_dict
    from agentrl.train.trl_args import check_trl_table

    cfg = from_dict(SFTSettings, (preset or {}).get("sft"), "sft")
    o = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(o) - set(SFTSettings.__dataclass_fields__) - {"model_name", "backend"})
    if unknown:
        raise DataError(f"sft_config: unknown setting '{unknown[0]}' (SFTSettings fields, model_name, backend)")
    if "model_name" in o:
        cfg.model = replace(cfg.model, name=o.pop("model_name"))
    if "backend" in o:
        cfg.model = replace(cfg.model, backend=o.pop("backend"))
    cfg = replace(cfg, **o)
    check_trl_table(cfg.trl, "sft")
    return cfg


def print_sft_summary(metrics: dict, out: Path) -> None:
    """Print the loss curve summary and the before/after check."""
    loss = metrics["loss"]
    print(f"{out}: {metrics['steps']} steps on {metrics['backend']} ({metrics['backend_reason']}) x"
          f"{metrics['world_size']} process(es), "
          f"{metrics['train_seconds']} s; data {metrics['counts']}")
    if loss:
        first, last = loss[0], loss[-1]
        print(f"loss {first['loss']:.3f} (step {first['step']}) -> {last['loss']:.3f} (step {last['step']})")
    for name in ("base", "sft"):
        c = (metrics.get("check") or {}).get(name)
        if c:
            print(f"check {name:>4}: well-formed tool-call episodes {c['episodes_with_wellformed_call']:.2f}, "
                  f"tool calls/episode {c['mean_calls']:.2f}, f1 {c['f1']:.3f}, finish {c['finish']}")


def _data_file(data: str, split: str) -> Path:
    p = Path(data)
    if p.is_file():
        return p if split == "train" else p.with_name(f"{split}.jsonl")
    return p / "trl" / f"{split}.jsonl"


def length_filter(dataset, tokenizer, max_length: int, mode: str, chat_template: str | None):
    """Return ``(dataset, counts)`` with rows over ``max_length`` tokens dropped or marked for truncation.

    A truncated row must keep at least one assistant token, else it is dropped too.
    """
    import json

    if mode not in ("drop", "truncate"):
        raise DataError(f"sft.overlong must be 'drop' or 'truncate' (got {mode!r})")
    keep, over, no_assistant = [], 0, 0
    for i, row in enumerate(dataset):
        enc = tokenizer.apply_chat_template(row["messages"], tools=json.loads(row["tools"]) or None,
                                            chat_template=chat_template, return_dict=True,
                                            return_assistant_tokens_mask=chat_template is not None)
        n = len(enc["input_ids"])
        if n > max_length:
            over += 1
            mask = enc.get("assistant_masks")
            if mode == "drop" or (mask is not None and not any(mask[:max_length])):
                no_assistant += mode == "truncate"
                continue
        keep.append(i)
    counts = {"rows": len(dataset), "over_max_length": over,
              "dropped": len(dataset) - len(keep), "truncated": over - (len(dataset) - len(keep))}
    return dataset.select(keep), counts


def _training_template(tokenizer) -> tuple[str | None, bool]:
    """Return ``(template_with_generation_markers or None, trl_knows_it)``."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if has_generation_markers(tokenizer.chat_template):
        return tokenizer.chat_template, True
    try:
        return get_training_chat_template(tokenizer), True
    except ValueError:
        return None, False


@dataclass
class SFTResult:
    """What a training run produced: its metrics, the trained model and tokenizer, the run directory."""

    metrics: dict
    model: object
    tokenizer: object
    out: Path
    is_main: bool


def load_model(settings: SFTSettings):
    """Seed everything, then load the base model with LoRA on the chosen backend (agentrl.train.models)."""
    from agentrl.train.models import load_for_training

    # before trl is imported: Unsloth patches it
    return load_for_training(settings.model, adapter=settings.adapter, seed=settings.seed)


@dataclass
class SFTData:
    """The datasets a run trains and evaluates on, after the length filter."""

    train: object
    validation: object | None
    counts: dict
    train_path: Path
    template: str | None  # the {% generation %} template used for assistant masks
    trl_masks: bool  # TRL's assistant_only_loss can mask this template


def load_data(settings: SFTSettings, tokenizer) -> SFTData:
    """Return the train/validation datasets of ``settings.data``, filtered by length, with counts."""
    from agentrl.data.export import load_trl_dataset

    template, trl_knows = _training_template(tokenizer)
    train_path = _data_file(settings.data, "train")
    if not train_path.exists():
        raise DataError(f"{train_path}: no TRL dataset (run `agentrl curate` and `agentrl export` first)")
    train = load_trl_dataset(train_path)
    train, counts = length_filter(train, tokenizer, settings.max_length, settings.overlong, template)
    if len(train) == 0:
        raise DataError(f"{train_path}: no row fits max_length={settings.max_length} tokens "
                        f"({counts['over_max_length']} longer); raise sft.max_length or use overlong='truncate'")
    val_path = _data_file(settings.data, "validation")
    val = load_trl_dataset(val_path) if val_path.exists() and val_path.stat().st_size else None
    if val is not None:
        val, _ = length_filter(val, tokenizer, settings.max_length, settings.overlong, template)
        counts["validation"] = len(val)
        val = val if len(val) else None
    return SFTData(train, val, counts, train_path, template, trl_knows)


def without_heldout(data: SFTData, preset: dict) -> SFTData:
    """Return ``data`` without rows of the preset's held-out items (agentrl.train.heldout; one line says how many
    were dropped, counted in ``counts["heldout_dropped"]``); a DataError when nothing is left to train on."""
    from agentrl.core.metrics import normalize_answer
    from agentrl.train.heldout import heldout_keys

    keys = heldout_keys(preset)
    if not keys:
        return data

    def kept(row) -> bool:
        user = next((m.get("content") for m in row["messages"] if m.get("role") == "user"), "")
        return (str(row["id"]), normalize_answer(user if isinstance(user, str) else "")) not in keys

    before = len(data.train) + (len(data.validation) if data.validation is not None else 0)
    data.train = data.train.filter(kept)
    if data.validation is not None:
        data.validation = data.validation.filter(kept)
        data.validation = data.validation if len(data.validation) else None
    dropped = before - len(data.train) - (len(data.validation) if data.validation is not None else 0)
    data.counts["heldout_dropped"] = dropped
    if dropped:
        print(f"held-out hygiene: dropped {dropped} SFT rows of evaluation / GRPO held-out items of the preset "
              f"({data.train_path})")
    if len(data.train) == 0:
        raise DataError(f"{data.train_path}: every training row is a held-out item of the preset; nothing to train on")
    return data


def training_args(settings: SFTSettings, backend: str, data: SFTData | None, out: Path):
    """Return the SFTConfig of a run: the fields of :func:`trainer_kwargs` and the ``[sft.trl]`` table's
    (agentrl.train.trl_args)."""
    from trl import SFTConfig

    from agentrl.train.trl_args import with_trl

    return SFTConfig(**with_trl(trainer_kwargs(settings, backend, data, out), settings.trl, "sft"))


def trainer_kwargs(settings: SFTSettings, backend: str, data: SFTData | None, out: Path) -> dict:
    """Return the SFTConfig fields agentrl sets: the preset's fields, checkpoints every ``save_steps``, gradient
    checkpointing by the Trainer on the transformers backend only (Unsloth applies its own at load time:
    checkpoints.gradient_checkpointing)."""
    from agentrl.core.tracking import trackers
    from agentrl.train.checkpoints import gradient_checkpointing, save_args
    from agentrl.train.models import cuda_available, cuda_precision, progress_bars

    use_cpu = not cuda_available()
    has_val = data is not None and data.validation is not None
    return dict(
        output_dir=str(out / "trainer"), num_train_epochs=settings.epochs, max_steps=settings.max_steps,
        learning_rate=settings.learning_rate, lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=settings.warmup, weight_decay=settings.weight_decay, optim=settings.optim,
        per_device_train_batch_size=settings.batch_size, per_device_eval_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum, max_length=settings.max_length,
        truncation_mode="keep_start", packing=settings.packing,
        assistant_only_loss=data.trl_masks if data is not None else True,
        gradient_checkpointing=gradient_checkpointing(settings.model.gradient_checkpointing, backend),
        eval_strategy=("steps" if settings.eval_steps else "epoch") if has_val else "no",
        eval_steps=settings.eval_steps, logging_steps=settings.logging_steps, logging_first_step=True,
        report_to=trackers(settings.report_to), seed=settings.seed, use_cpu=use_cpu,
        **cuda_precision(settings.model), disable_tqdm=not progress_bars(),
        dataset_num_proc=None, remove_unused_columns=True, **save_args(settings.save_steps, settings.save_total_limit),
    )


def make_trainer(settings: SFTSettings, loaded, data: SFTData, out: Path, callbacks=()):
    """Return TRL's SFTTrainer for the loaded model and data (assistant-only loss)."""
    from trl import SFTTrainer

    args = training_args(settings, loaded.backend, data, out)
    trainer = SFTTrainer(model=loaded.model, args=args, train_dataset=data.train, eval_dataset=data.validation,
                         processing_class=loaded.tokenizer, callbacks=list(callbacks))
    if not data.trl_masks:
        if loaded.backend != "unsloth":
            raise DataError("TRL cannot mask assistant tokens for this chat template (no {% generation %} "
                            "variant is known); use a model whose template TRL recognises or the unsloth backend")
        from unsloth.chat_templates import train_on_responses_only

        trainer = train_on_responses_only(trainer, instruction_part="<|im_start|>user\n",
                                          response_part="<|im_start|>assistant\n")
    from agentrl.train.progress import attach_progress

    # a progress bar and loss chart instead of transformers' printed log dicts; the full log in out/log.jsonl
    attach_progress(trainer, f"SFT {settings.name}", out, shown=("loss", "eval_loss", "learning_rate"),
                    chart=("loss", "eval_loss"))
    return trainer


def train(trainer, loaded, data: SFTData, resume: bool = False, overwrite: bool = False) -> dict:
    """Run the training (from the last checkpoint when ``resume``; an earlier run's checkpoints are moved aside,
    or deleted when ``overwrite``); return the metrics (loss curve, eval loss, backend, world size, counts, and
    the checkpoint resumed from)."""
    from agentrl.train.checkpoints import prepare

    checkpoint = (prepare(trainer.args.output_dir, resume, overwrite) if trainer.is_world_process_zero() or resume
                  else None)
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    history = trainer.state.log_history
    return {
        "backend": loaded.backend, "backend_reason": loaded.reason,
        # the trainer's accelerator owns the process group (use_cpu -> gloo), not any PartialState made earlier
        "world_size": trainer.accelerator.num_processes,
        "train_seconds": round(time.perf_counter() - start, 1), "steps": trainer.state.global_step,
        "counts": data.counts, "resumed_from": checkpoint.name if checkpoint else None,
        "loss": [{"step": h["step"], "loss": h["loss"]} for h in history if "loss" in h],
        "eval_loss": [{"step": h["step"], "eval_loss": h["eval_loss"]} for h in history if "eval_loss" in h],
    }


def run_sft(settings: SFTSettings, preset: dict | None = None, *, runs: str | Path = "runs", resume: bool = False,
            overwrite: bool = False, callbacks=()) -> SFTResult:
    """Train (from the last checkpoint when ``resume``; ``overwrite`` deletes an earlier run's checkpoints instead
    of moving them aside), save the adapter (and merged model), run the inference check; return an SFTResult.

    Under ``accelerate launch`` every process trains; only the main one writes files and runs the check.
    """
    from agentrl.train.models import bitsandbytes_fallback

    settings = bitsandbytes_fallback(settings)
    out = Path(runs) / "sft" / settings.name
    loaded = load_model(settings)
    data = without_heldout(load_data(settings, loaded.tokenizer), preset or {})
    trainer = make_trainer(settings, loaded, data, out, callbacks)
    metrics = train(trainer, loaded, data, resume, overwrite)
    main = trainer.is_world_process_zero()
    if main:
        save_adapter(trainer.model, loaded.tokenizer, out, settings)
        if settings.check_questions > 0:
            metrics["check"] = inference_check(loaded.model, loaded.tokenizer, settings, preset or {}, out / "check")
        if settings.merge:
            metrics["merged"] = str(merge_adapter(loaded, out / "merged"))
        write_run(out, settings, metrics, data.train_path)
    return SFTResult(metrics, loaded.model, loaded.tokenizer, out, main)


def save_adapter(model, tokenizer, out: Path, settings: SFTSettings) -> Path:
    """Save the LoRA adapter and tokenizer to ``out/adapter`` (with the base model's name); return the path."""
    adapter = out / "adapter"
    model.save_pretrained(str(adapter))
    tokenizer.save_pretrained(str(adapter))
    (adapter / "base_model.txt").write_text(settings.model.name + "\n")
    return adapter


def inference_check(model, tokenizer, settings: SFTSettings, preset: dict, out: Path) -> dict:
    """Run the agent on held-out questions with the base model (adapter off) and with the adapter; return
    ``{"base": metrics, "sft": metrics}`` (answer metrics and tool-call quality)."""
    from agentrl.rollout.evaluate import build_task, eval_config, load_rows, run_eval
    from agentrl.rollout.local import LocalConfig, LocalPolicy

    offset = settings.check_offset
    if offset is None:
        offset = (preset.get("demo") or {}).get("train_questions", 0)
    cfg = eval_config(preset, policy="local", offset=offset, limit=None)
    rows = heldout_rows(load_rows(cfg, preset), settings.data)[:settings.check_questions]
    if not rows:
        log.warning("inference check skipped: every question from offset %d was in the SFT data", offset)
        return {}
    task = build_task(cfg, preset)
    model.eval()
    policy = LocalPolicy(LocalConfig(model=settings.model.name, max_new_tokens=settings.check_max_new_tokens),
                         model=model, tokenizer=tokenizer)
    results = {}
    with model.disable_adapter():
        policy.model = "base:" + Path(settings.model.name).name
        results["base"] = _check_metrics(run_eval(cfg, preset, overwrite=True, policy=policy, task=task,
                                                  out_dir=out / "base", rows=rows))
    policy.model = f"sft:{settings.name}"
    results["sft"] = _check_metrics(run_eval(cfg, preset, overwrite=True, policy=policy, task=task,
                                             out_dir=out / "sft", rows=rows))
    return results


def heldout_rows(rows: list[dict], data: str) -> list[dict]:
    """Return the ``rows`` whose id and normalised question appear in no split of the SFT dataset ``data``:
    a check on trained questions would measure memorisation, not the agent."""
    from agentrl.core.io import iter_jsonl
    from agentrl.core.metrics import normalize_answer

    ids, questions = set(), set()
    for split in ("train", "validation"):
        path = _data_file(data, split)
        if path.exists():
            for _, rec in iter_jsonl(path):
                ids.add(rec.get("id"))
                user = next((m.get("content") for m in rec.get("messages") or [] if m.get("role") == "user"), None)
                if isinstance(user, str):
                    questions.add(normalize_answer(user))
    return [r for r in rows if r["id"] not in ids and normalize_answer(r["question"]) not in questions]


def _check_metrics(m: dict) -> dict:
    return {"n": m["n"], **{k: m["overall"].get(k) for k in ("f1", "em")}, **m["tools"], "finish": m["finish"]}


def merge_adapter(loaded, out: Path) -> Path:
    """Save the base model with the LoRA weights merged in, in 16 bits, for serving; return the directory."""
    if loaded.backend == "unsloth":
        os.environ["UNSLOTH_AUTO_INSTALL"] = "0"  # saving must not install anything behind our back
        loaded.model.save_pretrained_merged(str(out), loaded.tokenizer, save_method="merged_16bit")
        return out
    import torch

    from agentrl.core.device import cuda_native_bf16
    from agentrl.train.models import cuda_available

    merged = loaded.model.merge_and_unload()
    # 16-bit for serving (vLLM loads bf16/fp16); fp16 on a GPU without native bf16 (T4); bf16 on CPU, where fp16
    # arithmetic is poorly supported
    dtype = torch.float16 if cuda_available() and not cuda_native_bf16() else torch.bfloat16
    merged.to(dtype).save_pretrained(str(out))
    loaded.tokenizer.save_pretrained(str(out))
    return out


def write_run(out: Path, settings: SFTSettings, metrics: dict, train_path: Path) -> None:
    """Write metrics.json and manifest.json of a training run."""
    from agentrl.core.config import to_dict
    from agentrl.core.io import write_json
    from agentrl.core.manifest import write_manifest

    write_json(out / "metrics.json", metrics)
    write_manifest(out, phase="sft", config=to_dict(settings),
                   counts={**metrics["counts"], "steps": metrics["steps"]},
                   inputs={"train": train_path, "model": settings.model.name},
                   extra={"backend": metrics["backend"], "backend_reason": metrics["backend_reason"]})
