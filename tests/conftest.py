"""Shared fixtures: real data from data/samples, a real (small) hybrid index built once per session."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# fp32 on CPU whatever this machine's runs/precision/cpu.json says (tests/test_cpu_precision.py tests the decision)
os.environ.setdefault("AGENTRL_CPU_PRECISION", "fp32")
# pytest-xdist runs the suite in several worker processes (pyproject's addopts): each worker's torch (and the CLI
# subprocesses it starts, which inherit this) gets its share of the cores instead of one thread per core each, which
# would oversubscribe the machine while two workers train at once (docs/decisions.md, "The suite in two workers")
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_share))

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = ROOT / "data" / "samples" / "hotpotqa_dev_200.jsonl"
SCRIPTED = ROOT / "tests" / "scripted_endpoint.py"  # a scripted OpenAI-compatible server (a test fixture)
DBBENCH = ROOT / "data" / "samples" / "dbbench_dev.jsonl"
UNSLOTH_MISSING = ("unsloth is not installed (.ci/run installs it: uv pip install --no-deps unsloth==2026.10.9 "
                   "unsloth_zoo==2026.10.9)")


# fixtures that train or convert a model first (a minute or more on 2 cores): a test taking one is in the slow tier
SLOW_FIXTURES = {"trained", "smol_sft", "sft_adapter", "smol_model"}


# the files that take longest (--durations, docs/decisions.md), started first so that none is left for the end while
# the other workers idle; test_sft.py first of all, as it builds ``trained`` (which test_grpo / test_sql then read
# instead of waiting on the lock while another worker trains it)
LONGEST_FILES = ("test_sft.py", "test_wheel_install.py", "test_smol.py", "test_docs.py", "test_textgame.py",
                 "test_notebooks.py", "test_demo.py", "test_browser.py")


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test that takes a model-training fixture (the fast tier: ``pytest -m "not slow"``), then
    order the files for xdist, which hands out whole files (``--dist loadfile``): LONGEST_FILES first, then the files
    holding the most slow tests (each file's tests stay together and in order)."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    slow: dict[str, int] = {}
    for item in items:
        slow[item.location[0]] = slow.get(item.location[0], 0) + bool(item.get_closest_marker("slow"))
    first = {path: i for i, path in enumerate(slow)}

    def rank(item):
        path = item.location[0]
        name = Path(path).name
        return (LONGEST_FILES.index(name) if name in LONGEST_FILES else len(LONGEST_FILES), -slow[path], first[path])

    items.sort(key=rank)  # stable: the order within a file is kept


def built_once(tmp_path_factory, name: str, build):
    """Return ``build(folder)``'s result, built once per test session however many xdist workers ask: the first
    worker builds it into ``folder`` (a directory shared by the workers) under a file lock and pickles the result
    beside it; the others wait for the lock and unpickle it (so a result holds paths and tensors, never a trained
    model: see trained_run)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory above every worker's own
    folder, result = base / f"shared-{name}", base / f"shared-{name}.pickle"
    with FileLock(f"{folder}.lock"):
        if result.exists():
            return pickle.loads(result.read_bytes())
        shutil.rmtree(folder, ignore_errors=True)  # what a worker whose build failed left
        folder.mkdir()
        value = build(folder)
        result.write_bytes(pickle.dumps(value))
        return value


def running(names: set[str]) -> list[str]:
    """Return the qualified names among ``names`` (``MariaDBEnv._run``, ``run_statement``) of functions some thread
    is executing right now (cancellation tests; qualified, so an idle worker's ``_run`` elsewhere is not counted)."""
    found = []
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_qualname in names:
                found.append(frame.f_code.co_qualname)
            frame = frame.f_back
    return found


@pytest.fixture(scope="session")
def hotpot_rows():
    from agentrl.data.corpus import load_qa

    return load_qa(HOTPOT)


@pytest.fixture(scope="session")
def embedder():
    from agentrl.retrieval import DenseConfig, Embedder

    return Embedder(DenseConfig())


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, hotpot_rows, request) -> Path:
    """A hybrid index over the contexts of the first 24 sample questions (about 240 passages)."""
    from agentrl.data.corpus import Chunker, chunk_documents, documents_from_contexts
    from agentrl.retrieval import build_index

    def build(folder):
        embedder = request.getfixturevalue("embedder")
        docs = documents_from_contexts(hotpot_rows[:24])
        passages = list(chunk_documents(docs, Chunker(embedder.tokenizer, 200, 32)))
        build_index(passages, folder / "index", embedder=embedder, progress=False)
        return folder / "index"

    return built_once(tmp_path_factory, "index", build)


@pytest.fixture(scope="session")
def small_retriever(small_index):
    from agentrl.retrieval import Retriever

    return Retriever.load(small_index)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def said(tool, *args, **kwargs) -> str:
    """Return what the model reads from a direct call of an environment's tool: its result, or the message of its
    refusal (a ToolError: a limit reached, a failed statement)."""
    from agentrl.envs.base import ToolError

    try:
        return tool(*args, **kwargs)
    except ToolError as exc:
        return str(exc)


def start_process(cmd: list[str], port: int, timeout: float = 120) -> subprocess.Popen:
    """Start a server process and wait until its port accepts connections."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[2:4]} exited: {proc.stderr.read()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{cmd} did not start listening on {port}")


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def endpoint_url():
    """A real scripted OpenAI-compatible server process on loopback (tests/scripted_endpoint.py)."""
    port = free_port()
    proc = start_process([sys.executable, str(SCRIPTED), "--port", str(port)], port)
    yield f"http://127.0.0.1:{port}/v1"
    stop_process(proc)


@pytest.fixture(params=["aiohttp", "openai"])
def transport(request) -> str:
    """The endpoint policy's HTTP transport (EndpointConfig.transport): a test taking it runs with each one."""
    return request.param


@pytest.fixture(scope="session")
def mcp_url(small_index):
    """A real MCP retrieval server (agentrl serve --transport http) on loopback."""
    port = free_port()
    proc = start_process([sys.executable, "-m", "agentrl.cli", "serve", "--index", str(small_index),
                          "--transport", "http", "--port", str(port)], port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop_process(proc)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny offline model (tokenizer + random Qwen3), built once per session."""
    from agentrl.train.tiny import build_tiny_model

    return built_once(tmp_path_factory, "tiny", lambda folder: build_tiny_model(folder / "tiny",
                                                                                data_dir=ROOT / "data" / "samples"))


def check_preset(small_index) -> dict:
    """An evaluation setup for the inference check: the search environment over the small test index, its held-out
    split the questions 60.. of the sample file (as a preset's tables)."""
    return {"eval": {"search": {"index": str(small_index), "qa": str(HOTPOT), "heldout": 140, "top_k": 3,
                                "max_tool_calls": 3, "passage_chars": 200, "max_turns": 4},
                     "run": {"concurrency": 4}}}


def check_eval(small_index):
    """The EvalConfig of :func:`check_preset` (what run_sft's inference check takes)."""
    from agentrl.core.validate import from_dict
    from agentrl.rollout.evaluate import EvalConfig

    return from_dict(EvalConfig, check_preset(small_index)["eval"], "eval")


def search_settings(small_index, **kw):
    """The search environment's settings over the small test index and the sample QA file."""
    from agentrl.envs.search import SearchSettings

    return SearchSettings(**{"index": str(small_index), "qa": str(HOTPOT), **kw})


@pytest.fixture(scope="session")
def sft_data(tmp_path_factory, small_index):
    """Oracle demonstrations for the first 60 questions, curated and exported (phases 01-02, for real)."""
    from agentrl.core.heldout import HeldOut
    from agentrl.data.curate import CurateConfig, curate
    from agentrl.data.export import export
    from agentrl.rollout.evaluate import EvalConfig, run_eval
    from agentrl.rollout.runner import RunConfig

    def build(root):
        cfg = EvalConfig(name="oracle", split="train", limit=60, policy="oracle", run=RunConfig(progress=False),
                         envs={"search": search_settings(small_index, top_k=3, passage_chars=200)})
        run_eval(cfg, runs=root)
        curate([root / "eval" / "oracle"], CurateConfig(val_fraction=0.1), root / "data", HeldOut())
        export(root / "data", ["trl"], HeldOut())
        return root / "data"

    return built_once(tmp_path_factory, "sftdata", build)


SFT_TABLE = {"learning_rate": 2e-3, "lr_scheduler_type": "constant", "warmup_steps": 0.0, "optim": "adamw_torch",
             "per_device_train_batch_size": 4, "per_device_eval_batch_size": 4, "gradient_accumulation_steps": 1,
             "gradient_checkpointing": False, "max_length": 2048, "logging_first_step": True, "report_to": []}


def sft_settings(**table):
    """SFT settings as a preset's [sft] table would give them (the tests' common values, then ``table``)."""
    from agentrl.train.configs import SFTSettings

    return SFTSettings.of(**{**SFT_TABLE, **table})


PROBE = "<|im_start|>user\nWho directed Ed Wood?<|im_end|>\n<|im_start|>assistant\n"  # trained's probe prompt


def trained_run(result, **extra) -> SimpleNamespace:
    """Return what a session fixture keeps of run_sft's result for every xdist worker: its metrics, its run folder
    and ``extra`` (the trained model itself does not travel between processes: TRL binds methods onto it)."""
    return SimpleNamespace(metrics=result.metrics, out=result.out, **extra)


@pytest.fixture(scope="session")
def trained(tmp_path_factory, sft_data, tiny_model, small_index):
    """The tiny model's run after 300 LoRA SFT steps on the oracle demonstrations, with the before/after check:
    metrics, run folder, and the trained model's logits on PROBE (``probe_logits``)."""
    from agentrl.core.heldout import HeldOut
    from agentrl.train.sft import run_sft

    settings = sft_settings(name="t", data=str(sft_data), max_steps=300, logging_steps=20, check_questions=10,
                            model={"name": str(tiny_model), "lora": {"r": 32, "alpha": 64, "dropout": 0.0}})

    def build(runs):
        import torch

        result = run_sft(settings, HeldOut(), check_eval(small_index), check_preset(small_index), runs=runs)
        result.model.eval()
        with torch.no_grad():
            logits = result.model(input_ids=result.tokenizer(PROBE, return_tensors="pt")["input_ids"]).logits
        return trained_run(result, probe_logits=logits)

    return built_once(tmp_path_factory, "sftruns", build)


def small_preset(text: str) -> str:
    """The demo preset, shrunk: 30 questions' contexts, a few training steps, small checks."""
    edits = {r"\[corpus\]\n": "[corpus]\nlimit = 30\n", r"max_steps = 300": "max_steps = 20",
             r"check_questions = 20": "check_questions = 3", r"max_steps = 30": "max_steps = 2",
             r"per_device_train_batch_size = 16 .*\n": "per_device_train_batch_size = 8\n",
             r"num_generations = 8": "num_generations = 4", r"eval_questions = 20": "eval_questions = 2",
             r"\[eval\]\nname = \"oracle\"\n": "[eval]\nname = \"oracle\"\nlimit = 30\n"}
    for pattern, new in edits.items():
        text, n = re.subn(pattern, new, text, count=1)
        assert n == 1, pattern
    return text



def train_grpo_capturing(cfg, preset: dict, out) -> tuple[object, list[str], list[str]]:
    """Build agentrl's GRPO trainer for settings ``cfg`` (from its adapter), train, and return
    ``(trainer, trained, masked)``: per completion, the text of the tokens that carried loss and of the tool-result
    tokens masked out of it."""
    from agentrl.core.heldout import HeldOut
    from agentrl.train.configs import trl_args
    from agentrl.train.grpo import build_task, derived_args, make_trainer, train_rows, training_rows
    from agentrl.train.models import load_for_training

    loaded = load_for_training(cfg.model, adapter=cfg.adapter)
    loaded.tokenizer.padding_side = "left"
    task = build_task(cfg, preset)
    args = trl_args(cfg, derived_args(cfg, loaded.backend, out))
    trainer = make_trainer(cfg, args, loaded, task, training_rows(cfg, task, train_rows(cfg, HeldOut(), preset)))
    batches: list[dict] = []
    original = trainer._generate_and_score_completions

    def capture(inputs):
        result = original(inputs)
        batches.append({k: result[k].detach().clone() for k in ("completion_ids", "completion_mask", "tool_mask")
                        if k in result})
        return result

    trainer._generate_and_score_completions = capture
    trainer.train()
    trained, masked = [], []
    tok = loaded.tokenizer
    for b in batches:
        assert "tool_mask" in b
        for ids, cmask, tmask in zip(b["completion_ids"], b["completion_mask"], b["tool_mask"], strict=True):
            trained.append(tok.decode([i for i, c, t in zip(ids, cmask, tmask, strict=True) if c and t]))
            masked.append(tok.decode([i for i, c, t in zip(ids, cmask, tmask, strict=True) if c and not t]))
    return trainer, trained, masked


def run_cli_on_unsloth_cpu(args: list[str], cwd) -> None:
    """Run ``agentrl ARGS`` in a subprocess on Unsloth's CPU backend (importing unsloth patches trl and
    transformers for the whole process) and fail with its stderr unless it succeeds."""
    env = {**os.environ, "UNSLOTH_FORCE_CPU": "1", "UNSLOTH_AUTO_INSTALL": "0"}
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
