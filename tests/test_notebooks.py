"""The six notebooks exported to ipynb (scripts/export_to_ipynb.sh) and executed headless in a fresh Jupyter
kernel, in phase order, on a small version of the demo preset; the preset every notebook picks for a GPU card;
a GPU preset's missing inputs on a fresh runtime (built, or a clean stop naming the notebook to run, in Jupyter
and under marimo); plus jupytext bringing an outside notebook in."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.app import notebook as nb
from agentrl.app.presets import load
from conftest import ROOT, small_preset

NOTEBOOKS = ["00_corpus", "01_agent_eval", "02_trajectories", "03_sft", "04_grpo", "05_preference"]


@pytest.fixture
def gpu_line(tmp_path, monkeypatch):
    """Put an ``nvidia-smi`` on PATH that prints the given GPU line: the project's detection (gpu_plan.query_gpus)
    runs for real against it. Without a call, PATH has no nvidia-smi at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *path]))

    def install(line: str) -> None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho '{line}'\n")
        smi.chmod(0o755)

    return install


@pytest.mark.parametrize(("line", "name", "card", "table"), [
    ("Tesla T4, 580.82.07, 7.5, 15360", "colab_qwen3_4b", "T4", False),
    ("NVIDIA L4, 580.82.07, 8.9, 23034", "colab_qwen3_4b", "L4", True),
    ("NVIDIA A100-SXM4-40GB, 580.82.07, 8.0, 40960", "colab_qwen3_4b", "A100-40", True),
    ("NVIDIA A100-SXM4-80GB, 580.82.07, 8.0, 81920", "gpu_qwen2_5_7b", "A100-80", False),
    ("NVIDIA H100 80GB HBM3, 590.44.01, 9.0, 81559", "gpu_qwen2_5_7b", "H100", False),
])
def test_a_gpu_runtime_gets_the_preset_that_fits_its_card_with_its_card_table(gpu_line, line, name, card, table):
    gpu_line(line)
    preset, which = nb.choose_preset({})
    assert nb.preset_name(preset) == name and preset.card == card
    assert f"({card})" in which and f"**{name}**" in which and ("[gpu." in which) == table
    if card == "L4":  # the card's table is merged in: 16-bit GRPO with vLLM at 0.65
        assert preset.grpo().model.load_in_4bit is False
        assert preset.grpo().model.gpu_memory_utilization == 0.65
    asked, why = nb.choose_preset({"config": "demo"})
    assert nb.preset_name(asked) == "demo" and "as asked" in why and asked.card == card


def test_without_a_gpu_every_notebook_uses_the_demo_preset(gpu_line):
    preset, which = nb.choose_preset({})
    assert nb.preset_name(preset) == "demo" and "no NVIDIA GPU" in which


def test_every_notebook_chooses_its_preset_the_same_way_and_says_which():
    for name in NOTEBOOKS:
        source = (ROOT / "notebooks" / f"{name}.py").read_text()
        assert "nb.choose_preset(args)" in source and "load_preset" not in source, name
        assert "which" in source.split("nb.choose_preset(args)", 1)[1].split("return", 1)[0], name


@pytest.mark.slow
def test_a_gpu_presets_sft_inputs_are_built_on_a_fresh_runtime_and_grpo_names_notebook_03(tmp_path, monkeypatch):
    """colab_qwen3_4b on a fresh runtime, the model load not executed: notebook 03's inputs (corpus + index, the
    oracle's demonstrations, the curated SFT data) are built with the earlier phases' own calls; notebook 04 then
    finds no SFT adapter and says which notebook to run. The corpus uses the offline MiniLM (no hub here) over
    30 questions' contexts; everything else is the preset's."""
    from agentrl.core.io import read_jsonl
    from agentrl.train.grpo import heldout_rows

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(ROOT / "data")
    preset = load("colab_qwen3_4b", ['corpus.embedder="minilm"', "corpus.limit=30"])
    inputs = nb.phase_inputs(preset, "sft")
    assert inputs.built == ["00 corpus + index", "01 oracle demonstrations", "02 curated SFT data"]
    assert inputs.missing is None
    oracle = read_jsonl(tmp_path / "runs" / "eval" / "oracle" / "trajectories.jsonl")
    held_out = {r["id"] for r in heldout_rows(preset.grpo(), preset.data)}
    assert len(oracle) == 150 and len(held_out) == 50 and not held_out & {r["id"] for r in oracle}
    train = read_jsonl(tmp_path / "runs" / "data" / "qwen3-4b-sft" / "trl" / "train.jsonl")
    assert train and all(r["messages"][-1]["role"] == "assistant" for r in train)
    assert nb.phase_inputs(preset, "sft").built == []  # a rerun finds everything
    grpo = nb.phase_inputs(preset, "grpo")
    assert grpo.built == [] and "notebook 03" in grpo.missing and "agentrl sft --config colab_qwen3_4b" in grpo.missing


def test_endpoint_check_tells_a_running_server_from_none(endpoint_url):
    from conftest import free_port

    assert nb.endpoint_up(endpoint_url)
    assert not nb.endpoint_up(f"http://127.0.0.1:{free_port()}/v1", timeout=1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("ipynb")
    env = {**os.environ, "OUT_DIR": str(out), "AGENTRL_GIT_URL": "https://github.com/example/agentrl.git"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "export_to_ipynb.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_export_writes_every_notebook_with_a_setup_cell_and_kernelspec(exported):
    for name in NOTEBOOKS:
        nb = json.loads((exported / f"{name}.ipynb").read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "python3"
        setup = "".join(nb["cells"][0]["source"])
        assert nb["cells"][0]["metadata"]["agentrl"] == "setup" and 'find_spec("agentrl") is None' in setup
        assert "unsloth" in setup and "git" in setup
        assert any("nb.use_repo_root()" in "".join(c["source"]) for c in nb["cells"][1:3])


@pytest.mark.slow
def test_a_notebook_that_fails_to_export_fails_the_script(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("this is not a marimo notebook (\n")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "export_to_ipynb.sh"), str(bad)], cwd=ROOT,
                          env={**os.environ, "OUT_DIR": str(tmp_path / "out"),
                               "AGENTRL_GIT_URL": "https://github.com/example/agentrl.git"},
                          capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    assert not (tmp_path / "out" / "broken.ipynb").exists()


def execute(path: Path, work: Path):
    """Run the exported notebook ``path`` top to bottom in a fresh Jupyter kernel in ``work``; return it run."""
    import nbformat
    from nbclient import NotebookClient

    nb_ = nbformat.read(path, as_version=4)
    NotebookClient(nb_, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    return nb_


def outputs(nb_) -> list[dict]:
    """Every output of the code cells of an executed notebook."""
    return [o for c in nb_.cells if c.cell_type == "code" for o in c.get("outputs", [])]


@pytest.mark.slow
def test_every_exported_notebook_runs_top_to_bottom_in_a_fresh_kernel(exported, tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "configs").mkdir(parents=True)
    (work / "data").symlink_to(ROOT / "data")
    (work / "configs" / "nbtest.toml").write_text(small_preset((ROOT / "configs" / "demo.toml").read_text()))
    env = {"AGENTRL_WORKDIR": str(work), "AGENTRL_NB_ARGS": "--config nbtest --limit 40", "HF_HUB_OFFLINE": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the kernel inherits them
    for name in NOTEBOOKS:
        errors = [o for o in outputs(execute(exported / f"{name}.ipynb", work)) if o.get("output_type") == "error"]
        assert not errors, (name, errors)
    assert (work / "runs" / "corpus" / "hotpotqa_sample" / "retrieval_eval.json").exists()
    assert (work / "runs" / "eval" / "oracle" / "metrics.json").exists()
    assert (work / "runs" / "data" / "sft_demo" / "trl" / "train.jsonl").exists()
    assert (work / "runs" / "sft" / "sft_demo" / "adapter" / "adapter_config.json").exists()
    assert json.loads((work / "runs" / "grpo" / "grpo_demo" / "metrics.json").read_text())["steps"] == 2


def _gpu_workdir(tmp_path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs")
    (work / "data").symlink_to(ROOT / "data")
    return work


def test_grpo_notebook_without_its_sft_adapter_stops_cleanly_in_jupyter(exported, tmp_path, monkeypatch):
    """Run all on a fresh runtime with a GPU preset and no SFT adapter: the notebook says to run notebook 03 and
    every later cell runs as a one-line note, so no cell errors and nothing is trained."""
    work = _gpu_workdir(tmp_path)
    monkeypatch.setenv("AGENTRL_WORKDIR", str(work))
    monkeypatch.setenv("AGENTRL_NB_ARGS", "--config colab_qwen3_4b")
    done = outputs(execute(exported / "04_grpo.ipynb", work))
    assert not [o for o in done if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in done if o.get("output_type") == "stream")
    assert "run notebook 03" in text and text.count("skipped (an earlier cell stopped)") >= 4
    assert not (work / "runs" / "grpo").exists()


def test_grpo_notebook_without_its_sft_adapter_stops_cleanly_under_marimo(tmp_path):
    work = _gpu_workdir(tmp_path)
    proc = subprocess.run([sys.executable, str(ROOT / "notebooks" / "04_grpo.py"), "--", "--config", "colab_qwen3_4b"],
                          env={**os.environ, "AGENTRL_WORKDIR": str(work)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "run notebook 03" in proc.stdout and "Traceback" not in proc.stderr
    assert not (work / "runs" / "grpo").exists()


@pytest.mark.slow
def test_eval_notebook_without_a_running_endpoint_runs_the_oracle_or_stops_when_the_endpoint_was_asked_for(tmp_path):
    """A preset that evaluates a served model, on a runtime where nothing serves it: by default notebook 01 says how
    to start the server and runs the oracle's demonstrations (what 02 curates); with `--policy endpoint` it stops
    cleanly instead of sending every question to a dead server."""
    from conftest import free_port

    work = _gpu_workdir(tmp_path)
    preset = tmp_path / "served.toml"
    text = small_preset((ROOT / "configs" / "demo.toml").read_text())
    text = text.replace('name = "oracle"\n', 'name = "served"\n', 1)
    text = text.replace('policy = "oracle"', 'policy = "endpoint"', 1)
    assert 'name = "served"' in text and 'policy = "endpoint"' in text
    preset.write_text(f'{text}\n[eval.endpoint]\nbase_url = "http://127.0.0.1:{free_port()}/v1"\n'
                      'model = "Qwen/Qwen3-4B-Instruct-2507"\n')

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "notebooks" / "01_agent_eval.py"), "--", "--config",
                               str(preset), *extra], env={**os.environ, "AGENTRL_WORKDIR": str(work)},
                              capture_output=True, text=True, timeout=900)

    asked = run("--policy", "endpoint")
    assert asked.returncode == 0 and "No server answers" in asked.stdout and "vllm serve" in asked.stdout
    assert not (work / "runs" / "eval").exists()
    default = run()
    assert default.returncode == 0, default.stderr[-2000:]
    assert "No server answers" in default.stdout and "runs the **oracle**" in default.stdout
    assert "--max-model-len 16384" in default.stdout
    oracle = (work / "runs" / "eval" / "oracle" / "trajectories.jsonl").read_text().splitlines()
    assert len(oracle) == 30 and not (work / "runs" / "eval" / "served").exists()  # [eval] limit


@pytest.mark.slow
def test_jupytext_brings_an_outside_ipynb_into_marimo(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# An outside notebook"),
                nbformat.v4.new_code_cell("from agentrl.core.metrics import answer_metrics\nx = 2"),
                nbformat.v4.new_code_cell("print(answer_metrics('Tim Burton', ['tim burton'])['em'] * x)")]
    src = tmp_path / "outside.ipynb"
    nbformat.write(nb, src)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run([sys.executable, "-m", "jupytext", "--to", "py:marimo", str(src)], check=True, env=env,
                   capture_output=True, timeout=300)
    converted = tmp_path / "outside.py"
    assert "marimo.App" in converted.read_text()
    check = subprocess.run([sys.executable, "-m", "marimo", "check", str(converted)], env=env, capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([sys.executable, str(converted)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "2.0" in run.stdout, run.stderr


def _headless(notebook: str, args: list[str], work: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "notebooks" / f"{notebook}.py"), "--", *args],
                          env={**os.environ, "AGENTRL_WORKDIR": str(work), "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(("notebook", "args", "message"), [
    ("03_sft", ["--config", "demo", "--max-step", "3"], "notebook 03_sft takes no --max-step (from its command line)"),
    ("05_preference", ["--config", "demo", "--resume"], "notebook 05_preference takes no --resume"),
    ("00_corpus", ["--config", "demo", "--rebuild", "yes please"], "notebook 00_corpus: --rebuild takes no value"),
    ("03_sft", ["--config", "demo", "--max-steps=-3"], "sft.max_steps: must be at least -1, got -3"),
    ("01_agent_eval", ["--config", "demo", "--temperature", "5"], "eval.endpoint.temperature: must be at most 2"),
])
def test_a_headless_notebook_refuses_a_flag_it_does_not_take_and_checks_the_ones_it_does(notebook, args, message,
                                                                                       tmp_path):
    work = _gpu_workdir(tmp_path)
    proc = _headless(notebook, args, work, timeout=300)
    assert proc.returncode != 0 and message in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    assert not (work / "runs").exists()  # refused before any work


def test_flags_reach_a_notebook_as_their_kinds_from_its_command_line_or_the_jupyter_variable(monkeypatch, capsys):
    from agentrl.app import notebook as nb

    monkeypatch.setenv("AGENTRL_NB_ARGS", "--config demo --resume --max-steps 3 --limit 40")
    assert nb.cli_args("03_sft") == {"config": "demo", "resume": True, "max_steps": 3}
    assert "--limit in AGENTRL_NB_ARGS is for notebook 01_agent_eval; not used here" in capsys.readouterr().out
    monkeypatch.setenv("AGENTRL_NB_ARGS", "--config demo --overwrite false --set sft.max_steps=2")
    assert nb.cli_args("04_grpo") == {"config": "demo", "overwrite": False, "set": ["sft.max_steps=2"]}
    monkeypatch.setenv("AGENTRL_NB_ARGS", "--frobnicate 1")
    with pytest.raises(SystemExit) as exc:
        nb.cli_args("02_trajectories")
    assert exc.value.code == 2 and "takes no --frobnicate (from AGENTRL_NB_ARGS)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_headless_sft_notebook_honours_max_steps_resume_and_overwrite(tmp_path, tiny_model, sft_data):
    """`--max-steps` trains that many steps; `--resume` (a bare flag) continues from the checkpoint; `--overwrite`
    deletes the earlier run's checkpoints instead of moving them aside. The SFT data is the session's curated
    demonstrations (building them on a fresh runtime is the top-to-bottom test's)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs")
    (work / "data").symlink_to(ROOT / "data")
    (work / "runs" / "models").mkdir(parents=True)
    (work / "runs" / "models" / "tiny").symlink_to(tiny_model)
    (work / "runs" / "data").mkdir()
    (work / "runs" / "data" / "sft_demo").symlink_to(sft_data)
    common = ["--config", "demo", "--name", "nb", "--set", "sft.save_steps=1", "--set", "sft.check_questions=0"]
    first = _headless("03_sft", [*common, "--max-steps", "2"], work)
    assert first.returncode == 0, first.stderr[-3000:]
    metrics = json.loads((work / "runs" / "sft" / "nb" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["resumed_from"] is None
    again = _headless("03_sft", [*common, "--max-steps", "3", "--resume"], work)
    assert again.returncode == 0, again.stderr[-3000:]
    metrics = json.loads((work / "runs" / "sft" / "nb" / "metrics.json").read_text())
    assert metrics["steps"] == 3 and metrics["resumed_from"] == "checkpoint-2"
    fresh = _headless("03_sft", [*common, "--max-steps", "1", "--overwrite"], work)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert not list((work / "runs" / "sft" / "nb" / "trainer").glob("earlier-*"))  # deleted, not moved aside


@pytest.mark.parametrize("preset", ["colab_qwen3_4b", "gpu_qwen2_5_7b"])
def test_the_preference_notebook_under_a_gpu_preset_checks_its_tables_and_stops_before_work_without_the_adapter(
        preset, tmp_path):
    """Notebook 05 headless on a fresh runtime with a GPU preset: its [sample], [dpo] and [rft] settings pass their
    checks, then it stops saying which notebook trains the SFT adapter it starts from; nothing is sampled."""
    work = _gpu_workdir(tmp_path)
    proc = _headless("05_preference", ["--config", preset], work, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "run notebook 03 (03_sft) with the same preset first" in proc.stdout, proc.stdout[-2000:]
    assert not (work / "runs" / "sample").exists()


def test_the_preference_notebook_with_a_preset_lacking_dpo_stops_before_it_builds_anything(tmp_path):
    """A preset without [dpo] / [rft] (a user's own, here demo's tables but those two): one line naming them, before
    the corpus, index or SFT adapter that a CPU preset would otherwise build first."""
    work = _gpu_workdir(tmp_path)
    mine = work / "mine.toml"
    text = (ROOT / "configs" / "demo.toml").read_text()
    mine.write_text(text.split("\n[dpo]", 1)[0] + "\n")  # demo's [dpo] and [rft] are its last tables
    assert "[grpo]" in mine.read_text() and "[rft]" not in mine.read_text()
    proc = _headless("05_preference", ["--config", str(mine)], work, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "has no [dpo] / [rft] table" in proc.stdout
    assert not (work / "runs").exists()
