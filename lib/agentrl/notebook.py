"""Helpers the phase notebooks share, so the notebooks stay thin and the rules live in one tested place.

A notebook runs in four places: ``marimo edit`` (interactive), ``marimo run``, ``python notebooks/x.py``
(script) and as an exported ipynb in Jupyter/Colab, where ``mo.cli_args()`` raises and
``mo.app_meta().mode`` is None. Expensive cells are gated by a run button only where a person can press it.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.config import REPO_ROOT


def cli_args() -> dict:
    """Return the notebook's arguments: ``python nb.py -- --name x`` under marimo; in Jupyter (no command line)
    the ``AGENTRL_NB_ARGS`` environment variable (same ``--key value`` syntax); else {}."""
    try:
        import marimo as mo

        args = dict(mo.cli_args())
    except Exception:  # Jupyter / exported scripts: no marimo context
        args = {}
    return args or parse_args(os.environ.get("AGENTRL_NB_ARGS", ""))


def parse_args(text: str) -> dict:
    """Return ``{"key": value}`` from ``--key value`` pairs (numbers converted, dashes in keys become underscores)."""
    import shlex

    out, tokens = {}, shlex.split(text)
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            value = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("--") else "true"
            for cast in (int, float):
                try:
                    value = cast(value)
                    break
                except ValueError:
                    continue
            out[tok[2:].replace("-", "_")] = value
    return out


def interactive() -> bool:
    """Return True in ``marimo edit`` / ``marimo run``, where a person presses buttons."""
    try:
        import marimo as mo

        return mo.app_meta().mode in ("edit", "run")
    except Exception:
        return False


def should_run(button) -> bool:
    """Return True when a gated cell should run: its button was pressed, or nobody is there to press it."""
    return not interactive() or bool(getattr(button, "value", False))


def use_repo_root() -> Path:
    """Change into the working directory (``AGENTRL_WORKDIR``, else the repository root, where configs/ and
    data/ live) and return it."""
    target = Path(os.environ.get("AGENTRL_WORKDIR") or REPO_ROOT)
    if (target / "configs").is_dir() and Path.cwd() != target:
        os.chdir(target)
    return Path.cwd()


def arg(args: dict, name: str, default):
    """Return ``args[name]`` converted to the type of ``default`` (marimo passes numbers already converted)."""
    value = args.get(name, default)
    if value is None or default is None or isinstance(value, type(default)):
        return value
    if isinstance(default, bool):
        return str(value).lower() in ("1", "true", "yes")
    return type(default)(value)


# the preset a notebook uses on a CUDA machine when none is named: the one that fits the card (docs/colab.md)
GPU_PRESETS = {"T4": "colab_qwen3_4b", "L4": "colab_qwen3_4b", "A100-40": "colab_qwen3_4b",
               "A100-80": "gpu_qwen2_5_7b", "H100": "gpu_qwen2_5_7b"}


def choose_preset(args: dict, default: str = "demo") -> tuple[dict, str]:
    """Return ``(preset, sentence saying which and why)``: ``--config`` when given, else on a machine with an
    NVIDIA GPU the GPU preset for its card (GPU_PRESETS), else ``default``; with a GPU the preset's
    ``[gpu.<CARD>]`` settings are merged in."""
    from agentrl.config import load_preset
    from agentrl.gpu_plan import apply_card, query_gpus

    gpus = query_gpus()
    card = gpus[0].card if gpus else None
    name = args.get("config") or (GPU_PRESETS[card] if card else default)
    preset = load_preset(name)
    if card:
        preset = apply_card(preset, card)
        why = "as asked (--config)" if args.get("config") else f"the GPU preset for a {card}"
        extra = f" with its [gpu.{card}] settings" if card in (preset.get("gpu") or {}) else ""
        return preset, f"GPU {gpus[0].name} ({card}): preset **{name}**{extra}, {why}"
    return preset, f"no NVIDIA GPU: preset **{name}**" + ("" if args.get("config") else " (the CPU default)")


def ensure_demo_inputs(preset: dict, phase: str) -> list[str]:
    """For the demo preset, build what ``phase`` ("sft" or "grpo") reads when an earlier notebook has not run
    here (a fresh Colab runtime): corpus + index, oracle trajectories, the curated SFT data, and for GRPO the SFT
    adapter. Return the steps it ran (none for other presets, which need their own earlier phases)."""
    from agentrl import demo
    from agentrl.pipeline import corpus_and_index
    from agentrl.train.grpo import grpo_config
    from agentrl.train.sft import sft_config

    if Path(preset.get("_path", "")).stem != "demo":
        return []
    ran = []
    data = Path(sft_config(preset).data) / "trl" / "train.jsonl"
    if not data.exists():
        corpus_and_index(preset, progress=False)
        demo.demo_eval(preset, False)
        demo.demo_data(preset)
        ran += ["00 corpus", "01 eval", "02 data"]
    adapter = grpo_config(preset).adapter
    if phase == "grpo" and adapter and not (Path(adapter) / "adapter_config.json").exists():
        demo.demo_sft(preset, False)
        ran.append("03 sft")
    return ran


# the models a notebook offers besides the preset's own: both work offline on CPU
MODEL_CHOICES = {"preset's model": "", "tiny (random 0.8M, seconds)": "runs/models/tiny",
                 "SmolLM2-135M-Instruct (pretrained, offline)": "runs/models/smollm2-135m-instruct"}


def model_dropdown(args: dict, label: str = "model"):
    """Return a marimo dropdown over MODEL_CHOICES; its value is a model directory ("" = the preset's).
    ``--model tiny`` / ``--model smollm2`` (or a directory) preselects one."""
    import marimo as mo

    wanted = str(arg(args, "model", "") or "")
    value = next((k for k, v in MODEL_CHOICES.items() if wanted and (wanted == v or wanted in k.lower())),
                 "preset's model")
    return mo.ui.dropdown(MODEL_CHOICES, value=value, label=label)


def prepared_model(path: str) -> str | None:
    """Return ``path`` after building it when it is the tiny or the SmolLM2 directory and missing; None for ""."""
    if not path:
        return None
    from agentrl.smol import ensure_model
    from agentrl.tiny import ensure_tiny_model

    if Path(path).name == "tiny":
        ensure_tiny_model(path)
    return ensure_model(path)


def adapter_for(adapter: str | None, model: str | None) -> str | None:
    """Return ``adapter`` when it was trained on ``model`` (its base_model.txt says so) or no model is chosen;
    else None, so a different base model starts from a fresh LoRA instead of loading a mismatched adapter."""
    if not adapter or not model:
        return adapter
    base = Path(adapter) / "base_model.txt"
    return adapter if base.is_file() and base.read_text().strip() == model else None


ENVS = ("search", "sql", "textgame", "math", "code")


def env_dropdown(args: dict, choices=ENVS, default: str = "search", label: str = "environment"):
    """Return a marimo dropdown over the environments ``choices``; ``--env`` preselects one (else ``default``).
    An ``--env`` that is not a choice is a DataError naming the choices."""
    import marimo as mo

    from agentrl.io import DataError

    value = str(arg(args, "env", "") or default)
    if value not in choices:
        raise DataError(f"--env {value!r}: choose from {', '.join(choices)}")
    return mo.ui.dropdown(list(choices), value=value, label=label)


def reward_samples(task, row: dict) -> dict[str, tuple]:
    """Return three sample episodes of ``row`` as ``{label: (prompt, completion, env, golden_answers)}``, each env
    in the state its completion left it: the oracle's (its plan's tool calls run on a real env), the oracle's final
    answer without any tool call, and a broken tool call. For a reward table that shows what each reward pays."""
    from agentrl.agent import run_episode
    from agentrl.aio import run_sync
    from agentrl.envs.base import tool_methods
    from agentrl.policies.oracle import OraclePolicy

    played_env = task.make_env()
    traj = run_sync(run_episode(OraclePolicy(task.oracle_plan), task, row, max_turns=30, env=played_env))
    played = traj["messages"][2:]  # after the system and user messages: what GRPO calls the completion
    tool = next(iter(sorted(tool_methods(played_env))), "tool")
    samples = {"oracle: tools, then the answer": played,
               "the same answer without any tool call": [{"role": "assistant", "content": played[-1]["content"]}],
               "a broken tool call": [{"role": "assistant", "content": f'<tool_call>{{"name": "{tool}", "argu'}]}
    prompt = traj["messages"][:2]
    out = {}
    for label, completion in samples.items():
        env = played_env if completion is played else task.make_env()
        if env is not played_env:
            env.reset(**row)
        out[label] = (prompt, completion, env, row.get("golden_answers"))
    return out


def reward_table(funcs, samples: dict[str, tuple]) -> dict[str, list]:
    """Return ``{"completion": labels, <reward name>: values}``: each reward function on each sample episode
    (async ones, the judge, are run to completion)."""
    import inspect

    from agentrl.aio import run_sync

    table: dict[str, list] = {"completion": list(samples)}
    for f in funcs:
        values = []
        for prompt, completion, env, gold in samples.values():
            got = f([prompt], [completion], environments=[env], golden_answers=[gold])
            values.append((run_sync(got) if inspect.isawaitable(got) else got)[0])
        table[getattr(f, "__name__", "reward")] = values
    return table
