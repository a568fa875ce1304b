"""GRPO's CPU speed-ups change the time a step takes, never what it samples or learns: the LoRA adapter merged into
a copy of the weights while generating (agentrl.train.lora_merge) and a group's prompt read once, in the first turn
and in the loss (agentrl.train.shared_prefill)."""

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
from agentrl.train.trainers import merge_plan, share_plan


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
        once, width = generate_from_common_prefix(model, rows, greedy(tok), tok.pad_token_id, "cpu")
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
    c_ids = torch.full((4, max(map(len, completions))), tok.pad_token_id)
    c_mask = torch.zeros_like(c_ids)
    for i, c in enumerate(completions):  # right-padded, as TRL pads completions
        c_ids[i, :len(c)], c_mask[i, :len(c)] = torch.tensor(c), 1
    ids, mask, keep = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1), c_ids.size(1)
    lora = [p for n, p in model.named_parameters() if "lora_" in n]

    def loss_and_grads(logits):
        logps = torch.log_softmax(logits, -1).gather(-1, c_ids.unsqueeze(-1)).squeeze(-1)
        loss = (logps * c_mask).sum()
        return loss, torch.autograd.grad(loss, lora)

    full = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1:-1, :]  # TRL's one pass
    shared, distinct = shared_prompt_logits(model, ids, mask, keep)
    assert shared.shape == full.shape and distinct == 2
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
    for name, speed in (("off", {"merge_for_generation": "off", "share_prompt_prefill": "off"}),
                        ("on", {"merge_for_generation": "on", "share_prompt_prefill": "on"})):
        capfd.readouterr()
        runs[name] = run_grpo(GRPOSettings.of(name=name, **table, **speed), HeldOut(), runs=tmp_path).metrics
        printed = capfd.readouterr().out
        assert ("merge_for_generation: rollouts run with the LoRA adapter merged" in printed) == (name == "on")
    keys = ("completions/mean_length", "reward", "tools/call_frequency", "loss", "entropy")
    step = {name: {k: m["history"][0][k] for k in keys} for name, m in runs.items()}
    assert step["on"] == pytest.approx(step["off"]), step
    assert runs["on"]["history"][0]["prompts/reused"] > 0 and "prompts/reused" not in runs["off"]["history"][0]
