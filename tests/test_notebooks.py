"""The five notebooks exported to ipynb (scripts/export_to_ipynb.sh) and executed headless in a fresh Jupyter
kernel, in phase order, on a small version of the demo preset; plus jupytext bringing an outside notebook in."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, small_preset

NOTEBOOKS = ["00_corpus", "01_agent_eval", "02_trajectories", "03_sft", "04_grpo"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("ipynb")
    env = {**os.environ, "OUT_DIR": str(out), "AGENTRL_GIT_URL": "https://github.com/example/agentrl.git"}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "export_to_ipynb.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


def test_export_writes_every_notebook_with_a_setup_cell_and_kernelspec(exported):
    for name in NOTEBOOKS:
        nb = json.loads((exported / f"{name}.ipynb").read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "python3"
        setup = "".join(nb["cells"][0]["source"])
        assert nb["cells"][0]["metadata"]["agentrl"] == "setup" and 'find_spec("agentrl") is None' in setup
        assert "unsloth" in setup and "git" in setup
        assert any("nb.use_repo_root()" in "".join(c["source"]) for c in nb["cells"][1:3])


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


def test_every_exported_notebook_runs_top_to_bottom_in_a_fresh_kernel(exported, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    work = tmp_path / "work"
    (work / "configs").mkdir(parents=True)
    (work / "data").symlink_to(ROOT / "data")
    (work / "configs" / "nbtest.toml").write_text(small_preset((ROOT / "configs" / "demo.toml").read_text()))
    env = {"AGENTRL_WORKDIR": str(work), "AGENTRL_NB_ARGS": "--config nbtest --limit 40", "HF_HUB_OFFLINE": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits them
    try:
        for name in NOTEBOOKS:
            nb = nbformat.read(exported / f"{name}.ipynb", as_version=4)
            where = {"metadata": {"path": str(work)}}
            NotebookClient(nb, timeout=1200, kernel_name="python3", resources=where).execute()
            errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.get("output_type") == "error"]
            assert not errors, (name, errors)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert (work / "runs" / "corpus" / "hotpotqa_sample" / "retrieval_eval.json").exists()
    assert (work / "runs" / "eval" / "oracle" / "metrics.json").exists()
    assert (work / "runs" / "data" / "sft_demo" / "trl" / "train.jsonl").exists()
    assert (work / "runs" / "sft" / "sft_demo" / "adapter" / "adapter_config.json").exists()
    assert json.loads((work / "runs" / "grpo" / "grpo_demo" / "metrics.json").read_text())["steps"] == 2


def test_jupytext_brings_an_outside_ipynb_into_marimo(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# An outside notebook"),
                nbformat.v4.new_code_cell("from agentrl.metrics import answer_metrics\nx = 2"),
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
