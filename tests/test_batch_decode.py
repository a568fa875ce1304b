"""The local policy's decode loop whose finished rows leave the batch (agentrl.rollout.batch_decode) generates what
transformers' ``generate`` generates, on the tiny model through the policy itself. The random tiny model never ends a
turn early (its greedy turns repeat one token), so rows leaving the batch are tested on SmolLM2 (test_smol)."""

import logging

import pytest
import torch

QUESTIONS = ["who wrote Hamlet?", "SELECT name FROM t", "how many moons has Mars?", "go north"]


def policy(tiny_model, model, tok, **cfg):
    from agentrl.rollout.local import LocalConfig, LocalPolicy

    return LocalPolicy(LocalConfig(model=str(tiny_model), max_new_tokens=cfg.pop("max_new_tokens", 16), **cfg),
                       model=model, tokenizer=tok)


def requests(questions=QUESTIONS):
    return [([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}], [])
            for q in questions]


def seen(turns):
    return [(t.content, t.tool_calls, t.finish_reason, t.prompt_tokens, t.completion_tokens) for t in turns]


@pytest.fixture
def tiny(tiny_model):
    from agentrl.rollout.local import load_inference_model

    model, tok = load_inference_model(tiny_model, dtype="float32")
    return model, tok


def test_a_nucleus_of_one_token_samples_the_greedy_turn_and_a_hot_temperature_does_not(tiny_model, tiny):
    model, tok = tiny
    greedy = seen(policy(tiny_model, model, tok, fast_decode="off")._generate_batch(requests()))
    torch.manual_seed(0)
    nucleus = policy(tiny_model, model, tok, fast_decode="on", temperature=1.0, top_p=1e-6)
    assert seen(nucleus._generate_batch(requests())) == greedy
    assert nucleus.decode_passes  # sampled by the loop, not by generate
    torch.manual_seed(0)
    hot = policy(tiny_model, model, tok, fast_decode="on", temperature=5.0)
    assert seen(hot._generate_batch(requests())) != greedy


def test_a_generation_config_the_loop_does_not_apply_goes_to_generate_with_one_line(tiny_model, tiny, caplog,
                                                                                      monkeypatch):
    from agentrl.rollout import batch_decode

    model, tok = tiny
    monkeypatch.setattr(batch_decode, "_said", set())  # a line once per process: this test's own process view
    model.generation_config.repetition_penalty = 1.3
    expected = seen(policy(tiny_model, model, tok, fast_decode="off")._generate_batch(requests()))
    with caplog.at_level(logging.WARNING, logger="agentrl.rollout.batch_decode"):
        for _ in range(2):
            pol = policy(tiny_model, model, tok, fast_decode="on")
            assert seen(pol._generate_batch(requests())) == expected
            assert pol.decode_passes == []
    lines = [r.getMessage() for r in caplog.records if "finished rows stay" in r.getMessage()]
    assert lines == ["finished rows stay in the decode batch (transformers' generate): its generation config sets "
                     "repetition_penalty=1.3"]


def test_a_lora_model_left_unmerged_is_decoded_by_the_loop_with_generates_turns(tiny_model, tiny, caplog,
                                                                                 monkeypatch):
    from peft import LoraConfig, get_peft_model

    from agentrl.rollout import batch_decode

    model, tok = tiny
    monkeypatch.setattr(batch_decode, "_said", set())
    torch.manual_seed(0)
    # init_lora_weights=False: random A and B, so the adapter changes the turns (GRPO's validation evaluates this)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0,
                                            init_lora_weights=False)).eval()
    expected = seen(policy(tiny_model, peft, tok, fast_decode="off")._generate_batch(requests()))
    with caplog.at_level(logging.WARNING, logger="agentrl.rollout.batch_decode"):
        pol = policy(tiny_model, peft, tok, fast_decode="on")
        assert seen(pol._generate_batch(requests())) == expected
    assert pol.decode_passes  # the loop, not generate
    assert not [r for r in caplog.records if "finished rows stay" in r.getMessage()]
