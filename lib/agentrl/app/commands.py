"""The ``agentrl`` commands, each a thin layer over the library: ``cmd_<name>(args, preset)`` reads the preset the
command line made (agentrl.cli: the file, the card, ``--set`` and the flags, merged and checked once) and calls the
phase with its typed settings and the preset's held-out set. Each returns the exit code."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agentrl import envs
from agentrl.app.compare import compare, format_table, write_html
from agentrl.app.demo import print_summary, run_demo
from agentrl.app.presets import Preset, load
from agentrl.app.seed_table import seed_table
from agentrl.core.config import Layer, nest, parse_set, read_preset
from agentrl.core.io import DataError, read_json, write_jsonl
from agentrl.core.validate import from_dict
from agentrl.data.corpus import build_corpus, read_corpus
from agentrl.data.curate import curate
from agentrl.data.export import export
from agentrl.data.multihop_rag import prepare
from agentrl.data.pairs import export_pairs, export_successes
from agentrl.data.seed_import import import_seed
from agentrl.data.stats import analyze, print_stats
from agentrl.envs import registry
from agentrl.retrieval import IndexConfig, Retriever, build_index
from agentrl.retrieval.evaluate import print_retrieval_report, run_retrieval_eval
from agentrl.retrieval.mcp_server import serve
from agentrl.rollout.endpoint import EndpointPolicy
from agentrl.rollout.evaluate import run_eval
from agentrl.rollout.mcp_tasks import synthesize
from agentrl.train.checkpoints import distributed_launch, end_distributed
from agentrl.train.dpo import print_dpo_summary, run_dpo
from agentrl.train.gpu_measure import format_measured, measure
from agentrl.train.gpu_plan import format_plan, plans, resolve_card
from agentrl.train.grpo import preflight as grpo_preflight
from agentrl.train.grpo import run_grpo
from agentrl.train.grpo_report import print_grpo_summary
from agentrl.train.models import cuda_available
from agentrl.train.sample import run_sample, summary_line
from agentrl.train.sft import preflight as sft_preflight
from agentrl.train.sft import print_sft_summary, run_sft
from agentrl.train.smol import DEFAULT_DIR, prepare_smollm2
from agentrl.train.tiny import build_tiny_model

RUNS = Path("runs")


# ----------------------------------------------------------------------------- phase 00


def run(args: argparse.Namespace) -> int | None:
    """Run the command ``args`` names (``args.func``, a ``cmd_<name>`` of this module) on the preset of its command
    line (:func:`preset_of`); return its exit code (None: 0)."""
    try:
        return globals()[args.func](args, preset_of(args))
    finally:
        end_distributed()  # a rank of `accelerate launch` (sft, grpo) leaves its process group before exiting


def layers(args: argparse.Namespace, env: str | None, table: str = "eval") -> list[Layer]:
    """Return a preset layer per flag the user typed (``_keys`` of the parser), in the order declared, with
    ``{env}`` in a key replaced by ``env``; then the ``--env-arg`` ones under ``[<table>.<env>]``."""
    out = []
    for dest, (key, convert, clears, flag) in (getattr(args, "_keys", None) or {}).items():
        value = getattr(args, dest, None)
        if value is None or value is False:
            continue
        value = convert(value) if convert else value
        data: dict = {}
        if clears:
            _put(data, clears, "", env)
        _put(data, key, value, env)
        out.append(Layer(data, flag))
    for expr in getattr(args, "env_arg", None) or []:
        keys, value = parse_set(f"x.{expr}")
        if env is None:
            raise DataError(f"--env-arg {expr}: no environment to set it on")
        out.append(Layer(nest([table, env, *keys[1:]], value), f"--env-arg {expr}"))
    return out


def _put(data: dict, key: str, value: Any, env: str | None) -> None:
    if "{env}" in key and env is None:
        raise DataError(f"{key}: no environment to set it on")
    keys = key.format(env=env).split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value


def card_of(args) -> str | None:
    """Return the GPU class whose ``[gpu.<CARD>]`` tables apply: ``--gpu`` (default: the detected card, with a note
    saying which). Under a distributed launch (``accelerate launch``: FSDP, DeepSpeed, several processes) the
    detected card's tables are not applied: they size one process alone on one card (Unsloth with a colocated vLLM);
    ``--gpu CARD`` still applies them."""
    card = resolve_card(args.gpu)
    launch = distributed_launch()
    if card and launch and args.gpu in (None, "", "auto"):
        print(f"GPU class {card}, distributed launch ({launch}): the preset's [gpu.*] tables are for one process on "
              f"one card and are not applied (--gpu {card} applies them anyway)", file=sys.stderr)
        return None
    return card


def preset_of(args):
    """Return the Preset of the command line (agentrl.app.presets.load): ``--config`` (none: every table's defaults),
    the card's tables, ``--set`` and the command's flags, merged once and checked."""
    config, sets = getattr(args, "config", None), getattr(args, "set", None) or []
    if sets and not config:
        raise DataError("--set needs --config (the preset it overrides)")
    card = card_of(args) if getattr(args, "gpu", None) is not None or args.command == "gpu-plan" else None
    if card is not None and config and not (read_preset(config).data.get("gpu")) and args.command != "gpu-plan":
        card = None  # a preset without per-card tables: nothing to apply, nothing to say
    env = None
    if getattr(args, "_env_table", None):  # flags of the run's environment: which one is it?
        env = getattr(args, "env", None) or load(config, sets, card=card).settings(args._env_table).env
    preset = load(config, sets, card=card, flags=layers(args, env, getattr(args, "_env_table", None) or "eval"))
    if card and config and args.command != "gpu-plan":
        print(f"GPU class {card}: the preset's [gpu.{card}] settings apply" if card in (preset.get("gpu") or {}) else
              f"GPU class {card}: the preset has no [gpu.{card}] table, its base settings apply", file=sys.stderr)
    return preset


def cmd_corpus(args, preset: Preset) -> int:
    """`agentrl corpus`: build a passage corpus from QA contexts or a corpus file."""
    cfg = preset.settings("corpus")
    out = Path(args.out) if args.out else RUNS / "corpus" / cfg.name
    counts = build_corpus(out, qa=cfg.qa, corpus_file=cfg.corpus_file, embedder=cfg.embedder,
                          chunk_size=cfg.chunk_size or None, chunk_overlap=cfg.chunk_overlap, limit=cfg.limit)
    print(f"wrote {out}/corpus.jsonl: {counts['passages']} passages from {counts['documents']} documents")
    return 0


def cmd_index(args, preset: Preset) -> int:
    """`agentrl index`: build BM25 + dense indexes over a corpus, with the embedder the corpus was chunked with
    unless the preset or ``--embedder`` says otherwise."""
    raw = json.loads(json.dumps(preset.get("index") or {}))
    corpus_dir = Path(args.corpus)
    chunked_with = _corpus_embedder(corpus_dir)
    if chunked_with or "embedder" in (preset.get("corpus") or {}):
        # the corpus was chunked with its embedder's tokenizer: index with that one unless told otherwise
        raw.setdefault("dense", {}).setdefault("embedder", chunked_with or preset.get("corpus")["embedder"])
    cfg = from_dict(IndexConfig, raw, "index", preset.merged.at)
    out = Path(args.out) if args.out else corpus_dir / "index"
    passages = read_corpus(corpus_dir)
    build_index(passages, out, cfg, progress=not args.quiet)
    print(f"wrote {out}: {len(passages)} passages, embedder {cfg.dense.embedder}, {cfg.dense.index_type} index")
    return 0


def _corpus_embedder(corpus_dir: Path) -> str | None:
    """Return the embedder a corpus run was chunked with (its manifest), or None."""
    try:
        return json.loads((corpus_dir / "manifest.json").read_text())["config"].get("embedder")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def cmd_multihop_rag(args, preset: Preset) -> int:
    """`agentrl multihop-rag`: MultiHop-RAG (hub layout) -> a corpus file and the seed's QA files."""
    counts = prepare(args.source, args.out)
    print(f"wrote {args.out}: corpus.jsonl ({counts['documents']} articles), validation.jsonl "
          f"({counts['validation']}), train.jsonl ({counts['train']}); {counts['null_queries']} null queries kept")
    return 0


def cmd_seed_table(args, preset: Preset) -> int:
    """`agentrl seed-table`: evaluation runs in the seed's table format, next to the seed's figures."""
    print(seed_table(args.runs, preset.data))
    return 0


def cmd_search(args, preset: Preset) -> int:
    """`agentrl search`: search an index with one query and print the ranked passages."""
    from rich.console import Console
    from rich.table import Table

    retriever = Retriever.load(args.index, dense=args.method != "bm25")
    hits = retriever.search_batch([args.query], args.top_k, args.method, distinct=False if args.raw_chunks else None)[0]
    if not hits:
        print(f"no passage matches {args.query!r} (no searchable term in the index's vocabulary)")
        return 0
    table = Table(title=f"{args.method or retriever.cfg.method}: {args.query}")
    for col in ("rank", "score", "id", "title", "text"):
        table.add_column(col, overflow="fold")
    for rank, h in enumerate(hits, start=1):
        table.add_row(str(rank), f"{h.score:.4f}", h.id, h.title, h.text[:160] + ("…" if len(h.text) > 160 else ""))
    Console().print(table)
    return 0


def cmd_retrieval_eval(args, preset: Preset) -> int:
    """`agentrl retrieval-eval`: recall@k / MRR / nDCG against gold evidence, per method."""
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    report = run_retrieval_eval(args.index, args.qa, out_dir=args.out, methods=methods, limit=args.limit,
                                chart=not args.no_chart, distinct=False if args.raw_chunks else None)
    print_retrieval_report(report)
    return 0


def cmd_serve(args, preset: Preset) -> int:
    """`agentrl serve`: serve the retriever as an MCP tool (stdio or streamable HTTP)."""
    serve(args.index, transport=args.transport, host=args.host, port=args.port, method=args.method,
          distinct=False if args.raw_chunks else None, max_query_chars=args.max_query_chars,
          fast_path=not args.no_fast_path)
    return 0


# ----------------------------------------------------------------------------- phase 01


def cmd_eval(args, preset: Preset) -> int:
    """`agentrl eval`: run an agent over an environment's rows (endpoint, local model or oracle) and score it; 1 when
    every item failed (a script must not take that run for a result)."""
    cfg = preset.eval()
    metrics = run_eval(cfg, preset.data, resume=args.resume, overwrite=args.overwrite)
    print_eval_metrics(metrics, RUNS / "eval" / cfg.name)
    if metrics.get("errors"):
        kinds = ", ".join(f"{k} {n}" for k, n in sorted((metrics.get("error_kinds") or {}).items()))
        print(f"{metrics['errors']} of {metrics['n']} items failed: {kinds} (see 'error' in trajectories.jsonl; "
              "--resume retries them)", file=sys.stderr)
    unscorable = metrics.get("unscorable_reasons") or {}
    if unscorable:
        print(f"{sum(unscorable.values())} of {metrics['n']} items could not be scored (scored 0): "
              + "; ".join(f"{reason} ({n})" for reason, n in sorted(unscorable.items())), file=sys.stderr)
    if metrics.get("n") and metrics.get("errors") == metrics["n"]:
        return 1
    return 0


def cmd_mcp_tasks(args, preset: Preset) -> int:
    """`agentrl mcp-tasks`: write a task file for the MCP server of ``[eval.mcp]`` / ``--env-arg`` (0 when at least
    one task was kept, else 1)."""
    cfg = preset.eval()
    settings = cfg.envs.get(envs.MCP) or registry.get(envs.MCP).settings()
    policy = EndpointPolicy(cfg.endpoint)
    rows, report = asyncio.run(_close_after(policy, synthesize(settings, policy, args.n, attempts=args.attempts)))
    if rows:
        write_jsonl(args.out, rows)
        print(f"wrote {args.out}: {report['kept']} of {report['written']} tasks kept")
    print(f"mcp-tasks: {report['written']} written by {policy.model}, {report['kept']} kept, {report['disagreed']} "
          f"whose {args.attempts} answers disagreed, {report['no_answer']} without an answer, "
          f"{report['unreadable']} unreadable lines" + ("" if rows else "; nothing was written"))
    return 0 if rows else 1


async def _close_after(policy, work):
    try:
        return await work
    finally:
        await policy.aclose()


def print_eval_metrics(metrics: dict, out_dir) -> None:
    """Print overall and per-type metrics of an evaluation run."""
    from rich.console import Console
    from rich.table import Table

    keys = [k for k in ("em", "f1", "acc", "judge", "exec", "state", "success") if k in metrics["overall"]]
    table = Table(title=f"{out_dir}: {metrics['n']} items, {metrics['errors']} errors, finish {metrics['finish']}")
    for col in ["group", "n", *keys]:
        table.add_column(col)
    table.add_row("all", str(metrics["n"]), *(f"{metrics['overall'][k]:.4f}" for k in keys))
    for field in ("type", "level"):
        for group, m in (metrics.get(f"by_{field}") or {}).items():
            table.add_row(f"{field}={group}", str(m["n"]), *(f"{m.get(k, 0):.4f}" for k in keys))
    Console(width=140).print(table)


# ----------------------------------------------------------------------------- phase 02


def cmd_analyze(args, preset: Preset) -> int:
    """`agentrl analyze`: statistics of trajectories (stats.json, stats.md, charts)."""
    out = Path(args.out) if args.out else Path(args.runs[0]) / "analysis"
    if not Path(args.runs[0]).is_dir() and not args.out:
        out = Path(args.runs[0]).parent / "analysis"
    stats = analyze(args.runs, out, args.threshold, png=not args.no_charts)
    print_stats(stats, ", ".join(args.runs))
    print(f"wrote {out}/stats.json, stats.md" + ("" if args.no_charts else " and charts"))
    return 0


def cmd_curate(args, preset: Preset) -> int:
    """`agentrl curate`: filter, de-duplicate, balance and split trajectories for SFT, held-out items dropped."""
    cfg = preset.curate()
    out = Path(args.out) if args.out else RUNS / "data" / cfg.name
    report = curate(args.runs, cfg, out, preset.gate(*args.runs), known=registry.names())
    for s in report["steps"]:
        print(f"{s['step']:>14}: -{s['removed']:<6} -> {s['remaining']:<6} {s['reason'] if s['removed'] else ''}")
    print(f"wrote {out}: train {report['written']['train']}, validation {report['written']['validation']}")
    return 0


def cmd_export(args, preset: Preset) -> int:
    """`agentrl export`: a curated dataset to trl / swift / sharegpt JSONL; or (``--pairs`` / ``--successes``) a
    sample run's preference pairs and successes, through the preset's held-out gate."""
    if args.pairs or args.successes:
        if not args.config:
            preset = sample_preset(args.data)
        if args.pairs:
            print(f"wrote {Path(args.data) / 'pairs' / 'train.jsonl'}: {export_pairs(args.data, preset.heldout)}")
        if args.successes:
            print(f"wrote {Path(args.data) / 'successes'}: {export_successes(args.data, preset.heldout)}")
        return 0
    counts = export(args.data, [f.strip() for f in args.formats.split(",")], preset.gate(args.data))
    print(f"exported {args.data}: {counts} as {args.formats}")
    return 0


def sample_preset(sample_dir: str | Path) -> Preset:
    """Return the preset a sample run was made with (its manifest: file, ``--set`` overrides, card), whose held-out
    items its pairs and successes must not contain; a DataError when the manifest does not say (give --config)."""
    path = Path(sample_dir) / "manifest.json"
    recorded = (read_json(path).get("preset") or {}) if path.is_file() else {}
    if not recorded.get("file") or recorded["file"] == "no --config" or "***" in " ".join(recorded.get("sets", [])):
        raise DataError(f"{sample_dir}: its manifest names no preset to take the held-out items from; give --config")
    print(f"held-out items: preset {recorded['file']} (recorded by {path})")
    return load(recorded["file"], recorded.get("sets") or [], card=recorded.get("card"))


def cmd_import_seed(args, preset: Preset) -> int:
    """`agentrl import-seed`: convert a seed run (results.jsonl + openai_trace.log) to trajectories."""
    out = Path(args.out) if args.out else RUNS / "eval" / args.name
    counts = import_seed(args.seed_run, out, with_eval=True if args.with_eval else None, env=registry.DEFAULT)
    print(f"wrote {out}/trajectories.jsonl: {counts}")
    return 0


# ----------------------------------------------------------------------------- training


def cmd_sft(args, preset: Preset) -> int:
    """`agentrl sft`: LoRA SFT on a curated dataset (Unsloth on CUDA, transformers + peft elsewhere)."""
    settings = preset.sft()
    check = preset.eval() if "eval" in preset else None
    if check is None and settings.check_questions > 0:
        print("sft: the preset has no [eval] table, so no held-out check after training (give --config)")
    result = run_sft(settings, preset.gate(settings.data), check, preset.data, runs=RUNS, resume=args.resume,
                     overwrite=args.overwrite, source=preset.describe())
    if result.is_main:
        print_sft_summary(result.metrics, result.out)
    return 0


def cmd_grpo(args, preset: Preset) -> int:
    """`agentrl grpo`: multi-turn GRPO with the tools in the rollouts (TRL environment_factory)."""
    result = run_grpo(preset.grpo(), preset.heldout, preset.data, runs=RUNS, eval_run=preset.eval().run,
                      resume=args.resume, overwrite=args.overwrite, source=preset.describe())
    if result.is_main:
        print_grpo_summary(result.metrics, result.out)
    return 0


def cmd_sample(args, preset: Preset) -> int:
    """`agentrl sample`: k attempts per GRPO training item with the starting policy; the difficulty filter's line."""
    cfg = preset.sample()
    result = run_sample(cfg, preset.grpo(), preset.heldout, preset.data, runs=RUNS, source=preset.describe())
    print(summary_line(result, cfg.k))
    return 0


def cmd_dpo(args, preset: Preset) -> int:
    """`agentrl dpo`: DPO on preference pairs, on top of the SFT adapter."""
    print_dpo_summary(run_dpo(preset.dpo(), preset.heldout, runs=RUNS, source=preset.describe()))
    return 0


def cmd_rft(args, preset: Preset) -> int:
    """`agentrl rft`: rejection-sampling fine-tuning, the ``[rft]`` table's SFT run on the successes."""
    result = run_sft(preset.rft(), preset.gate(preset.rft().data), None, preset.data, runs=RUNS,
                     source=preset.describe())
    if result.is_main:
        print_sft_summary(result.metrics, result.out)
    return 0


def cmd_gpu_plan(args, preset: Preset) -> int:
    """`agentrl gpu-plan`: estimate GPU memory of the preset's SFT and GRPO on a card (``--measure``: and run a few
    steps of each on this machine with random weights); 0 when it fits, else 1."""
    if args.measure:
        results = measure(preset, preset.card, RUNS / "gpu_plan" / preset.name)
        print(format_measured(results, preset.name, preset.card, "cuda" if cuda_available() else "cpu"))
        return 1 if any(r.verdict().startswith("does not fit") for r in results) else 0
    if preset.card is None:
        raise DataError("gpu-plan: no GPU detected; name a card with --gpu T4|L4|A100-40|A100-80|H100")
    sft, grpo = (preset.sft() if "sft" in preset else None), (preset.grpo() if "grpo" in preset else None)
    for settings, check in ((sft, sft_preflight), (grpo, grpo_preflight)):
        if settings is not None:
            check(settings)  # TRL's own checks: a plan of a run TRL would refuse is no plan
    results = plans(sft, grpo, preset.card)
    for p in results:
        print(format_plan(p))
    return 0 if all(p.fits for p in results) else 1


# ----------------------------------------------------------------------------- models, demo, compare


def cmd_tiny_model(args, preset: Preset) -> int:
    """`agentrl tiny-model`: build the tiny offline model (tokenizer + random Qwen3)."""
    print(f"wrote {build_tiny_model(args.out)}")
    return 0


def cmd_models_prepare(args, preset: Preset) -> int:
    """`agentrl models prepare smollm2`: convert the offline SmolLM2 GGUF to safetensors."""
    print(f"ready: {prepare_smollm2(args.out or DEFAULT_DIR, force=args.force)}")
    return 0


def cmd_demo(args, preset: Preset) -> int:
    """`agentrl demo`: every phase on the bundled data (CPU, no network), then the summary."""
    print_summary(run_demo(preset, rebuild=args.rebuild))
    return 0


def cmd_compare(args, preset: Preset) -> int:
    """`agentrl compare RUN RUN...`: the runs side by side on their shared items."""
    c = compare(args.runs, metric=args.metric)
    print(format_table(c, only=args.only))
    if args.html:
        print(f"wrote {write_html(c, args.html)}")
    return 0
