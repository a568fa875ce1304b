"""GRPO's CPU speed-ups change the time a step takes, never what it samples or learns: the LoRA adapter merged into
a copy of the weights while generating (agentrl.train.lora_merge), the prompt tokens rows share read once in the first
turn and in the loss (agentrl.train.shared_prefill), a tool turn continuing each row's cache (agentrl.train.turn_cache),
a decode step without copied keys (agentrl.rollout.decode) and a loss micro-batch without rows and columns that carry no
loss (agentrl.train.loss_batch)."""

import pytest
import torch

from agentrl.core.heldout import HeldOut
from agentrl.train.configs import GRPOSettings
from agentrl.train.grpo import run_grpo
from agentrl.train.lora_merge import mergeable, merged_for_generation
from agentrl.train.shared_prefill import (
    common_prefix,
    completions_until_eos,
    generate_from_common_prefix,
    left_pad,
    shared_prompt_logits,
)
from agentrl.train.trainers import compact_plan, merge_plan, share_plan
from agentrl.train.turn_cache import continue_turn, new_state

ALL_OFF = {"merge_for_generation": "off", "share_prompt_prefill": "off", "fast_decode": "off",
           "compact_loss_batch": "off"}
ALL_ON = {k: "on" for k in ALL_OFF}
SYSTEM = ("You are a database agent. Use the execute_sql tool to inspect and query the SQLite database, one "
          "statement per call, and answer with the result once you have it. ")


def tiny_with_lora(tiny_model):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a fresh adapter's B is zero: make the adapter change the outputs
            torch.nn.init.normal_(p, std=0.5)
    return model.eval(), tok


def right_pad(rows: list[list[int]], pad_id: int):
    """Return ``(ids, mask)`` of ``rows`` right-padded, as TRL pads completions."""
    ids = torch.full((len(rows), max(map(len, rows))), pad_id)
    mask = torch.zeros_like(ids)
    for i, c in enumerate(rows):
        ids[i, :len(c)], mask[i, :len(c)] = torch.tensor(c), 1
    return ids, mask


def loss_and_lora_grads(model, c_ids, c_mask):
    """Return a function of completion logits giving the masked log-likelihood and its gradients on the LoRA weights."""
    lora = [p for n, p in model.named_parameters() if "lora_" in n]

    def loss_and_grads(logits):
        logps = torch.log_softmax(logits, -1).gather(-1, c_ids.unsqueeze(-1)).squeeze(-1)
        loss = (logps * c_mask).sum()
        return loss, torch.autograd.grad(loss, lora)

    return loss_and_grads


def greedy(tok, new_tokens=12):
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                            eos_token_id=tok.eos_token_id)


def test_merged_generation_samples_what_the_adapter_samples_and_leaves_the_base_weights_bit_identical(tiny_model):
    model, tok = tiny_with_lora(tiny_model)
    ids, mask = left_pad([tok("who wrote Hamlet?")["input_ids"], tok("SELECT")["input_ids"]], tok.pad_token_id)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    with torch.no_grad():
        unmerged = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(tok))
        with model.disable_adapter():
            plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(tok))
        assert mergeable(model) is None
        with merged_for_generation(model) as layers:
            merged = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(tok))
    assert layers > 0
    assert torch.equal(merged, unmerged) and not torch.equal(plain, unmerged)  # the adapter matters, merged or not
    after = {n: p.detach() for n, p in model.named_parameters() if "lora_" not in n}
    assert all(torch.equal(base[n], after[n]) for n in base)  # restored, not subtracted: no rounding residue
    from peft.tuners.lora import LoraLayer

    layers_after = [m for m in model.modules() if isinstance(m, LoraLayer)]
    assert layers_after and not any(m.merged or m.disable_adapters for m in layers_after)


def test_a_model_without_an_adapter_is_not_merged_and_a_requested_merge_says_why(tiny_model):
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert "no LoRA adapter" in mergeable(plain)
    on = GRPOSettings.of(merge_for_generation="on")
    merge, line = merge_plan(on, plain, use_vllm=False, on_cpu=True)
    assert not merge and "unmerged (the model has no LoRA adapter)" in line
    model, _ = tiny_with_lora(tiny_model)
    auto = GRPOSettings.of()
    assert merge_plan(auto, model, use_vllm=False, on_cpu=True)[0]  # "auto": on a CPU
    assert merge_plan(auto, model, use_vllm=False, on_cpu=False) == (False, None)  # a GPU: the copy costs memory
    assert merge_plan(on, model, use_vllm=True, on_cpu=True) == (False, None)  # vLLM holds its own weights


def test_shared_prompt_reading_is_on_for_cpu_runs_and_never_on_unsloths_trainer():
    auto, on, off = (GRPOSettings.of(share_prompt_prefill=v) for v in ("auto", "on", "off"))
    assert share_plan(auto, unsloth=False, on_cpu=True) == (True, None)
    assert share_plan(auto, unsloth=False, on_cpu=False) == (False, None)  # a GPU: only when asked
    assert share_plan(on, unsloth=False, on_cpu=False) == (True, None)
    assert share_plan(off, unsloth=False, on_cpu=True) == (False, None)
    assert share_plan(auto, unsloth=True, on_cpu=True) == (False, None)
    share, line = share_plan(on, unsloth=True, on_cpu=False)
    assert not share and "not applied on the Unsloth backend" in line


def test_a_turn_reading_the_rows_common_prefix_once_generates_the_tokens_of_the_left_padded_batch(tiny_model):
    model, tok = tiny_with_lora(tiny_model)
    system = "You are a database agent. Use the execute_sql tool to inspect and query the SQLite database. "
    texts = ["Count the rows.", "Which city is the largest one in the table of cities, by population?", "Hi",
             "Name the nation with the most gold medals, then explain how you found it."]
    rows = [tok(system + t)["input_ids"] for t in texts]  # a tool turn's rows: one prefix, different lengths
    assert common_prefix(rows) >= 16 and common_prefix([[1, 2, 3], [1, 2]]) == 1
    ids, mask = left_pad(rows, tok.pad_token_id)
    with torch.no_grad():
        batch = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(tok))
        once, width, _, _ = generate_from_common_prefix(model, rows, greedy(tok), tok.pad_token_id, "cpu")
    assert torch.equal(once[:, width:], batch[:, ids.size(1):])
    cut = completions_until_eos(once[:, width:], [tok.eos_token_id])
    assert len(cut) == 4 and all(c and (c[-1] == tok.eos_token_id or len(c) == once.size(1) - width) for c in cut)
    assert generate_from_common_prefix(model, [[5, 6, 7], [8, 9]], greedy(tok), tok.pad_token_id, "cpu") is None


def test_the_loss_forward_with_each_prompt_read_once_gives_the_logits_and_gradients_of_the_full_rows(tiny_model):
    model, tok = tiny_with_lora(tiny_model)
    model.train()
    prompts = [tok(t)["input_ids"] for t in ("Which city is larger, Lyon or Nice?", "Count the rows.")]
    completions = [tok(t)["input_ids"] for t in ("Lyon", "SELECT COUNT(*) FROM t", "Nice is", "42")]
    p_ids, p_mask = left_pad([prompts[0], prompts[1], prompts[0], prompts[1]], tok.pad_token_id)  # two groups
    c_ids, c_mask = right_pad(completions, tok.pad_token_id)
    ids, mask, keep = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1), c_ids.size(1)
    loss_and_grads = loss_and_lora_grads(model, c_ids, c_mask)

    full = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1:-1, :]  # TRL's one pass
    shared, saved = shared_prompt_logits(model, ids, mask, keep)
    width = p_ids.size(1)  # two prompts of four read, all but their last column
    assert shared.shape == full.shape and saved == pytest.approx(1 - 2 * (width - 1) / (4 * width))
    rows = c_mask.bool()
    assert torch.allclose(shared[rows], full[rows], atol=1e-4)
    (loss_full, grads_full), (loss_shared, grads_shared) = loss_and_grads(full), loss_and_grads(shared)
    assert torch.allclose(loss_shared, loss_full, atol=1e-4)
    assert all(torch.allclose(a, b, atol=1e-4, rtol=1e-3) for a, b in zip(grads_shared, grads_full, strict=True))
    assert any(g.abs().sum() > 0 for g in grads_shared)
    assert shared_prompt_logits(model, ids[:2], mask[:2], keep) is None  # no prompt repeats: TRL's own pass


def test_a_greedy_grpo_step_samples_the_same_rollouts_with_and_without_the_speedups(tiny_model, tmp_path, capfd):
    table = {"model": {"name": str(tiny_model)}, "env": "sql", "sql": {"train": 8},
             "num_generations": 4, "per_device_train_batch_size": 8, "max_steps": 1, "learning_rate": 1e-4,
             "max_completion_length": 48, "max_tool_calling_iterations": 1, "eval_questions": 0, "report_to": [],
             "logging_steps": 1, "seed": 3, "generation_kwargs": {"do_sample": False},
             "gradient_checkpointing": False}  # checkpointing keeps no cache: the loss would not share the prompt
    runs = {}
    for name, speed in (("off", ALL_OFF), ("on", ALL_ON)):
        capfd.readouterr()
        runs[name] = run_grpo(GRPOSettings.of(name=name, **table, **speed), HeldOut(), runs=tmp_path).metrics
        printed = capfd.readouterr().out
        assert ("merge_for_generation: rollouts run with the LoRA adapter merged" in printed) == (name == "on")
    keys = ("completions/mean_length", "reward", "tools/call_frequency", "loss", "entropy")
    step = {name: {k: m["history"][0][k] for k in keys} for name, m in runs.items()}
    assert step["on"] == pytest.approx(step["off"]), step
    off = runs["off"]["history"][0]
    assert "prompts/reused" not in off and "loss/columns_computed" not in off


def test_decode_attention_over_shared_key_heads_equals_sdpa_and_generates_the_same_tokens(tiny_model):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from agentrl.rollout.decode import decoding_attention, grouped_decode_attention, growing_cache

    class Module:  # what the attention functions read of an attention layer
        num_key_value_groups, is_causal = 3, True

    torch.manual_seed(0)
    q, k, v = torch.randn(5, 6, 1, 8), torch.randn(5, 2, 40, 8), torch.randn(5, 2, 40, 8)
    mask = torch.ones(5, 1, 1, 40, dtype=torch.bool)
    mask[1, ..., :7] = mask[3, ..., 20:25] = False  # left padding, and a hole (a turn cache's masked-out samples)
    ours, _ = grouped_decode_attention(Module(), q, k, v, mask, scaling=0.3)
    sdpa, _ = sdpa_attention_forward(Module(), q, k, v, mask, scaling=0.3)
    assert ours.shape == sdpa.shape and torch.allclose(ours, sdpa, atol=1e-5)
    long_q = torch.randn(5, 6, 4, 8)  # a prefill's query: SDPA's own
    assert torch.equal(grouped_decode_attention(Module(), long_q, k, v, None, scaling=0.3)[0],
                       sdpa_attention_forward(Module(), long_q, k, v, None, scaling=0.3)[0])

    model, tok = tiny_with_lora(tiny_model)
    ids, mask = left_pad([tok(SYSTEM + t)["input_ids"] for t in ("Count the rows.", "Hi")], tok.pad_token_id)
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(tok, 20))
        with decoding_attention(model) as on:
            cache = growing_cache(model)
            fast = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy(tok, 20),
                                  past_key_values=cache)
    assert on and model.get_base_model().config._attn_implementation == "sdpa"  # restored
    assert torch.equal(fast, plain)
    assert cache.get_seq_length() == fast.size(1) - 1 and cache.layers[0].keys.shape[-2] == fast.size(1) - 1
    cache.batch_select_indices(torch.tensor([1, 1, 0]))  # the turn cache's row selection on a grown cache
    assert cache.layers[0].keys.shape[0] == 3 and cache.get_seq_length() == fast.size(1) - 1


def test_a_tool_turn_continuing_the_cache_generates_what_a_fresh_batch_of_the_whole_conversations_generates(
        tiny_model):
    from agentrl.rollout.decode import growing_cache

    model, tok = tiny_with_lora(tiny_model)
    texts = ["Count the rows.", "Which city is the largest one in the table of cities, by population?", "Hi"]
    prompts = [tok(SYSTEM + t)["input_ids"] for t in texts]
    eos = [tok.eos_token_id]
    with torch.no_grad():
        seqs, width, mask, cache = generate_from_common_prefix(model, prompts, greedy(tok, 10), tok.pad_token_id,
                                                               "cpu", cache=growing_cache(model))
        completions = completions_until_eos(seqs[:, width:], eos)
        state = new_state(cache, seqs, mask, prompts, completions)
        # TRL's next turn: the rows that called a tool, in its order, each its prompt + completion + the tool result
        results = {2: tok(" error: no such table")["input_ids"], 0: tok(" [(42,)] rows")["input_ids"]}
        turn = [prompts[i] + completions[i] + results[i] for i in (2, 0)]
        seqs2, width2, mask2, cache2 = continue_turn(model, state, turn, greedy(tok, 10), tok.pad_token_id, "cpu")
        fresh_ids, fresh_mask = left_pad(turn, tok.pad_token_id)
        fresh = model.generate(input_ids=fresh_ids, attention_mask=fresh_mask, generation_config=greedy(tok, 10))
    assert completions_until_eos(seqs2[:, width2:], eos) == completions_until_eos(fresh[:, fresh_ids.size(1):], eos)
    assert cache2.get_seq_length() == seqs2.size(1) - 1 and mask2.size(0) == 2
    # a third turn continues the second one's cache the same way
    state2 = new_state(cache2, seqs2, mask2, turn, completions_until_eos(seqs2[:, width2:], eos))
    assert continue_turn(model, state2, [turn[1] + [5]], greedy(tok, 4), tok.pad_token_id, "cpu") is not None
    # a conversation the cache does not hold is not continued (a new step's prompts are generated from scratch)
    state3 = new_state(cache2, seqs2, mask2, turn, completions_until_eos(seqs2[:, width2:], eos))
    with torch.no_grad():
        assert continue_turn(model, state3, [[7, 8, 9]], greedy(tok, 4), tok.pad_token_id, "cpu") is None


def test_the_loss_forward_reading_the_rows_common_prefix_once_gives_the_logits_and_gradients_of_the_full_rows(
        tiny_model):
    model, tok = tiny_with_lora(tiny_model)
    model.train()
    prompts = [tok(SYSTEM + t)["input_ids"] for t in ("Count the rows.", "Which nation won most golds?", "Hi")]
    completions = [tok(t)["input_ids"] for t in ("SELECT COUNT(*) FROM t", "Norway", "Hello there")]
    p_ids, p_mask = left_pad(prompts, tok.pad_token_id)  # three distinct prompts: only the prefix is shared
    c_ids, c_mask = right_pad(completions, tok.pad_token_id)
    ids, mask, keep = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1), c_ids.size(1)
    loss_and_grads = loss_and_lora_grads(model, c_ids, c_mask)

    full = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1:-1, :]
    shared, saved = shared_prompt_logits(model, ids, mask, keep)
    n = common_prefix(prompts)
    assert n >= 16 and saved == pytest.approx(1 - (n + 3 * (p_ids.size(1) - n)) / (3 * p_ids.size(1)), abs=0.05)
    rows = c_mask.bool()
    assert torch.allclose(shared[rows], full[rows], atol=1e-4)
    (loss_full, grads_full), (loss_shared, grads_shared) = loss_and_grads(full), loss_and_grads(shared)
    assert torch.allclose(loss_shared, loss_full, atol=1e-4)
    assert all(torch.allclose(a, b, atol=1e-4, rtol=1e-3) for a, b in zip(grads_shared, grads_full, strict=True))


def grpo_trainer(tiny_model, out, speed: dict):
    """Return agentrl's GRPO trainer on the SQL environment and the tiny model, built as `agentrl grpo` builds it."""
    from agentrl.train import grpo
    from agentrl.train.configs import trl_args
    from agentrl.train.models import load_for_training, prepare_backend

    cfg = GRPOSettings.of(name="numerics", model={"name": str(tiny_model)}, env="sql", sql={"train": 8},
                          num_generations=4, per_device_train_batch_size=8, max_steps=1, learning_rate=1e-4,
                          max_completion_length=40, max_tool_calling_iterations=1, eval_questions=0, report_to=[],
                          seed=3, gradient_checkpointing=False, **speed)
    backend, _ = prepare_backend(cfg.model)
    args = trl_args(cfg, grpo.derived_args(cfg, backend, out))
    task = grpo.build_task(cfg)
    rows = grpo.training_rows(cfg, task, grpo.train_rows(cfg, HeldOut()))
    loaded = load_for_training(cfg.model, adapter=None, seed=args.seed, gradient_checkpointing=False)
    loaded.tokenizer.padding_side = "left"
    return grpo.make_trainer(cfg, args, loaded, task, rows)


def test_a_compact_shared_prompt_loss_equals_trls_loss_and_gradients_on_a_real_rollout_batch(tiny_model, tmp_path):
    trainer = grpo_trainer(tiny_model, tmp_path, {**ALL_ON, "skip_equal_groups": False})  # the masks planted below
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = next(iter(trainer.get_train_dataloader()))
    inputs = trainer._generate_and_score_completions(batch)
    assert inputs["prompt_ids"].size(0) == 8
    # two rows of each group carry an advantage, the other four none (the completion mask skip_equal_groups zeroes)
    inputs["advantages"] = torch.tensor([1.0, -0.3, 0.0, 0.0, 0.5, -0.7, 0.0, 0.0])
    inputs["completion_mask"][[2, 3, 6, 7]] = 0
    mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
    inputs["num_items_in_batch"] = mask.sum()
    lora = [p for n, p in trainer.model.named_parameters() if p.requires_grad]

    def loss_and_grads(on: bool):
        trainer._compact, trainer._share = on, on
        loss = trainer._compute_loss(trainer.model, dict(inputs))
        return loss.detach(), torch.autograd.grad(loss, lora)

    (loss_off, grads_off), (loss_on, grads_on) = loss_and_grads(False), loss_and_grads(True)
    assert torch.allclose(loss_on, loss_off, atol=1e-5) and loss_off != 0
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-3) for a, b in zip(grads_on, grads_off, strict=True))
    assert any(g.abs().sum() > 0 for g in grads_on)
    metrics = trainer._metrics["train"]
    assert metrics["loss/columns_computed"][-1] < 0.6  # four rows of eight, and their padding columns, not computed
    assert metrics["prompts/reused"][-1] > 0.3  # the system prompt and tool schema read once for the four
    trainer._compact = None  # decided again from the settings: on for dapo, off with a per-sequence loss
    assert compact_plan(trainer.args.agentrl, "dapo", unsloth=False, on_cpu=False)[0]
    on_grpo = compact_plan(trainer.args.agentrl, "grpo", unsloth=False, on_cpu=True)
    assert on_grpo[0] is False and "its normaliser counts rows" in on_grpo[1]
    auto = GRPOSettings.of(compact_loss_batch="auto")
    assert compact_plan(auto, "dapo", unsloth=False, on_cpu=True) == (True, None)
    assert compact_plan(auto, "dapo", unsloth=False, on_cpu=False) == (False, None)
    assert compact_plan(auto, "dapo", unsloth=True, on_cpu=True) == (False, None)
