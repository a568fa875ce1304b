"""Helpers the phase notebooks share, so the notebooks stay thin and the rules live in one tested place.

A notebook runs in four places: ``marimo edit`` (interactive), ``marimo run``, ``python notebooks/x.py``
(script) and as an exported ipynb in Jupyter/Colab, where ``mo.cli_args()`` raises and
``mo.app_meta().mode`` is None. Expensive cells are gated by a run button only where a person can press it.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import shlex
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from agentrl.app.flags import json_value  # noqa: F401 - the notebooks' JSON fields (notebook 01)
from agentrl.app.presets import Preset, load, set_values
from agentrl.core.aio import run_sync
from agentrl.core.config import REPO_ROOT
from agentrl.core.io import DataError
from agentrl.data.curate import curate
from agentrl.data.export import FORMATS, export
from agentrl.data.pipeline import corpus_and_index, corpus_paths
from agentrl.envs import registry
from agentrl.envs.base import tool_methods
from agentrl.rollout.agent import run_episode
from agentrl.rollout.evaluate import EvalConfig, run_eval, variant
from agentrl.rollout.oracle import OraclePolicy
from agentrl.train.gpu_plan import query_gpus
from agentrl.train.sft import run_sft
from agentrl.train.smol import ensure_model
from agentrl.train.tiny import ensure_tiny_model

# each notebook's flags besides --config and --set, with the kind of value each takes (bool: a bare flag), as
# `python notebooks/<nb>.py -- --flag value` or AGENTRL_NB_ARGS pass them; the values reach the preset's check as
# layers of its merge (a form, --max-steps as [sft] max_steps, ...) where they are settings
FLAGS: dict[str, dict[str, type]] = {
    "00_corpus": {"rebuild": bool},
    "01_agent_eval": {"env": str, "policy": str, "base_url": str, "model": str, "temperature": float,
                      "max_new_tokens": int, "extra_body": str, "limit": int, "name": str, "split": str},
    "02_trajectories": {"env": str, "runs": str},
    "03_sft": {"model": str, "max_steps": int, "name": str, "resume": bool, "overwrite": bool},
    "04_grpo": {"env": str, "model": str, "max_steps": int, "name": str, "resume": bool, "overwrite": bool},
    "05_preference": {"max_steps": int},
}
COMMON_FLAGS = {"config": str, "set": str}


def cli_args(notebook: str) -> dict:
    """Return the arguments of ``notebook`` (a key of :data:`FLAGS`): ``python nb.py -- --max-steps 3 --resume``
    under marimo; in Jupyter (no command line) the ``AGENTRL_NB_ARGS`` environment variable (same syntax, shared by
    every notebook of the session); else {}. Keys are the flags with ``_`` for ``-``, a bare flag is True, and a
    value has its flag's kind. A flag the notebook does not take stops it (exit 2) naming the ones it takes; one in
    AGENTRL_NB_ARGS that another notebook takes is left to it, with one line."""
    try:
        import marimo as mo

        given = {k: v for k, v in dict(mo.cli_args()).items() if k}  # marimo also reports the bare "--" as ""
        where = "its command line"
    except Exception:  # Jupyter / exported scripts: no marimo context
        given = {}
    if not given:
        given, where = parse_args(os.environ.get("AGENTRL_NB_ARGS", "")), "AGENTRL_NB_ARGS"
    args = collect_sets({k.replace("-", "_"): v for k, v in given.items()})
    known = {**COMMON_FLAGS, **FLAGS[notebook]}
    out = {}
    for key, value in args.items():
        if key not in known:
            takers = [nb for nb, flags in FLAGS.items() if key in flags]
            if takers and where == "AGENTRL_NB_ARGS":
                print(f"notebook {notebook}: --{key.replace('_', '-')} in AGENTRL_NB_ARGS is for notebook "
                      f"{', '.join(takers)}; not used here")
                continue
            _refuse(f"notebook {notebook} takes no --{key.replace('_', '-')} (from {where}); its flags: "
                    + ", ".join(f"--{k.replace('_', '-')}" for k in known))
        out[key] = value if key == "set" else _flag_value(notebook, key, value, known[key])
    return out


def _flag_value(notebook: str, key: str, value, kind: type):
    flag = f"--{key.replace('_', '-')}"
    if kind is bool:
        if value in ("", True, "true", "True", 1, "1", "yes"):
            return True
        if value in (False, "false", "False", 0, "0", "no"):
            return False
        _refuse(f"notebook {notebook}: {flag} takes no value (got {value!r})")
    try:
        return kind(value)
    except (TypeError, ValueError):
        _refuse(f"notebook {notebook}: {flag} expects {kind.__name__}, got {value!r}")


def _refuse(message: str):
    """Stop the notebook on bad input: with ``message`` on stderr and exit status 2 when it runs as a script (as the
    CLI's bad input), as a stopped cell saying why where a person is looking (marimo edit, Jupyter)."""
    print(f"error: {message}", file=sys.stderr)
    if interactive():
        stop(f"error: {message}")
    raise SystemExit(2)


def with_flags(preset: Preset, layer: dict, where: str = "the notebook's flags") -> Preset:
    """Return ``preset`` with the notebook's flags as one more layer of its merge (``{"sft": {"max_steps": 3}}``),
    checked as the CLI's flags are: a value outside its range stops the notebook (exit 2) naming it."""
    if not layer:
        return preset
    try:
        return preset.with_layer(layer, where)
    except DataError as exc:
        _refuse(str(exc))


def collect_sets(args: dict) -> dict:
    """Return ``args`` with every ``--set section.key=value`` gathered into ``args["set"]`` (a list). marimo splits
    ``--set grpo.max_steps=2`` at the first '=' into the key ``"set grpo.max_steps"`` and the value 2 (converted);
    ``--set=grpo.max_steps=2`` and AGENTRL_NB_ARGS give ``{"set": "grpo.max_steps=2"}``; a repeated flag a list."""
    out = {k: v for k, v in args.items() if k != "set" and not k.startswith("set ")}
    sets = set_values(args.get("set"))
    for key, value in args.items():
        if key.startswith("set "):
            for v in value if isinstance(value, list) else [value]:
                sets.append(f"{key[4:].strip()}={str(v).lower() if isinstance(v, bool) else v}")
    if sets:
        out["set"] = sets
    return out


def parse_args(text: str) -> dict:
    """Return ``{"key": value}`` from ``--key value`` pairs (numbers converted, dashes in keys become underscores, a
    repeated key a list)."""
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
            key = tok[2:].replace("-", "_")
            if key in out:  # a repeated flag (--set a=1 --set b=2): a list, as marimo gives it
                out[key] = [*out[key], value] if isinstance(out[key], list) else [out[key], value]
            else:
                out[key] = value
    return out


def interactive() -> bool:
    """Return True in ``marimo edit`` / ``marimo run``, where a person presses buttons."""
    return _marimo_mode() in ("edit", "run")


def should_run(button) -> bool:
    """Return True when a gated cell should run: its button was pressed, or nobody is there to press it."""
    return not interactive() or bool(getattr(button, "value", False))


def use_repo_root() -> None:
    """Change into the working directory (``AGENTRL_WORKDIR``, else the repository root, where configs/ and
    data/ live). Returns None: a notebook's setup cell ends with this call, and a returned path would show as a
    stray ``PosixPath(...)`` output in app mode and Jupyter."""
    target = Path(os.environ.get("AGENTRL_WORKDIR") or REPO_ROOT)
    if (target / "configs").is_dir() and Path.cwd() != target:
        os.chdir(target)


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


def choose_preset(args: dict, default: str = "demo") -> tuple[Preset, str]:
    """Return ``(preset, sentence saying which and why)``: ``--config`` when given, else on a machine with an
    NVIDIA GPU the GPU preset for its card (GPU_PRESETS), else ``default``; with a GPU the preset's
    ``[gpu.<CARD>]`` settings are merged in. ``--set section.key=value`` (repeatable) overrides keys as on the
    command line; everything is checked first (agentrl.app.presets). Every notebook calls it, so all of them use the
    same preset. In Jupyter it also ends an earlier :func:`stop` (the notebook is deciding again from here)."""
    _resume_cells()
    gpus = query_gpus()
    card = gpus[0].card if gpus else None
    name = args.get("config") or (GPU_PRESETS[card] if card else default)
    try:
        preset = load(name, set_values(args.get("set")), card=card)
    except DataError as exc:  # a bad --config / --set: the CLI's exit 2, not a traceback
        _refuse(str(exc))
    if card:
        why = "as asked (--config)" if args.get("config") else f"the GPU preset for a {card}"
        extra = f" with its [gpu.{card}] settings" if card in (preset.get("gpu") or {}) else ""
        return preset, f"GPU {gpus[0].name} ({card}): preset **{name}**{extra}, {why}"
    return preset, f"no NVIDIA GPU: preset **{name}**" + ("" if args.get("config") else " (the CPU default)")


def preset_name(preset: Preset) -> str:
    """Return the name ``--config`` takes for ``preset`` (its file's stem)."""
    return preset.name


@dataclass
class Inputs:
    """What a phase found missing on this runtime: the earlier steps it ran now, or why it cannot go on."""

    built: list[str] = field(default_factory=list)
    missing: str | None = None  # which earlier notebook (or command) to run first

    def __str__(self) -> str:
        return "built first: " + ", ".join(self.built) if self.built else ""


def phase_inputs(preset: Preset, phase: str, env: str | None = None) -> Inputs:
    """Build what ``phase`` ("eval", "data", "sft" or "grpo") reads from earlier phases when a fresh runtime lacks
    it, with the earlier phases' own library calls: the corpus + index (search), the oracle's demonstrations on
    the training questions, the curated SFT data, and for GRPO the SFT adapter of a CPU preset (one that trains the
    tiny or the offline SmolLM2 model: minutes). A GPU preset's SFT adapter is not trained behind the notebook's back:
    ``missing`` then names notebook 03. ``env`` (default the registry's default, search) is the environment the phase
    runs: the corpus, index and oracle demonstrations are the default environment's pipeline. Returns an
    :class:`Inputs`; reruns find everything and do nothing."""
    env = env or registry.DEFAULT
    pipeline = env == registry.DEFAULT
    out = Inputs()
    adapter = preset.grpo().adapter if phase == "grpo" else None
    need_adapter = bool(adapter) and not (Path(adapter) / "adapter_config.json").is_file()
    if need_adapter and not cpu_preset(preset):
        out.missing = (f"The SFT adapter `{adapter}` is missing: run notebook 03 (03_sft) with the same preset first "
                       f"(or `agentrl sft --config {preset_name(preset)}`: an SFT run of "
                       f"`{preset.sft().model.name}`), then this notebook again.")
        return out
    need_data = (phase == "sft" or need_adapter) and not _sft_data(preset).is_file()
    oracle = (phase == "data" and pipeline or need_data) and not existing_runs(preset)
    if _needs_index(preset, phase, pipeline, need_adapter) or oracle:
        _index(preset, out)  # SFT's check and the oracle search it too
    if oracle:
        oracle_demonstrations(preset)
        out.built.append("01 oracle demonstrations")
    if need_data:
        data = Path(preset.sft().data)
        if data.suffix == ".jsonl":
            out.missing = f"The SFT data `{data}` is missing: run notebook 02 (02_trajectories) first."
            return out
        curate_runs(preset, existing_runs(preset), data)
        out.built.append("02 curated SFT data")
    if need_adapter:
        run_sft(preset.sft(), preset.gate(preset.sft().data), preset.eval(), preset.data, source=preset.describe())
        out.built.append("03 SFT adapter")
    return out


def cpu_preset(preset: Preset) -> bool:
    """Return True for a preset whose SFT model trains on a CPU in minutes (the tiny model, the offline SmolLM2):
    the notebooks may train its SFT adapter when GRPO needs it."""
    return Path(str(preset.sft().model.name)).name in ("tiny", "smollm2-135m-instruct")


def inputs_ready(preset: Preset, phase: str, env: str | None = None) -> bool:
    """Return True when :func:`phase_inputs` would build nothing for ``phase`` (a notebook then goes on without a
    button; otherwise building the index, the demonstrations or an SFT adapter waits for one)."""
    pipeline = (env or default_env()) == default_env()
    adapter = preset.grpo().adapter if phase == "grpo" else None
    need_adapter = bool(adapter) and not (Path(adapter) / "adapter_config.json").is_file()
    need_index = _needs_index(preset, phase, pipeline, need_adapter)
    if need_index and not (corpus_paths(preset.data)[1] / "index.json").exists():
        return False
    if (phase == "sft" or need_adapter) and not _sft_data(preset).is_file():
        return False
    return not need_adapter


def _needs_index(preset: Preset, phase: str, pipeline: bool, need_adapter: bool) -> bool:
    """Whether ``phase`` searches the preset's index: evaluation and GRPO of the pipeline's environment, SFT's
    held-out check, an SFT adapter trained here."""
    check = phase == "sft" and preset.sft().check_questions > 0 and preset.eval().env == default_env()
    return pipeline and phase in ("eval", "grpo") or check or need_adapter


def _index(preset: Preset, out: Inputs) -> None:
    if not (corpus_paths(preset.data)[1] / "index.json").exists():
        corpus_and_index(preset.settings("corpus"), preset.settings("index"), progress=False)
        out.built.append("00 corpus + index")


def _sft_data(preset: Preset) -> Path:
    data = Path(preset.sft().data)
    return data if data.suffix == ".jsonl" else data / "trl" / "train.jsonl"


def oracle_name(preset: Preset) -> str:
    """Return the run name of the preset's oracle demonstrations: its ``[eval]`` name when the preset evaluates
    with the oracle (the demo), else "oracle"."""
    ev = preset.eval()
    return ev.name if ev.policy == "oracle" else "oracle"


def existing_runs(preset: Preset) -> list[str]:
    """Return the evaluation runs of ``preset`` on disk that phase 02 curates: its own ``[eval]`` run (a served
    model's trajectories) and the oracle's demonstrations."""
    names = dict.fromkeys([preset.eval().name, oracle_name(preset)])
    return [f"runs/eval/{n}" for n in names if (Path("runs") / "eval" / n / "trajectories.jsonl").is_file()]


def oracle_config(preset: Preset, **changes) -> EvalConfig:
    """Return the EvalConfig of the preset's oracle demonstrations: the evaluation's environment and tools on the
    ``train`` split, from GRPO's QA file when GRPO trains that environment on a file of its own (MultiHop-RAG's
    training split, when ``[eval]`` evaluates on the validation file), at most ``[eval] limit`` of them; ``changes`` as
    in rollout.evaluate.variant."""
    ev = preset.eval()
    settings = ev.env_settings
    if "grpo" in preset and preset.grpo().env == ev.env and getattr(preset.grpo().env_settings, "qa", None):
        settings = dataclasses.replace(settings, qa=preset.grpo().env_settings.qa)
    base = {"name": oracle_name(preset), "policy": "oracle", "split": "train", "qa": None, "offset": 0,
            "limit": ev.limit, "envs": {**ev.envs, ev.env: settings}}
    return variant(ev, **{**base, **{k: v for k, v in changes.items() if v is not None}})


def oracle_demonstrations(preset: Preset) -> dict:
    """Run (or resume) the oracle over the training questions of ``preset`` (gold evidence replayed through the
    real search tool); return its metrics."""
    return run_eval(oracle_config(preset), preset.data, resume=True)


def curate_runs(preset: Preset, runs: list[str], out: Path) -> dict:
    """Curate ``runs`` with the preset's ``[data]`` settings into ``out`` (held-out items dropped) and export every
    format; return ``{"report": ..., "counts": ...}``."""
    gate = preset.gate(*runs)
    report = curate(runs, preset.curate(), out, gate, known=registry.names())
    return {"report": report, "counts": export(out, FORMATS, gate)}


def eval_flags(args: dict, preset: Preset) -> dict:
    """Return notebook 01's flags as a layer of the preset (``--temperature`` as ``[eval.endpoint] temperature``,
    ``--max-new-tokens`` as the environment's budget, ...), so the one check sees them before the form does."""
    endpoint = {k: args[k] for k in ("base_url", "model", "temperature") if k in args}
    if "extra_body" in args:
        endpoint["extra_body"] = json_value(str(args["extra_body"]))
    table = {k: args[k] for k in ("env", "policy", "name", "split") if k in args}
    if args.get("limit"):  # the form's 0: every row
        table["limit"] = args["limit"]
    if endpoint:
        table["endpoint"] = endpoint
    if "max_new_tokens" in args:
        env = registry.get(args.get("env") or preset.eval().env).name
        table[env] = {"max_new_tokens": args["max_new_tokens"]}
    return {"eval": table} if table else {}


def eval_tokens(preset: Preset, env: str) -> int:
    """Return the tokens a turn may generate when ``preset`` evaluates ``env`` (its ``[eval.<env>]`` budget, else
    the environment's own): what a notebook's form shows."""
    return preset.budget(env).max_new_tokens or registry.get(env).max_new_tokens


def endpoint_up(base_url: str | None, timeout: float = 3.0) -> bool:
    """Return True when a server answers ``GET <base_url>/models`` (any HTTP status: a 401 is a server too); False
    for no URL."""
    if not base_url or not base_url.strip():
        return False
    try:
        urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


# vLLM 0.30 sizes a request by the model's context (262,144 tokens for Qwen3-4B-Instruct-2507: 36 GiB of KV cache)
# and refuses to start when one does not fit; the agent needs far less
SERVE_MAX_MODEL_LEN = 16384


def serve_command(model: str | None, adapter: str | None = None, rank: int = 64) -> str:
    """Return the ``vllm serve`` line for ``model`` (``<model>`` when none is chosen yet; with the LoRA ``adapter``
    as model "agent"): hermes tool calls for the agent's ``tools`` (vLLM rejects tool_choice "auto" without
    them), a bounded context, and LoRA slots of the adapter's ``rank`` (vLLM's default limit is 16)."""
    lora = f" --enable-lora --max-lora-rank {max(16, rank)} --lora-modules agent={adapter}" if adapter else ""
    return (f"vllm serve {model or '<model>'}{lora} --enable-auto-tool-choice --tool-call-parser hermes "
            f"--max-model-len {SERVE_MAX_MODEL_LEN}")


def stop(message: str) -> None:
    """Stop the notebook here with ``message`` and no error. Under marimo (edit, run, ``python nb.py``) the cell
    stops and its descendants do not run. In Jupyter every later cell runs as a one-line note instead (an IPython
    input transformer) until the cell that calls :func:`choose_preset` runs again; "Run all" thus ends cleanly."""
    import marimo as mo

    print(message)
    if _marimo_mode():
        mo.stop(True, mo.md(message))
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None:  # plain Python, neither marimo nor IPython: nothing else would stop the script
        raise SystemExit(0)
    note = "print(" + repr("skipped (an earlier cell stopped): " + message.splitlines()[0]) + ")\n"

    def skip(lines: list[str]) -> list[str]:
        return lines if any(_RESUME in line for line in lines) else [note]

    skip.agentrl_stop = True
    _resume_cells()
    shell.input_transformers_post.append(skip)


_RESUME = "nb.choose_preset("  # the cell that decides again runs even while later cells are skipped


def _resume_cells() -> None:
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return
    if shell is not None:
        shell.input_transformers_post[:] = [t for t in shell.input_transformers_post
                                            if not getattr(t, "agentrl_stop", False)]


def _marimo_mode() -> str | None:
    # "test" is marimo's guess from PYTEST_CURRENT_TEST alone (a Jupyter kernel started by a test inherits it):
    # only a real marimo context (edit, run, script) counts
    try:
        import marimo as mo

        mode = mo.app_meta().mode
    except Exception:
        return None
    return mode if mode in ("edit", "run", "script") else None


def run_name(preset: Preset, env: str, policy: str, typed: str) -> str:
    """Return the evaluation run's name: what the user typed, except the preset's default name with another policy
    than the preset's (that name holds the preset's own run: the oracle's in the demo), which becomes
    ``<policy>`` (``<env>_<policy>`` off the default environment), so a local model never shows the oracle's
    results."""
    defaults = preset.eval()
    if typed != defaults.name or policy == defaults.policy:
        return typed
    return policy if env == default_env() else f"{env}_{policy}"


def check_note(model: str, check: dict) -> str:
    """Return a sentence that reads a base-vs-adapter check whose F1 is 0 on both sides ("" otherwise): the tiny
    random model (or any model too small for the task) cannot answer, so the check is read by its tool-call columns."""
    if not check or any((c.get("f1") or 0) > 0 for c in check.values()):
        return ""
    tiny = Path(model).name == "tiny"
    who = ("The tiny model is random (0.8M parameters, built offline in seconds): it cannot answer a question, so "
           if tiny else "Neither the base model nor the adapter answered a held-out question, so ")
    return (who + "F1 is 0 for both. What SFT changes here is the format: compare the tool-call columns "
            "(`episodes_with_wellformed_call`, `mean_calls`). A pretrained model (SmolLM2-135M, or a GPU preset) "
            "is needed for answers.")


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


def default_env() -> str:
    """Return the default environment's name (the corpus -> SFT -> GRPO pipeline's: search)."""
    return registry.DEFAULT


def env_choices(*, evaluable: bool | None = True) -> tuple[str, ...]:
    """Return the environments a notebook offers: the registry's (those ``agentrl eval`` runs on their own, by
    default)."""
    return registry.names(evaluable=evaluable)


def env_dropdown(args: dict, choices=None, default: str | None = None, label: str = "environment"):
    """Return a marimo dropdown over the environments ``choices`` (default :func:`env_choices`); ``--env``
    preselects one (else ``default``, the registry's default): a registered name, or a user's environment
    (``path/to/my_env.py`` or ``package.module[:attr]``), which joins the choices. An ``--env`` that is neither is a
    DataError naming the choices."""
    import marimo as mo

    choices = list(choices or env_choices())
    value = str(arg(args, "env", "") or default or registry.DEFAULT)
    if value not in choices:
        try:
            value = registry.get(value).name  # a user's environment file or module
        except DataError:
            raise DataError(f"--env {value!r}: choose from {', '.join(choices)} (or a path/to/my_env.py)") from None
        choices.append(value)
    return mo.ui.dropdown(choices, value=value, label=label)


def reward_samples(task, row: dict) -> dict[str, tuple]:
    """Return three sample episodes of ``row`` as ``{label: (prompt, completion, env, golden_answers)}``, each env
    in the state its completion left it: the oracle's (its plan's tool calls run on a real env), the oracle's final
    answer without any tool call, and a broken tool call. For a reward table that shows what each reward pays."""
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


def reward_table(funcs, samples: dict[str, tuple], names: list[str] | None = None) -> dict[str, list]:
    """Return ``{"completion": labels, <reward name>: values}``: each reward function on each sample episode
    (async ones, the judge, are run to completion), values rounded to 4 decimals. ``names`` are the rewards'
    names as the preset writes them (``format``, not the function's ``format_reward``)."""
    table: dict[str, list] = {"completion": list(samples)}
    for i, f in enumerate(funcs):
        values = []
        for prompt, completion, env, gold in samples.values():
            got = f([prompt], [completion], environments=[env], golden_answers=[gold])
            value = (run_sync(got) if inspect.isawaitable(got) else got)[0]
            values.append(None if value is None else round(float(value), 4))
        table[names[i] if names else getattr(f, "__name__", "reward")] = values
    return table
