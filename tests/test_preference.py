"""Learning from the model's own attempts: sampling k attempts per training item, the difficulty filter, preference
pairs and successes exported from them, and a real DPO step (TRL's DPOTrainer) on top of the SFT'd tiny model."""

import json
import shutil

import pytest

from agentrl.app.presets import load
from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError, read_json, read_jsonl
from agentrl.core.validate import from_dict
from agentrl.data.pairs import export_pairs, export_successes, pair_row
from agentrl.train.sample import SampleSettings, run_sample, summary_line
from conftest import HOTPOT, ROOT, built_once, check_preset, sft_settings


def preference_preset(small_index, tiny_model):
    """Search over the small index: GRPO's rows 0..23 train, 60.. are held out (its evaluation: the first 4)."""
    preset = check_preset(small_index)
    preset["grpo"] = {"env": "search", "eval_questions": 4, "temperature": 1.0, "model": {"name": str(tiny_model)},
                      "search": {"index": str(small_index), "qa": str(HOTPOT), "train": 24, "heldout": 140,
                                 "top_k": 2, "passage_chars": 120, "max_tool_calls": 3}}
    preset["grpo"].update(max_completion_length=160, max_tool_calling_iterations=2)  # GRPO's episode budget
    preset["eval"]["search"]["max_new_tokens"] = 48  # the evaluation budget: sampling's tokens a turn too
    preset["sample"] = {"name": "s", "k": 3, "items": 8, "batch": 24,
                        "success_key": "f1", "success_min": 0.8}
    return load(None, form=preset)


class TakingTurns:
    """A policy that succeeds on some attempts and not others, deterministically: attempt j of the i-th item is the
    oracle's (gold evidence, then the gold answer: f1 1) when (i + j) % 3 == 0, else the scripted endpoint's (a real
    HTTP server: it searches the question and answers with the first passage's title, mostly wrong)."""

    kind = "oracle+endpoint"
    model = "taking-turns"
    secrets: tuple[str, ...] = ()

    def __init__(self, oracle, endpoint, order: list[str]):
        self.oracle, self.endpoint, self.order = oracle, endpoint, order
        self.attempt: dict[str, int] = {}

    def describe(self) -> dict:
        return {"kind": self.kind}

    async def generate(self, messages, tools, row=None):
        key = str(row["id"])
        if not any(m["role"] == "assistant" for m in messages):  # a new episode of this item
            self.attempt[key] = self.attempt.get(key, -1) + 1
        oracle = (self.order.index(key) + self.attempt[key]) % 3 == 0
        return await (self.oracle if oracle else self.endpoint).generate(messages, tools, row)

    async def aclose(self):
        await self.endpoint.aclose()


@pytest.fixture(scope="module")
def sft_adapter(tmp_path_factory, sft_data, tiny_model):
    """A briefly SFT'd tiny model's LoRA adapter: what DPO and rejection-sampling SFT continue (8 steps keep the
    tests fast; conftest's 300-step ``trained`` takes minutes)."""
    from agentrl.train.sft import run_sft

    settings = sft_settings(name="q", data=str(sft_data), max_steps=8, logging_steps=4, check_questions=0,
                            model={"name": str(tiny_model), "lora": {"r": 8, "alpha": 16, "dropout": 0.0}})
    return built_once(tmp_path_factory, "qsft", lambda runs: run_sft(settings, HeldOut(), runs=runs).out / "adapter")


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, small_index, tiny_model, endpoint_url):
    """k = 3 attempts per training item by a policy that succeeds on some of them (TakingTurns), through
    ``run_sample``: every item has an oracle attempt, so the difficulty filter keeps the items the endpoint fails."""
    from agentrl.rollout.endpoint import EndpointConfig, EndpointPolicy
    from agentrl.rollout.oracle import OraclePolicy
    from agentrl.train.grpo import build_task, train_rows

    preset = preference_preset(small_index, tiny_model)
    grpo = preset.grpo()
    order = [str(r["id"]) for r in train_rows(grpo, preset.heldout, preset.data)]
    policy = TakingTurns(OraclePolicy(build_task(grpo, preset.data).oracle_plan),
                         EndpointPolicy(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="sk-test")),
                         order)
    runs = tmp_path_factory.mktemp("pref")
    result = run_sample(preset.sample(), grpo, preset.heldout, preset.data, runs=runs, policy=policy)
    return preset, runs, result


@pytest.fixture(scope="module")
def sample_run(sampled):
    """The sample run's directory (what ``agentrl export --pairs/--successes`` reads)."""
    return sampled[1] / "sample" / "s"


def test_sampling_writes_k_attempts_per_training_item_and_the_difficulty_filter(sampled):
    _, runs, result = sampled
    out = runs / "sample" / "s"
    outcomes = read_jsonl(out / "outcomes.jsonl")
    assert len(outcomes) == 8 and all(len(o["success"]) == 3 for o in outcomes)
    # the oracle's attempt (j = -i mod 3) succeeds on every item
    assert all(o["success"][-i % 3] for i, o in enumerate(outcomes))
    kept = read_json(out / "filtered.json")
    failed = [o["id"] for o in outcomes if not all(o["success"])]  # the endpoint missed at least once
    assert kept == failed and 0 < len(kept) <= 8, outcomes
    assert result["counts"]["all_failure"] == 0
    assert result["counts"]["all_success"] == 8 - len(kept)
    manifest = read_json(out / "manifest.json")
    assert manifest["phase"] == "sample" and manifest["counts"]["kept"] == len(kept) == result["counts"]["kept"]
    assert manifest["counts"]["all_success"] + manifest["counts"]["all_failure"] + len(kept) == 8
    assert "difficulty filter: kept" in summary_line(result, 3)
    # at [grpo]'s temperature, not greedy: k greedy attempts would all be the same
    assert manifest["config"]["temperature"] == 1.0 and manifest["config"]["success_key"] == "f1"
    assert len(list((out / "attempts").glob("a*/trajectories.jsonl"))) == 3
    # GRPO's budgets, not [eval.run]'s: its tool rounds then the answer, and its completion length per episode
    assert (manifest["config"]["max_turns"], manifest["config"]["completion_budget"]) == (3, 160)
    attempts = [t for a in range(3) for t in read_jsonl(out / "attempts" / f"a{a}" / "trajectories.jsonl")]
    assert max(sum(m["role"] == "assistant" for m in t["messages"]) for t in attempts) <= 3


def test_held_out_items_never_enter_the_sampled_items_or_the_exports(sampled, sample_run, tmp_path):
    preset, runs, _ = sampled
    out = runs / "sample" / "s"
    manifest = read_json(out / "manifest.json")
    gate = preset.heldout
    assert manifest["heldout"]["items"] == len(gate) >= 140  # the search questions 60..199 among them
    outcomes = read_jsonl(out / "outcomes.jsonl")
    assert manifest["train_ids"] == [o["id"] for o in outcomes] == [f"dev_{i}" for i in range(8)]
    assert not any(gate.matches(o) for o in outcomes)
    # checked again at export, with the gate of the preset exporting (a later one may hold more out): a held-out
    # item's pairs are dropped, and a sample run made only of held-out items is refused, nothing written
    later = tmp_path / "later"
    shutil.copytree(sample_run, later)
    first = read_jsonl(later / "outcomes.jsonl")[0]
    export_pairs(later, HeldOut([first["question"]], source="a later preset"))  # the item by its text
    assert first["id"] not in {r["id"] for r in read_jsonl(later / "pairs" / "train.jsonl")}
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("outcomes.jsonl", "manifest.json"):
        (bad / name).write_text((out / name).read_text())
    (bad / "attempts").symlink_to(out / "attempts")
    everything = HeldOut([o["question"] for o in outcomes], source="a later preset")
    with pytest.raises(DataError, match="held-out"):
        export_pairs(bad, everything)
    with pytest.raises(DataError, match="held-out"):
        export_successes(bad, everything)
    assert not (bad / "pairs").exists() and not (bad / "successes").exists()


def test_pairs_are_a_success_and_a_failure_of_one_item_with_assistant_turns_as_completions(sample_run):
    out = sample_run
    counts = export_pairs(out, HeldOut())
    rows = read_jsonl(out / "pairs" / "train.jsonl")
    assert counts["pairs"] == len(rows) > 0
    outcomes = {o["id"]: o for o in read_jsonl(out / "outcomes.jsonl")}
    for r in rows:
        assert 0 < outcomes[r["id"]]["successes"] < 3
        assert [m["role"] for m in r["chosen"]] == ["assistant"] == [m["role"] for m in r["rejected"]]
        assert r["chosen"] != r["rejected"]
        assert r["prompt"][0]["role"] == "system" and r["prompt"][1]["role"] == "user"
        assert json.loads(r["tools"])[0]["function"]["name"] == "search"


def test_a_pair_shares_its_common_turns_with_tool_results_as_prompt():
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "q"}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}]}
    result = {"role": "tool", "name": "search", "content": "Doc 1 ..."}
    good = {"messages": [system, user, call, result, {"role": "assistant", "content": "<answer>A</answer>"}]}
    bad = {"messages": [system, user, call, result, {"role": "assistant", "content": "<answer>B</answer>"}]}
    row = pair_row("1", good, bad)
    assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "tool"]
    assert row["prompt"][2]["tool_calls"][0]["function"]["arguments"] == {"query": "x"}
    assert row["chosen"] == [{"role": "assistant", "content": "<answer>A</answer>"}]
    assert row["rejected"] == [{"role": "assistant", "content": "<answer>B</answer>"}]
    assert pair_row("1", good, good) is None  # identical conversations make no pair


def test_successes_export_as_sft_data(sample_run):
    from agentrl.data.export import load_trl_dataset

    out = sample_run
    counts = export_successes(out, HeldOut())
    assert counts["rows"] >= counts["items_with_success"] > 0
    rows = load_trl_dataset(out / "successes" / "trl" / "train.jsonl")
    ids = {o["id"] for o in read_jsonl(out / "outcomes.jsonl") if o["successes"]}
    assert set(rows["id"]) <= ids


@pytest.mark.slow
def test_dpo_trains_the_sft_adapter_a_real_step_against_its_frozen_copy(sample_run, sft_adapter, tiny_model, tmp_path):
    from safetensors.torch import load_file

    from agentrl.train.configs import DPOSettings
    from agentrl.train.dpo import run_dpo

    if not (sample_run / "pairs").exists():
        export_pairs(sample_run, HeldOut())
    # no model name: the base model the adapter was trained on (its base_model.txt)
    cfg = DPOSettings.of(name="d", data=str(sample_run), adapter=str(sft_adapter), max_steps=2,
                         per_device_train_batch_size=2, learning_rate=1e-3, lr_scheduler_type="constant",
                         optim="adamw_torch", gradient_checkpointing=False, beta=0.1, logging_steps=1, report_to=[])
    assert cfg.model.name is None
    m = run_dpo(cfg, HeldOut(), runs=tmp_path)
    assert m["steps"] == 2 and len(m["history"]) == 2
    # step 1 starts at the reference (the adapter equals its frozen copy): loss log 2, zero margin
    assert m["history"][0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert m["history"][0]["rewards/margins"] == pytest.approx(0.0, abs=1e-4)
    adapter = tmp_path / "dpo" / "d" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "ref").exists()
    assert read_json(tmp_path / "dpo" / "d" / "manifest.json")["phase"] == "dpo"
    before = load_file(sft_adapter / "adapter_model.safetensors")
    after = load_file(adapter / "adapter_model.safetensors")
    assert before.keys() == after.keys()
    assert any(not (before[k] == after[k]).all() for k in before)


@pytest.mark.slow
def test_agentrl_dpo_runs_the_demo_presets_dpo_table(sample_run, sft_adapter, tiny_model, tmp_path):
    import subprocess
    import sys
    import tomllib

    demo = tomllib.loads((ROOT / "configs" / "demo.toml").read_text())
    if not (sample_run / "pairs").exists():
        export_pairs(sample_run, HeldOut())
    lines = [f"[dpo]\ndata = '{sample_run}'\nadapter = '{sft_adapter}'"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in demo["dpo"].items() if k not in ("data", "adapter", "model")]
    lines += ["[dpo.model]", f"name = '{tiny_model}'", "backend = 'transformers'"]
    (tmp_path / "p.toml").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", "dpo", "--config", str(tmp_path / "p.toml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{demo['dpo']['max_steps']} DPO steps on transformers" in proc.stdout, proc.stdout
    assert "loss 0.6931 (step 1)" in proc.stdout, proc.stdout
    assert "{'loss'" not in proc.stdout and f"DPO {demo['dpo']['name']}: step" in proc.stdout, proc.stdout
    run = tmp_path / "runs" / "dpo" / demo["dpo"]["name"]
    assert (run / "adapter" / "adapter_config.json").is_file()
    assert [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()
            if "loss" in line][:1] == [1]  # every logged step kept, as SFT and GRPO keep theirs


def test_unknown_dpo_key_is_named_and_missing_pairs_say_how_to_make_them(tmp_path):
    from agentrl.train.configs import DPOSettings
    from agentrl.train.dpo import run_dpo

    with pytest.raises(DataError, match=r"unknown key 'dpo\.betta' \(did you mean 'dpo\.beta'\?\)"):
        DPOSettings.of(betta=0.1)
    with pytest.raises(DataError, match="agentrl export --pairs"):
        run_dpo(DPOSettings.of(data=str(tmp_path)), HeldOut(), runs=tmp_path)


def test_equal_reward_groups_are_found_and_grpo_trains_only_on_the_kept_items(tmp_path):
    import torch

    from agentrl.train.grpo import kept_items
    from agentrl.train.trainers import equal_groups

    adv = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.7, -0.7, 0.7, -0.7, 0.0, 0.0, 0.0, 1e-9])
    assert equal_groups(adv, 4).tolist() == [True, False, True]
    rows = [{"id": str(i), "question": f"q{i}"} for i in range(6)]
    (tmp_path / "filtered.json").write_text(json.dumps(["1", "4", "99"]))
    assert [r["id"] for r in kept_items(rows, tmp_path)] == ["1", "4"]
    (tmp_path / "filtered.json").write_text(json.dumps(["99"]))
    with pytest.raises(DataError, match="none of its 1 kept items"):
        kept_items(rows, tmp_path / "filtered.json")


def test_rejection_sampling_sft_continues_the_sft_adapter_on_the_successes(sample_run, sft_adapter, tmp_path):
    from safetensors.torch import load_file

    from agentrl.train.sft import run_sft

    if not (sample_run / "successes").exists():
        export_successes(sample_run, HeldOut())
    # [rft] is an SFT table of its own: nothing comes from [sft]; no model name: the adapter's base model
    preset = load(None, form={
        "sft": {"name": "sft", "learning_rate": 5e-4, "max_steps": 300, "model": {"name": "elsewhere"}},
        "rft": {"name": "r", "data": str(sample_run / "successes"), "adapter": str(sft_adapter), "max_steps": 2,
                "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "logging_steps": 1,
                "learning_rate": 1e-3, "lr_scheduler_type": "constant", "optim": "adamw_torch", "max_length": 2048,
                "gradient_checkpointing": False, "report_to": [], "check_questions": 0}})
    cfg = preset.rft()
    assert (cfg.name, cfg.adapter, cfg.learning_rate, cfg.max_steps) == ("r", str(sft_adapter), 1e-3, 2)
    assert cfg.model.name is None
    result = run_sft(cfg, preset.heldout, None, preset.data, runs=tmp_path)
    assert result.metrics["steps"] == 2
    before = load_file(sft_adapter / "adapter_model.safetensors")
    after = load_file(result.out / "adapter" / "adapter_model.safetensors")
    assert before.keys() == after.keys() and any(not (before[k] == after[k]).all() for k in before)
    with pytest.raises(DataError, match=r"no \[rft\] table"):
        load(None, form={"sft": {}}).rft()


def test_the_commands_refuse_bad_input_with_exit_2_and_a_named_cause(tmp_path, capsys):
    from agentrl.cli import main

    (tmp_path / "p.toml").write_text("[sample]\nk = 1\n")
    assert main(["sample", "--config", str(tmp_path / "p.toml")]) == 2
    assert "p.toml:2: sample.k: must be at least 2" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text("[sample]\nkk = 4\n")
    assert main(["sample", "--config", str(tmp_path / "p.toml")]) == 2
    assert "p.toml:2: unknown key 'sample.kk' (did you mean 'sample.k'?)" in capsys.readouterr().err
    assert main(["export", "--pairs", str(tmp_path), "--config", "demo"]) == 2
    assert "not a sample run" in capsys.readouterr().err
    assert main(["export", "--pairs", str(tmp_path)]) == 2  # no preset recorded to take the held-out items from
    assert "give --config" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text("[dpo]\nbeta = 0.1\n")
    assert main(["rft", "--config", str(tmp_path / "p.toml")]) == 2
    assert "no [rft] table" in capsys.readouterr().err


def test_a_success_key_that_is_no_metric_stops_before_the_first_attempt(small_index, tiny_model, tmp_path):
    preset = preference_preset(small_index, tiny_model)
    # the preset check refuses it, naming where it was written ...
    with pytest.raises(DataError, match="the notebook's form: sample.success_key: 'f2' is neither a metric of search "
                                        "episodes nor a reward"):
        load(None, form={**preset.data, "sample": {**preset.data["sample"], "success_key": "f2"}})
    # ... and settings built by hand reach the same check before the first attempt
    settings = from_dict(SampleSettings, {**preset.data["sample"], "success_key": "f2"}, "sample")
    with pytest.raises(DataError, match="sample.success_key: 'f2' is neither a metric of search episodes nor a "
                                        "reward"):
        run_sample(settings, preset.grpo(), preset.heldout, preset.data, runs=tmp_path)
    assert not (tmp_path / "sample").exists()


@pytest.mark.parametrize(("text", "message"), [
    ("", "no preference pair"),
    ('{"id": "1", "prompt": [{"role": "user", "content": "q"}], "chosen": "A", "rejected": "B"}\n',
     "pairs.jsonl:1: 'chosen' must be a list of messages"),
])
def test_a_bad_pairs_file_stops_before_the_model_loads(text, message, tmp_path):
    from agentrl.train.configs import DPOSettings
    from agentrl.train.dpo import run_dpo

    (tmp_path / "pairs.jsonl").write_text(text)
    settings = DPOSettings.of(data=str(tmp_path / "pairs.jsonl"), adapter="none", model={"name": "/nonexistent/m"})
    with pytest.raises(DataError, match=message):
        run_dpo(settings, HeldOut(), runs=tmp_path)
    assert not (tmp_path / "dpo").exists()


@pytest.mark.parametrize("adapter", ["none", ""])
def test_dpo_without_an_adapter_trains_a_fresh_lora_on_the_base_model(sample_run, tiny_model, tmp_path, adapter):
    from agentrl.train.configs import DPOSettings
    from agentrl.train.dpo import run_dpo

    if not (sample_run / "pairs").exists():
        export_pairs(sample_run, HeldOut())
    cfg = DPOSettings.of(name="fresh", data=str(sample_run), adapter=adapter, max_steps=1,
                         per_device_train_batch_size=2, optim="adamw_torch", gradient_checkpointing=False,
                         logging_steps=1, report_to=[], model={"name": str(tiny_model)})
    assert cfg.adapter is None
    m = run_dpo(cfg, HeldOut(), runs=tmp_path)
    assert m["steps"] == 1
    run = tmp_path / "dpo" / "fresh"
    assert (run / "adapter" / "adapter_config.json").is_file()
    assert (run / "adapter" / "base_model.txt").read_text().strip() == str(tiny_model)


def test_an_oracle_reference_makes_pairs_wherever_the_model_fails_whatever_it_samples(small_index, tiny_model,
                                                                                       endpoint_url, tmp_path):
    """sample.reference = "oracle" (the demo's): each item's demonstration is recorded beside the model's attempts
    and is the chosen side of the pairs of the attempts that failed; the successes stay the model's own."""
    from agentrl.rollout.endpoint import EndpointConfig, EndpointPolicy

    preset = load(None, form={**preference_preset(small_index, tiny_model).data,
                              "sample": {"name": "ref", "k": 2, "items": 4, "batch": 8, "success_key": "f1",
                                         "success_min": 0.8, "reference": "oracle"}})
    failing = EndpointPolicy(EndpointConfig(base_url=endpoint_url, model="scripted", api_key="sk-test"))
    result = run_sample(preset.sample(), preset.grpo(), preset.heldout, preset.data, runs=tmp_path, policy=failing)
    outcomes = read_jsonl(result["out"] / "outcomes.jsonl")
    assert all(o["reference"] for o in outcomes) and result["counts"]["kept"] == 0  # the filter: the model's own
    failed = [o["id"] for o in outcomes if not all(o["success"])]
    counts = export_pairs(result["out"], HeldOut())
    rows = read_jsonl(result["out"] / "pairs" / "train.jsonl")
    assert counts["pairs"] == len(rows) >= len(failed) > 0 and {r["id"] for r in rows} == set(failed)
    assert all("search" in json.dumps(r["chosen"]) for r in rows)  # the demonstration searches first
    if not any(any(o["success"]) for o in outcomes):
        with pytest.raises(DataError, match="no successful attempt"):
            export_successes(result["out"], HeldOut())


@pytest.mark.slow
def test_dpo_with_the_reference_read_once_before_training_trains_as_the_per_step_reference_does(sample_run, sft_adapter,
                                                                                               tmp_path):
    from agentrl.train.configs import DPOSettings
    from agentrl.train.dpo import run_dpo

    if not (sample_run / "pairs").exists():
        export_pairs(sample_run, HeldOut())
    runs = {}
    for once in (False, True):
        cfg = DPOSettings.of(name=f"d{once}", data=str(sample_run), adapter=str(sft_adapter), max_steps=3,
                             per_device_train_batch_size=2, learning_rate=1e-3, lr_scheduler_type="constant",
                             optim="adamw_torch", gradient_checkpointing=False, beta=0.1, logging_steps=1,
                             report_to=[], precompute_ref_log_probs=once)
        runs[once] = run_dpo(cfg, HeldOut(), runs=tmp_path / str(once))["history"]
    assert runs[True][0]["loss"] == pytest.approx(0.6931, abs=1e-3)  # the precomputed reference is the SFT adapter
    for name in ("loss", "rewards/margins", "rewards/chosen"):
        assert [h[name] for h in runs[True]] == pytest.approx([h[name] for h in runs[False]], abs=1e-4), name
