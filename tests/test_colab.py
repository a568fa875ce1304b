"""The Colab / rented-GPU setup: driver check, the one pinned install call, restart notice, the export script on
a fresh clone (origin URL, --bundle). The pins themselves resolve in CI (`python -m agentrl.colab check-pins`
in .ci/run); nothing here installs the GPU stack."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl import colab
from agentrl.gpu_plan import GPU, parse_nvidia_smi
from conftest import ROOT

T4_OLD = GPU("Tesla T4", "550.54.15", (7, 5), 15360)
T4 = GPU("Tesla T4", "580.82.07", (7, 5), 15360)
A100 = GPU("NVIDIA A100-SXM4-40GB", "590.44.01", (8, 0), 40960)


def test_driver_table_follows_the_cuda_major_of_the_torch_build():
    assert colab.TORCH_CUDA == (13, 0)
    assert colab.driver_supports("580.65.06") and colab.driver_supports("590.44.01")
    assert not colab.driver_supports("575.57.08") and not colab.driver_supports("550.54.15")
    assert colab.driver_supports("525.60.13", (12, 8)) and not colab.driver_supports("520.61.05", (12, 0))
    assert not colab.driver_supports("999.0", (14, 0))  # an unknown CUDA major is never assumed to work


def test_an_old_driver_stops_before_installing_with_what_to_do():
    d = colab.decide([T4_OLD], have_agentrl=False, repo="/r")
    assert d.install == [] and "550.54.15" in d.stop and ">= 580.65.06" in d.stop
    assert "AGENTRL_GPU_STACK=none" in d.stop and "CPU" in d.stop
    none = colab.decide([T4_OLD], have_agentrl=False, repo="/r", stack="none")
    assert none.stop is None and none.install == ["-e", "/r"]  # agentrl only, on the runtime's torch


def test_one_install_holds_the_repo_and_every_pin_with_torchvision_and_torchaudio_matching_torch():
    d = colab.decide([A100], have_agentrl=False, repo="/r")
    assert d.install[:2] == ["-e", "/r"]
    assert set(d.install[2:]) == {f"{k}=={v}" for k, v in colab.PINS.items()}
    assert {"torch==2.13.0", "torchvision==0.28.0", "torchaudio==2.11.0", "vllm==0.30.0"} <= set(d.install)
    cmd = colab.install_command(d.install, "/tmp/x.txt", python="/usr/bin/python3")
    assert cmd[:4] == ["/usr/bin/python3", "-m", "uv", "pip"] and cmd.count("install") == 1
    assert cmd[cmd.index("--excludes") + 1] == "/tmp/x.txt" and cmd[-len(d.install):] == d.install
    assert colab.requirements_text(d.install).splitlines()[0] == "-e /r"


def test_a_t4_gets_the_stack_with_a_note_and_can_skip_vllm():
    d = colab.decide([T4], have_agentrl=True)
    assert "vllm==0.30.0" in d.install and any("no bfloat16" in n for n in d.notes)
    assert "-e" not in d.install  # agentrl is importable: only the GPU stack
    no_vllm = colab.decide([T4], have_agentrl=True, vllm=False)
    assert not any(r.startswith("vllm") for r in no_vllm.install) and "unsloth==2026.10.9" in no_vllm.install


def test_the_gpu_stack_is_installed_even_when_agentrl_is_importable_and_skipped_once_complete():
    versions = dict(colab.PINS)
    partial = colab.decide([A100], have_agentrl=True, installed=lambda n: None if n == "vllm" else versions[n])
    assert partial.install and "-e" not in partial.install
    complete = colab.decide([A100], have_agentrl=True, installed=versions.get)
    assert complete.install == [] and "installed already" in complete.notes[-1]
    assert colab.decide([], have_agentrl=True).install == []  # no GPU, agentrl present: nothing
    assert colab.decide([], have_agentrl=False, repo="/r").install == ["-e", "/r"]


def test_restart_is_needed_only_for_packages_already_imported():
    pins = ["torch==2.13.0", "unsloth_zoo==2026.10.9", "vllm==0.30.0"]
    assert colab.needs_restart(pins, {"torch": object(), "json": object()}) == ["torch"]
    assert colab.needs_restart(pins, {}) == []


def test_nvidia_smi_lines_are_parsed():
    gpus = parse_nvidia_smi("Tesla T4, 580.82.07, 7.5, 15360\nNVIDIA H100 80GB HBM3, 590.44.01, 9.0, 81559\n")
    assert gpus[0] == T4 and gpus[0].card == "T4" and gpus[1].card == "H100" and gpus[1].compute_cap == (9, 0)


def test_the_setup_cell_in_a_checkout_without_a_gpu_does_nothing(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"}  # no nvidia-smi
    env.pop("AGENTRL_WORKDIR", None)
    code = colab.setup_source("https://example.invalid/agentrl.git") + "print(os.environ['AGENTRL_WORKDIR'])\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(ROOT) and "install" not in proc.stdout


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """The working tree as a repository whose origin is a hosted URL, cloned with `git clone upstream clone`
    (so the clone's origin is a local path) — no .venv, nothing synced."""
    root = tmp_path_factory.mktemp("clone")
    upstream = root / "upstream"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (upstream / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, upstream / f)
    _git("init", "-q", "-b", "main", cwd=upstream)
    _git("add", "-A", cwd=upstream)
    _git("commit", "-q", "-m", "snapshot", cwd=upstream)
    _git("remote", "add", "origin", "https://github.com/example/agentrl.git", cwd=upstream)  # never contacted
    _git("clone", "-q", str(upstream), str(root / "clone"), cwd=root)
    return root / "clone"


def test_a_fresh_clone_exports_notebooks_whose_setup_cell_clones_the_origin_and_installs_the_pins(fresh_clone):
    out = fresh_clone / "build" / "nb"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRL_", "VIRTUAL_ENV", "UV_PROJECT"))}
    proc = subprocess.run(["bash", "scripts/export_to_ipynb.sh", "--bundle", "notebooks/03_sft.py"],
                          cwd=fresh_clone, env={**env, "OUT_DIR": str(out)}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert not (fresh_clone / ".venv").exists()  # the export did not need `uv sync`
    setup = "".join(json.loads((out / "03_sft.ipynb").read_text())["cells"][0]["source"])
    assert "'https://github.com/example/agentrl.git'" in setup and "'main'" in setup
    assert "run_setup" in setup and "agentrl_bundle" in setup
    bundle = out / "agentrl_bundle"
    wheel = next(bundle.glob("agentrl-*.whl"))
    assert (bundle / "configs" / "colab_qwen3_4b.toml").is_file()
    assert (bundle / "data" / "samples" / "hotpotqa_dev_200.jsonl").is_file()
    # the cell imports agentrl.colab from the wheel before anything is installed; on a GPU it installs the wheel
    # and the pins in one call
    probe = (f"import sys; sys.path.insert(0, {str(wheel)!r}); from agentrl import colab, gpu_plan; "
             "g = gpu_plan.GPU('Tesla T4', '580.82.07', (7, 5), 15360); "
             f"print(colab.decide([g], have_agentrl=False, wheel={str(wheel)!r}).install)")
    got = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert str(wheel) in got.stdout and "vllm==0.30.0" in got.stdout and "-e" not in got.stdout


def test_export_without_a_clone_url_names_the_variable(tmp_path, fresh_clone):
    lonely = tmp_path / "lonely"
    shutil.copytree(fresh_clone, lonely, ignore=shutil.ignore_patterns("build"))
    _git("remote", "remove", "origin", cwd=lonely)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRL_")}
    proc = subprocess.run(["bash", "scripts/export_to_ipynb.sh", "notebooks/03_sft.py"], cwd=lonely,
                          env={**env, "OUT_DIR": str(tmp_path / "o")}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "AGENTRL_GIT_URL" in proc.stderr and "--bundle" in proc.stderr
    assert not (tmp_path / "o" / "03_sft.ipynb").exists()
