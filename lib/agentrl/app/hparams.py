"""A training notebook's hyperparameter form: the phase's settings with a one-line help each, defaults from the preset.

The form's values become an overrides table (:func:`overrides`: only what the user changed), the last layer of the
preset's one merge (``Preset.with_layer``, agentrl.app.presets), so validation and the manifest (the run's effective
settings) see them like any preset value, reported as written in "the notebook's form".
"""

from __future__ import annotations

# the knobs a user turns most, each with one line (Unsloth's notebooks comment every one); dotted names are nested
HELP = {
    "sft": {
        "max_steps": "optimizer steps (-1: train `num_train_epochs` passes over the data)",
        "num_train_epochs": "passes over the training data when max_steps is -1",
        "learning_rate": "peak learning rate of the LoRA weights (2e-4 is usual for LoRA SFT)",
        "lr_scheduler_type": "learning-rate schedule after warmup",
        "warmup_steps": "warmup: a fraction of the steps (< 1) or a number of steps",
        "per_device_train_batch_size": "sequences per device per micro-batch",
        "gradient_accumulation_steps": "micro-batches per optimizer step (effective batch = batch x accumulation x "
                                       "GPUs)",
        "max_length": "tokens per sequence; longer trajectories are dropped or truncated (`overlong`)",
        "overlong": "drop (a cut trajectory teaches stopping mid-task) or truncate over-long sequences",
        "weight_decay": "AdamW weight decay",
        "logging_steps": "steps between logged losses (the chart's points, log.jsonl)",
        "save_steps": "a checkpoint every N steps, for --resume (0: none)",
        "seed": "seed for data order, LoRA init and sampling",
        "model.lora.r": "LoRA rank: capacity of the adapter (vLLM serves ranks up to --max-lora-rank)",
        "model.lora.alpha": "LoRA scale numerator (the update is scaled by alpha / r)",
        "model.lora.dropout": "dropout on the LoRA input",
        "check_questions": "held-out questions for the base-vs-adapter check after training (0: skip)",
    },
    "grpo": {
        "max_steps": "optimizer steps",
        "learning_rate": "learning rate of the LoRA weights (RL wants it small: 1e-6 .. 5e-6 on large models)",
        "num_generations": "rollouts per prompt: the group whose rewards are compared",
        "per_device_train_batch_size": "rollouts per device per step (a multiple of num_generations)",
        "gradient_accumulation_steps": "micro-batches per optimizer step",
        "max_completion_length": "tokens per rollout, tool results included",
        "max_tool_calling_iterations": "tool calls a rollout may make",
        "temperature": "sampling temperature of the rollouts",
        "beta": "KL penalty toward the reference policy (0: none, no reference model kept)",
        "loss_type": "loss aggregation: dapo (token-level), grpo, dr_grpo, bnpo, cispo",
        "epsilon": "lower clip range of the policy ratio",
        "scale_rewards": "advantage normalisation: group, batch or none",
        "eval_every": "steps between held-out agent evaluations (0: only at the end)",
        "eval_questions": "held-out items evaluated (never trained on)",
        "save_steps": "a checkpoint every N steps, for --resume (0: none)",
        "seed": "seed for sampling and data order",
    },
}


def _get(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def fields(section: str, settings) -> dict[str, tuple[object, str]]:
    """Return ``{name: (current value, help)}`` for the form of ``section`` ("sft" or "grpo"), values read from
    ``settings`` (the preset's, after any command-line override)."""
    return {name: (_get(settings, name), text) for name, text in HELP[section].items()}


def form(section: str, settings):
    """Return a ``mo.ui.dictionary`` of one widget per field (numbers, text, dropdowns), labelled ``name — help``,
    defaults from ``settings``."""
    import marimo as mo

    choices = {"lr_scheduler_type": ["linear", "cosine", "constant", "constant_with_warmup"],
               "overlong": ["drop", "truncate"], "loss_type": ["dapo", "grpo", "dr_grpo", "bnpo", "cispo"],
               "scale_rewards": ["group", "batch", "none"]}
    widgets = {}
    for name, (value, text) in fields(section, settings).items():
        label = f"`{name}` — {text}"
        if name in choices:
            options = list(dict.fromkeys([str(value), *choices[name]]))
            widgets[name] = mo.ui.dropdown(options, value=str(value), label=label)
        elif isinstance(value, bool):
            widgets[name] = mo.ui.checkbox(value=value, label=label)
        elif isinstance(value, (int, float)):
            step = 1 if isinstance(value, int) else None
            widgets[name] = mo.ui.number(value=value, step=step, label=label, full_width=True)
        else:
            widgets[name] = mo.ui.text(value="" if value is None else str(value), label=label, full_width=True)
    return mo.ui.dictionary(widgets)


def overrides(values: dict, settings) -> dict:
    """Return the nested table of the values that differ from ``settings`` (``{"model": {"lora": {"r": 16}}}``),
    each converted to the type of the setting it replaces."""
    out: dict = {}
    for name, value in values.items():
        current = _get(settings, name)
        if current is not None and not isinstance(current, bool) and isinstance(current, (int, float)):
            value = type(current)(value)
        if value == current or (current is None and value in ("", None)):
            continue
        node = out
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
