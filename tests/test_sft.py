"""Phase 03: LoRA SFT with real TRL on the tiny model, on CPU."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from agentrl.core.heldout import HeldOut
from agentrl.core.io import DataError
from agentrl.train.models import choose_backend
from agentrl.train.sft import length_filter, run_sft
from conftest import HOTPOT, PROBE, ROOT, UNSLOTH_MISSING, run_cli_on_unsloth_cpu, sft_settings


def test_loss_falls_over_a_short_run(trained):
    losses = [x["loss"] for x in trained.metrics["loss"]]
    assert len(losses) >= 10
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first - 1.0, losses
    assert trained.metrics["eval_loss"] and trained.metrics["eval_loss"][-1]["eval_loss"] < losses[0]


def test_the_inference_check_runs_base_and_sft_on_held_out_questions_only(trained):
    base, sft = trained.metrics["check"]["base"], trained.metrics["check"]["sft"]
    print(f"well-formed tool-call episodes: base {base['episodes_with_wellformed_call']}, "
          f"sft {sft['episodes_with_wellformed_call']}")
    assert base["n"] == sft["n"] == 10
    # shares, whatever the models sampled: that SFT raises them is a learning claim, measured by `agentrl demo` and
    # benchmarks/learning.py, not bet on here (another machine's kernels sample other tokens)
    for side in (base, sft):
        assert 0.0 <= side["episodes_with_wellformed_call"] <= 1.0
    trajs = [json.loads(line) for line in (trained.out / "check" / "sft" / "trajectories.jsonl").open()]
    assert {t["id"] for t in trajs} == {f"dev_{i}" for i in range(60, 70)}  # held out: never trained on


def test_run_directory_has_adapter_metrics_and_manifest(trained):
    out = trained.out
    assert (out / "adapter" / "adapter_config.json").exists()
    assert (out / "adapter" / "tokenizer_config.json").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "transformers" and manifest["phase"] == "sft"
    assert manifest["counts"]["steps"] == 300
    assert json.loads((out / "metrics.json").read_text())["check"]["sft"]["n"] == 10
    # every logged step in log.jsonl (logging_steps 20 over 300 steps, and the first step)
    logged = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "loss" in r] == [1, *range(20, 301, 20)]


def test_save_then_reload_gives_the_same_outputs(trained, tiny_model):
    import torch

    from agentrl.rollout.local import load_inference_model

    reloaded, tok = load_inference_model(tiny_model, trained.out / "adapter")  # the adapter merged in
    plain, _ = load_inference_model(tiny_model)
    ids = tok(PROBE, return_tensors="pt")["input_ids"]
    a = trained.probe_logits  # the trained model's, in the process that trained it
    with torch.no_grad():
        b = reloaded(input_ids=ids).logits
        base = plain(input_ids=ids).logits
    assert not hasattr(reloaded, "peft_config")  # merged: plain weights, no adapter layers at inference
    assert torch.allclose(a, b, atol=1e-4)
    assert not torch.allclose(a, base, atol=1e-3)  # the adapter matters


def test_only_assistant_tokens_carry_loss_in_a_two_turn_tool_conversation(tiny_model, tmp_path):
    from agentrl.rollout.local import load_tokenizer
    from agentrl.train import sft

    tools = [{"type": "function", "function": {"name": "search", "description": "Search.", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "description": "q"}}, "required": ["query"]}}}]
    messages = [
        {"role": "system", "content": "Answer with the search tool."},
        {"role": "user", "content": "Who directed Ed Wood?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "Ed Wood film"}}}]},
        {"role": "tool", "name": "search", "content": "Doc 1 (Title: Ed Wood (film)) directed by Tim Burton."},
        {"role": "assistant", "content": "<answer>Tim Burton</answer>"},
    ]
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"id": "x", "messages": messages, "tools": json.dumps(tools)}) + "\n")
    # through the project's own trainer setup (assistant_only_loss with the {% generation %} template)
    settings = sft_settings(name="mask", data=str(path), max_steps=1, per_device_train_batch_size=1,
                            check_questions=0, model={"name": str(tiny_model)})
    loaded = sft.load_model(settings)
    data = sft.load_data(settings, loaded.tokenizer, HeldOut())
    trainer = sft.make_trainer(settings, loaded, data, sft.build_args(settings, data, tmp_path))
    assert trainer.args.assistant_only_loss
    batch = trainer.data_collator([trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    tok = load_tokenizer(tiny_model)
    trained_text = tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab != -100])
    assert trained_text == ('<tool_call>\n{"name": "search", "arguments": {"query": "Ed Wood film"}}\n</tool_call>'
                            "<|im_end|>\n<answer>Tim Burton</answer><|im_end|>\n")
    ignored = tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab == -100])
    assert "Doc 1 (Title: Ed Wood (film))" in ignored and "Who directed Ed Wood?" in ignored


def test_overlong_rows_are_dropped_or_truncated_and_counted(sft_data, tiny_model):
    from agentrl.data.export import load_trl_dataset
    from agentrl.rollout.local import load_tokenizer
    from agentrl.train.sft import _training_template

    tok = load_tokenizer(tiny_model)
    template, _ = _training_template(tok)
    ds = load_trl_dataset(sft_data / "trl" / "train.jsonl")
    lengths = sorted(len(tok.apply_chat_template(r["messages"], tools=json.loads(r["tools"]), return_dict=True)
                         ["input_ids"]) for r in ds)
    cut = lengths[len(lengths) // 2]
    kept, counts = length_filter(ds, tok, cut, "drop", template)
    assert counts["over_max_length"] == counts["dropped"] == sum(1 for n in lengths if n > cut) > 0
    assert len(kept) == len(ds) - counts["dropped"]
    kept, counts = length_filter(ds, tok, cut, "truncate", template)
    assert counts["truncated"] == counts["over_max_length"] and counts["dropped"] == 0 and len(kept) == len(ds)


def test_bad_sft_inputs_give_clear_errors(tmp_path, tiny_model, sft_data):
    empty = tmp_path / "empty" / "trl"
    empty.mkdir(parents=True)
    (empty / "train.jsonl").write_text("")
    base = dict(model={"name": str(tiny_model)}, max_steps=1, check_questions=0)
    with pytest.raises(DataError, match="empty dataset"):
        run_sft(sft_settings(data=str(tmp_path / "empty"), **base), HeldOut(), runs=tmp_path)
    no_assistant = tmp_path / "na" / "trl"
    no_assistant.mkdir(parents=True)
    (no_assistant / "train.jsonl").write_text(json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "tools": "[]"}) + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl:1: row has no assistant turn"):
        run_sft(sft_settings(data=str(tmp_path / "na"), **base), HeldOut(), runs=tmp_path)
    with pytest.raises(DataError, match="no row fits max_length=16"):
        run_sft(sft_settings(data=str(sft_data), **{**base, "max_length": 16}), HeldOut(), runs=tmp_path)
    with pytest.raises(DataError, match="no TRL dataset"):
        run_sft(sft_settings(data=str(tmp_path / "nowhere"), **base), HeldOut(), runs=tmp_path)


def test_a_missing_adapter_is_a_clear_error(tiny_model, tmp_path, capsys):
    from agentrl.cli import main
    from agentrl.rollout.local import load_inference_model

    with pytest.raises(DataError, match="adapter not found"):
        load_inference_model(tiny_model, tmp_path / "no_adapter")
    assert main(["eval", "--policy", "local", "--model-path", str(tiny_model), "--adapter", str(tmp_path / "x"),
                 "--qa", str(HOTPOT), "--env-arg", f"index={tmp_path}", "--limit", "1"]) == 2
    assert "not found" in capsys.readouterr().err


def test_unsloth_without_a_gpu_falls_back_with_a_reason(monkeypatch):
    monkeypatch.delenv("UNSLOTH_FORCE_CPU", raising=False)
    backend, reason = choose_backend("unsloth")
    assert backend == "transformers" and "fell back" in reason
    assert choose_backend("transformers") == ("transformers", "requested")
    with pytest.raises(DataError, match="backend must be"):
        choose_backend("jax")


@pytest.mark.slow
def test_two_process_accelerate_run_completes(tmp_path, sft_data, tiny_model):
    preset = tmp_path / "p.toml"
    preset.write_text(f'[sft]\nname = "ddp"\ndata = "{sft_data}"\nmax_steps = 2\nper_device_train_batch_size = 2\n'
                      f'gradient_accumulation_steps = 1\noptim = "adamw_torch"\ngradient_checkpointing = false\n'
                      f'max_length = 2048\nreport_to = []\ncheck_questions = 0\nlogging_steps = 1\n'
                      f'[sft.model]\nname = "{tiny_model}"\n')
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"), "-m", "agentrl.cli", "sft", "--config", str(preset)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "runs" / "sft" / "ddp" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 2
    assert (tmp_path / "runs" / "sft" / "ddp" / "adapter" / "adapter_model.safetensors").exists()
    assert proc.stdout.count("2 steps on transformers") == 1  # only the main process reports


def test_a_rank_ends_its_process_group_before_exit(tmp_path):
    import torch.distributed as dist

    from agentrl.train.checkpoints import end_distributed

    assert end_distributed() is False  # no group: nothing to do
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        assert end_distributed() is True
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("unsloth") is None, reason=UNSLOTH_MISSING)
def test_unsloth_backend_trains_checks_and_merges_on_its_cpu_path(tmp_path, sft_data, tiny_model, small_index):
    """Unsloth's own calls (from_pretrained, get_peft_model, SFT, save_pretrained_merged), on its CPU backend.

    Runs in a subprocess: importing unsloth patches trl and transformers for the whole process.
    """
    preset = tmp_path / "u.toml"
    preset.write_text(f'[sft]\nname = "u"\ndata = "{sft_data}"\nmax_steps = 3\nper_device_train_batch_size = 2\n'
                      f'gradient_accumulation_steps = 1\noptim = "adamw_torch"\ngradient_checkpointing = false\n'
                      f'max_length = 2048\nreport_to = []\ncheck_questions = 2\nlogging_steps = 1\nmerge = true\n'
                      f'[sft.model]\nname = "{tiny_model}"\nbackend = "unsloth"\n'
                      f'[eval.search]\nindex = "{small_index}"\nqa = "{HOTPOT}"\npassage_chars = 200\n'
                      'max_turns = 3\n')
    run_cli_on_unsloth_cpu(["sft", "--config", str(preset)], tmp_path)
    out = tmp_path / "runs" / "sft" / "u"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "unsloth" and "UNSLOTH_FORCE_CPU" in manifest["backend_reason"]
    assert (out / "adapter" / "adapter_config.json").exists()
    assert (out / "merged" / "config.json").exists() and list((out / "merged").glob("*.safetensors"))


@pytest.mark.slow
def test_the_cli_trains_with_its_progress_line_where_ipython_is_not_installed(tmp_path, sft_data, tiny_model):
    """A rented GPU box runs the CLI without IPython (not a runtime dependency): the run trains and shows the
    terminal line. A sitecustomize makes ``import IPython`` fail in the subprocess, as on such a machine."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import sys\nsys.modules['IPython'] = None  # not installed\n")
    preset = tmp_path / "p.toml"
    preset.write_text(f'[sft]\nname = "noipy"\ndata = "{sft_data}"\nmax_steps = 2\nper_device_train_batch_size = 2\n'
                      'optim = "adamw_torch"\ngradient_checkpointing = false\nmax_length = 2048\nreport_to = []\n'
                      f'check_questions = 0\nlogging_steps = 1\n[sft.model]\nname = "{tiny_model}"\n'
                      'backend = "transformers"\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", "import IPython"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0  # the machine this test stands for
    proc = subprocess.run([sys.executable, "-m", "agentrl.cli", "sft", "--config", str(preset)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SFT noipy: step 2/2" in proc.stdout + proc.stderr
    assert (tmp_path / "runs" / "sft" / "noipy" / "adapter" / "adapter_config.json").is_file()


def test_a_batch_reading_its_shared_untrained_prefix_once_gives_trls_loss_and_gradients(sft_data, tiny_model, tmp_path):
    import torch

    from agentrl.train import sft
    from agentrl.train.shared_prefill import labelled_prefix

    settings = sft_settings(name="prefix", data=str(sft_data), max_steps=1, per_device_train_batch_size=4,
                            check_questions=0, gradient_checkpointing=False,  # no dropout: the same masks both ways
                            model={"name": str(tiny_model), "lora": {"dropout": 0.0}})
    loaded = sft.load_model(settings)
    data = sft.load_data(settings, loaded.tokenizer, HeldOut())
    trainer = sft.make_trainer(settings, loaded, data, sft.build_args(settings, data, tmp_path))
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    n = labelled_prefix(batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert n >= 16 and bool((batch["labels"][:, :n + 1] == -100).all())  # the system prompt, never trained on
    model = trainer.model
    model.train()
    lora = [p for p in model.parameters() if p.requires_grad]
    items = (batch["labels"][:, 1:] != -100).sum()

    def loss_and_grads(share: bool):
        trainer._share = share
        loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=items)
        return loss.detach(), torch.autograd.grad(loss, lora)

    (loss_off, grads_off), (loss_on, grads_on) = loss_and_grads(False), loss_and_grads(True)
    assert torch.allclose(loss_on, loss_off, atol=1e-5) and loss_off > 0
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-3) for a, b in zip(grads_on, grads_off, strict=True))
    reused = trainer._metrics["train"]["prompts/reused"]
    assert len(reused) == 1 and reused[0] > 0.1  # only the shared call logs it
    accuracy = trainer._metrics["train"]["mean_token_accuracy"]
    assert len(accuracy) == 2 and accuracy[0] == pytest.approx(accuracy[1], abs=1e-6)  # TRL's metrics unchanged
    trainer._share = None  # decided again from the settings: "auto" = on a CPU
    settings.share_prompt_prefill = "on"
    trainer.agentrl_backend = "unsloth"
    from agentrl.train.sft_trainer import sft_share_plan

    share, line = sft_share_plan(settings, trainer.args, None, model, "unsloth")
    assert not share and "Unsloth backend" in line
