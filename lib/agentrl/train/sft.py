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

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from agentrl.core.chat import first_user_text
from agentrl.core.device import cuda_native_bf16
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, iter_jsonl, write_json, write_jsonl
from agentrl.core.manifest import write_manifest
from agentrl.core.metrics import normalize_answer
from agentrl.core.tracking import trackers
from agentrl.data.export import trl_dataset, trl_rows
from agentrl.envs import registry
from agentrl.rollout.evaluate import EvalConfig, build_task, run_eval
from agentrl.rollout.local import LocalConfig, LocalPolicy
from agentrl.train.checkpoints import gradient_checkpointing, prepare
from agentrl.train.configs import SFTSettings, record, trl_args
from agentrl.train.models import (
    base_model,
    bitsandbytes_fallback,
    cuda_available,
    cuda_precision,
    load_for_training,
    prepare_backend,
    progress_bars,
)
from agentrl.train.progress import attach_progress
from agentrl.train.sft_trainer import sft_trainer_class

log = logging.getLogger(__name__)

__all__ = ["SFTSettings", "run_sft", "load_model", "load_data", "make_trainer", "train"]


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
    """Seed everything, then load the base model with LoRA on the chosen backend (agentrl.train.models); Unsloth is
    imported before anything imports TRL."""
    return load_for_training(settings.model, adapter=settings.adapter, seed=settings.seed,
                             gradient_checkpointing=settings.gradient_checkpointing)


@dataclass
class SFTData:
    """The datasets a run trains and evaluates on, after the held-out gate and the length filter."""

    train: object
    validation: object | None
    counts: dict
    train_path: Path
    template: str | None  # the {% generation %} template used for assistant masks
    trl_masks: bool  # TRL's assistant_only_loss can mask this template
    items: list[dict]  # id and question of every training row (train_items.jsonl)


@dataclass
class GatedRows:
    """The rows of an SFT dataset that passed the held-out gate (train and validation), before any tokenizer."""

    train: list[dict]
    validation: list[dict]
    train_path: Path
    dropped: int


def gated_rows(settings: SFTSettings, heldout: HeldOut) -> GatedRows:
    """Return the rows of ``settings.data`` without the held-out items (the preset's gate: one line says how many were
    dropped; a DataError when no training row is left, or when the data does not exist). Needs no model."""
    train_path = _data_file(settings.data, "train")
    if not train_path.exists():
        raise DataError(f"{train_path}: no TRL dataset (run `agentrl curate` and `agentrl export`, or `agentrl export "
                        "--successes` for rejection sampling, first)")
    what = f"SFT rows of {train_path}"
    rows = heldout.drop(trl_rows(train_path), what)
    val_path = _data_file(settings.data, "validation")
    val_rows = trl_rows(val_path) if val_path.exists() and val_path.stat().st_size else []
    val = [r for r in val_rows if not heldout.matches(r) and not heldout.near(r)]
    return GatedRows(rows, val, train_path, heldout.dropped[what] + heldout.near_copies[what])


def load_data(settings: SFTSettings, tokenizer, heldout: HeldOut, gated: GatedRows | None = None) -> SFTData:
    """Return the train/validation datasets of ``settings.data``: rows of held-out items dropped (:func:`gated_rows`,
    or ``gated`` when the run gated them already, before loading the model), then the length filter, with counts
    (``heldout_dropped`` among them)."""
    template, trl_knows = _training_template(tokenizer)
    gated = gated or gated_rows(settings, heldout)
    train, counts = length_filter(trl_dataset(gated.train), tokenizer, settings.max_length, settings.overlong,
                                  template)
    counts["heldout_dropped"] = gated.dropped
    if len(train) == 0:
        raise DataError(f"{gated.train_path}: no row fits max_length={settings.max_length} tokens "
                        f"({counts['over_max_length']} longer); raise sft.max_length or use overlong='truncate'")
    val = None
    if gated.validation:
        val, _ = length_filter(trl_dataset(gated.validation), tokenizer, settings.max_length, settings.overlong,
                               template)
        counts["validation"] = len(val)
        val = val if len(val) else None
    items = [{"id": r["id"], "question": first_user_text(r["messages"])} for r in train]
    return SFTData(train, val, counts, gated.train_path, template, trl_knows, items)


def derived_args(settings: SFTSettings, backend: str, data: SFTData | None, out: Path) -> dict:
    """Return the SFTConfig fields agentrl derives (agentrl.train.configs.DERIVED): the output directory, the
    machine's precision, assistant-only loss where TRL can mask the template, evaluation on a validation split
    (every epoch, or every ``eval_steps``) unless the preset chose, gradient checkpointing by the Trainer on the
    transformers backend only (Unsloth applies its own at load time)."""
    has_val = data is not None and data.validation is not None
    out_args = {"output_dir": str(out / "trainer"), "use_cpu": not cuda_available(), **cuda_precision(settings.model),
                "disable_tqdm": not progress_bars(), "assistant_only_loss": data.trl_masks if data else True,
                "gradient_checkpointing": gradient_checkpointing(settings.gradient_checkpointing, backend),
                "report_to": trackers(settings.report_to)}
    if "eval_strategy" not in settings.trl or not has_val:
        if "eval_strategy" in settings.trl and settings.eval_strategy != "no":
            print(f"sft.eval_strategy = {settings.eval_strategy!r}: {settings.data} has no validation split; "
                  "nothing to evaluate")
        out_args["eval_strategy"] = ("steps" if settings.eval_steps else "epoch") if has_val else "no"
    return out_args


def make_trainer(settings: SFTSettings, loaded, data: SFTData, args):
    """Return TRL's SFTTrainer for the loaded model, the data and TRL config ``args`` (agentrl.train.configs.trl_args;
    assistant-only loss), with a progress bar and loss chart in place of transformers' printed log dicts."""
    from trl import SFTTrainer

    trainer = sft_trainer_class(SFTTrainer)(model=loaded.model, args=args, train_dataset=data.train,
                                            eval_dataset=data.validation, processing_class=loaded.tokenizer)
    trainer.agentrl_settings, trainer.agentrl_backend = settings, loaded.backend
    if not data.trl_masks:
        if loaded.backend != "unsloth":
            raise DataError("TRL cannot mask assistant tokens for this chat template (no {% generation %} "
                            "variant is known); use a model whose template TRL recognises or the unsloth backend")
        from unsloth.chat_templates import train_on_responses_only

        trainer = train_on_responses_only(trainer, instruction_part="<|im_start|>user\n",
                                          response_part="<|im_start|>assistant\n")
    # the full log in out/log.jsonl
    attach_progress(trainer, f"SFT {settings.name}", Path(args.output_dir).parent,
                    shown=("loss", "eval_loss", "learning_rate"), chart=("loss", "eval_loss"))
    return trainer


def build_args(settings: SFTSettings, data: SFTData | None, out: Path, backend: str | None = None):
    """Return the run's SFTConfig (agentrl.train.configs.trl_args) on ``backend`` (default: the one this machine picks
    for the settings, Unsloth imported first)."""
    backend = backend or prepare_backend(settings.model)[0]
    return trl_args(settings, derived_args(settings, backend, data, out))


def train(trainer, loaded, data: SFTData, resume: bool = False, overwrite: bool = False) -> dict:
    """Run the training (from the last checkpoint when ``resume``; an earlier run's checkpoints are moved aside,
    or deleted when ``overwrite``); return the metrics (loss curve, eval loss, backend, world size, counts, and
    the checkpoint resumed from)."""
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


def preflight(settings: SFTSettings) -> None:
    """Check ``settings`` as TRL will at training start (its SFTConfig's own checks of the values), before anything
    is built or loaded: a DataError naming the table otherwise."""
    backend, _ = prepare_backend(settings.model)
    trl_args(settings, derived_args(settings, backend, None, Path("runs") / "sft" / settings.name))


def run_sft(settings: SFTSettings, heldout: HeldOut, check: EvalConfig | None = None, preset: dict | None = None, *,
            runs: str | Path = "runs", resume: bool = False, overwrite: bool = False, callbacks=(),
            source: dict | None = None) -> SFTResult:
    """Train (from the last checkpoint when ``resume``; ``overwrite`` deletes an earlier run's checkpoints instead
    of moving them aside) on the data through the held-out gate ``heldout``, save the adapter (and merged model), run
    the inference check on ``check``'s environment; return an SFTResult. ``preset`` is the merged preset's tables,
    ``source`` what the manifest says of it.

    Under ``accelerate launch`` every process trains; only the main one writes files and runs the check.
    """
    settings = bitsandbytes_fallback(settings)
    out = Path(runs) / "sft" / settings.name
    backend, _ = prepare_backend(settings.model)
    # TRL's own checks of the values before the model loads; the config the run trains with is built below, once the
    # data says whether there is a validation split and whether TRL can mask the template
    preflight(settings)
    gated = gated_rows(settings, heldout)  # the held-out gate, before the model loads
    loaded = load_model(settings)
    data = load_data(settings, loaded.tokenizer, heldout, gated)
    trainer = make_trainer(settings, loaded, data, build_args(settings, data, out, backend))
    for callback in callbacks:
        trainer.add_callback(callback)
    metrics = train(trainer, loaded, data, resume, overwrite)
    main = trainer.is_world_process_zero()
    if main:
        save_adapter(trainer.model, loaded.tokenizer, out, settings)
        if settings.check_questions > 0 and check is not None:
            metrics["check"] = inference_check(loaded.model, loaded.tokenizer, settings, check, preset, out / "check")
        if settings.merge:
            metrics["merged"] = str(merge_adapter(loaded, out / "merged"))
        write_run(out, settings, metrics, data, heldout, source)
    return SFTResult(metrics, loaded.model, loaded.tokenizer, out, main)


def save_adapter(model, tokenizer, out: Path, settings: SFTSettings) -> Path:
    """Save the LoRA adapter and tokenizer to ``out/adapter`` (with the base model's name); return the path."""
    adapter = out / "adapter"
    model.save_pretrained(str(adapter))
    tokenizer.save_pretrained(str(adapter))
    (adapter / "base_model.txt").write_text(base_model(settings.model, settings.adapter) + "\n")
    return adapter


def inference_check(model, tokenizer, settings: SFTSettings, check: EvalConfig, preset: dict | None,
                    out: Path) -> dict:
    """Run the agent on the first ``check_questions`` held-out items of ``check``'s environment (its ``heldout``
    split, without any question of the SFT data) with the base model (adapter off) and with the adapter; return
    ``{"base": metrics, "sft": metrics}`` (answer metrics and tool-call quality)."""
    rows = registry.split_rows(registry.get(check.env), "heldout", check.env_settings, preset)
    rows = heldout_rows(rows, settings.data)[:settings.check_questions]
    if not rows:
        log.warning("inference check skipped: every held-out question was in the SFT data")
        return {}
    cfg = EvalConfig(name=f"{settings.name}_check", env=check.env, policy="local", run=check.run,
                     envs={check.env: check.env_settings})
    task = build_task(cfg, preset)
    model.eval()
    name = base_model(settings.model, settings.adapter)
    policy = LocalPolicy(LocalConfig(model=name, max_new_tokens=task.max_new_tokens), model=model,  # the env's budget
                         tokenizer=tokenizer)
    results = {"budget": registry.budget_of(task)}
    with model.disable_adapter():
        policy.model = "base:" + Path(name).name
        results["base"] = _check_metrics(run_eval(cfg, preset, overwrite=True, policy=policy, task=task,
                                                  out_dir=out / "base", rows=rows))
    policy.model = f"sft:{settings.name}"
    results["sft"] = _check_metrics(run_eval(cfg, preset, overwrite=True, policy=policy, task=task,
                                             out_dir=out / "sft", rows=rows))
    return results


def heldout_rows(rows: list[dict], data: str) -> list[dict]:
    """Return the ``rows`` whose id and normalised question appear in no split of the SFT dataset ``data``:
    a check on trained questions would measure memorisation, not the agent."""
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

    merged = loaded.model.merge_and_unload()
    # 16-bit for serving (vLLM loads bf16/fp16); fp16 on a GPU without native bf16 (T4); bf16 on CPU, where fp16
    # arithmetic is poorly supported
    dtype = torch.float16 if cuda_available() and not cuda_native_bf16() else torch.bfloat16
    merged.to(dtype).save_pretrained(str(out))
    loaded.tokenizer.save_pretrained(str(out))
    return out


def write_run(out: Path, settings: SFTSettings, metrics: dict, data: SFTData, heldout: HeldOut,
              source: dict | None = None) -> None:
    """Write metrics.json, train_items.jsonl (what the run trained on) and manifest.json of a training run."""
    write_json(out / "metrics.json", metrics)
    write_jsonl(out / "train_items.jsonl", data.items)
    write_manifest(out, phase="sft", config=record(settings),
                   counts={**metrics["counts"], "steps": metrics["steps"]},
                   inputs={"train": data.train_path, "model": base_model(settings.model, settings.adapter)},
                   extra={"backend": metrics["backend"], "backend_reason": metrics["backend_reason"],
                          "heldout": heldout.describe(), "preset": source or {}})
