"""The Colab / rented-GPU setup: the stack each driver gets, the one pinned install call (its CUDA 12 form parsed by
the real uv), installed builds told apart, the install plan for each card and driver, the restart stop (a real
install into a real venv), where uv comes from, externally managed Pythons, the export script on a fresh clone
(origin URL made anonymous https, --bundle and its message when the bundle is missing), and the flags of every
documented `vllm serve` command. The PyPI stacks resolve in CI (`python -m agentrl.colab check-pins` in .ci/run);
nothing here installs the GPU stack."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl import colab
from agentrl.train import gpu_stack
from agentrl.train.gpu_plan import GPU, parse_nvidia_smi
from conftest import ROOT

T4_OLD = GPU("Tesla T4", "520.61.05", (7, 5), 15360)
T4_COLAB = GPU("Tesla T4", "550.54.15", (7, 5), 15360)
T4 = GPU("Tesla T4", "580.82.07", (7, 5), 15360)
A100 = GPU("NVIDIA A100-SXM4-40GB", "590.44.01", (8, 0), 40960)
CU130, CU129, CU128 = (gpu_stack.STACKS[n] for n in ("cu130", "cu129", "cu128"))
NOTHING = {"installed": lambda name: None, "torch_build": lambda: None}


def test_each_driver_class_gets_a_stack_whose_cuda_it_runs():
    choose = gpu_stack.choose_stack
    expected = {"525.60.13": "cu129", "550.54.15": "cu129", "570.172.08": "cu129", "580.65.05": "cu129",
                "580.65.06": "cu130", "580.82.07": "cu130", "590.44.01": "cu130"}
    for driver, name in expected.items():
        stack, stop = choose(driver)
        assert stop is None and stack.name == name, driver
        assert gpu_stack.driver_supports(driver, stack.cuda)
    assert choose("570.172.08", "cu128")[0] is CU128 and choose("580.82.07", "cu129")[0] is CU129
    stack, stop = choose("550.54.15", "cu130")  # asked for CUDA 13 on a CUDA 12 driver
    assert stack is None and ">= 580.65.06" in stop and "cu129 or cu128" in stop
    assert "not a stack" in choose("580.82.07", "cu131")[1] and choose("580.82.07", "none") == (None, None)
    assert not gpu_stack.driver_supports("999.0", (14, 0))  # an unknown CUDA major is never assumed to work


def test_a_driver_too_old_for_any_build_stops_before_installing_with_what_to_do():
    d = colab.decide([T4_OLD], have_agentrl=False, repo="/r")
    assert d.install == [] and "520.61.05" in d.stop and ">= 525.60.13" in d.stop
    assert "AGENTRL_GPU_STACK=none" in d.stop and "CPU" in d.stop
    none = colab.decide([T4_OLD], have_agentrl=False, repo="/r", stack="none", **NOTHING)
    assert none.stop is None and none.install == ["-e", "/r", "bitsandbytes==0.50.2"]  # on the runtime's torch
    assert "not a stack" in colab.decide([], have_agentrl=True, stack="cuda13").stop  # a misspelt setting stops


def test_one_install_holds_the_repo_and_every_pin_of_the_drivers_stack():
    d = colab.decide([A100], have_agentrl=False, repo="/r", **NOTHING)
    assert d.stack is CU130 and d.install[:2] == ["-e", "/r"] and d.index_args == ()
    assert d.install[2:] == CU130.requirements()
    assert {"torch==2.13.0", "torchvision==0.28.0", "torchaudio==2.11.0", "vllm==0.30.0",
            "vllm-bnb-plugin==0.0.3"} <= set(d.install)
    cmd = colab.install_command(d.install, "/tmp/x.txt", python="/usr/bin/python3", index_args=d.index_args)
    assert cmd[:4] == ["/usr/bin/python3", "-m", "uv", "pip"] and cmd.count("install") == 1
    assert cmd[cmd.index("--excludes") + 1] == "/tmp/x.txt" and cmd[-len(d.install):] == d.install
    assert gpu_stack.requirements_text(d.install).splitlines()[0] == "-e /r"


def test_colabs_driver_gets_cuda_12_9_builds_of_the_same_versions_from_their_own_indexes():
    d = colab.decide([T4_COLAB], have_agentrl=True, **NOTHING)
    assert d.stack is CU129 and "-e" not in d.install  # agentrl is importable: only the GPU stack
    assert {"torch==2.13.0+cu129", "torchvision==0.28.0+cu129", "torchaudio==2.11.0+cu129", "vllm==0.30.0+cu129",
            "vllm-bnb-plugin==0.0.3", "unsloth==2026.10.9", "trl==1.14.2"} == set(d.install) - {
            "unsloth_zoo==2026.10.9", "transformers==5.17.0"}
    assert d.index_args == ("--torch-backend", "cu129", "--extra-index-url", "https://wheels.vllm.ai/0.30.0/cu129")
    assert any("no native bfloat16" in n and "float16 with a loss scaler" in n for n in d.notes)
    # the public versions are cu130's: one set of versions, two CUDA builds
    assert {k: v.partition("+")[0] for k, v in CU129.pins.items()} == CU130.pins
    no_vllm = colab.decide([T4_COLAB], have_agentrl=True, vllm=False, **NOTHING)
    assert not any(r.startswith("vllm") for r in no_vllm.install) and "unsloth==2026.10.9" in no_vllm.install
    assert no_vllm.index_args == ("--torch-backend", "cu129")  # no vLLM: no vLLM index
    assert colab.decide([T4], have_agentrl=True, **NOTHING).stack is CU130


def test_the_cuda_12_command_is_one_uv_call_that_uv_accepts(venv, tmp_path):
    """The exact command for Colab's driver, run by the uv of this checkout with --dry-run --offline into a real
    venv: every flag parses and uv gets as far as resolving (which needs PyTorch's and vLLM's indexes: offline it
    stops there, exit 1, not a usage error, exit 2)."""
    python, _ = venv
    d = colab.decide([T4_COLAB], have_agentrl=False, repo=str(ROOT), **NOTHING)
    excludes = tmp_path / "excludes.txt"
    excludes.write_text("\n".join(colab.EXCLUDES) + "\n")
    cmd = colab.install_command(d.install, excludes, python=str(python), uv=[shutil.which("uv")],
                                index_args=d.index_args, reinstall=("torch",))
    assert cmd[cmd.index("--torch-backend") + 1] == "cu129" and "--reinstall-package" in cmd
    proc = subprocess.run([*cmd, "--dry-run", "--offline"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "network was disabled" in proc.stderr and "unexpected argument" not in proc.stderr


COLAB_2026 = (GPU("Tesla T4", "580.82.07", (7, 5), 15360), GPU("NVIDIA L4", "580.82.07", (8, 9), 23034),
              GPU("NVIDIA A100-SXM4-40GB", "580.82.07", (8, 0), 40960))


def test_colabs_2026_runtime_gets_one_install_per_card_that_uv_accepts_for_python_3_13(tmp_path):
    """Colab's runtime since 2026-08-25 (googlecolab/colabtools #6081, backend-info): driver 580.82.07 (CUDA 13.0),
    Python 3.13, torch 2.11.0+cu130 preinstalled. For a T4, an L4 and an A100 the plan is the CUDA 13 stack from
    PyPI (torch moves to the stack's version: uv replaces it, no forced reinstall) in one uv call, and the real uv
    accepts that call for a real Python 3.13 interpreter (dry run, offline: it resolves or stops at the network,
    never a usage error). `check-pins` resolves the same pins for 3.13 in CI."""
    uv = shutil.which("uv")
    # uv's own search does not see a pyenv version that is installed but not selected (its shim fails)
    found = [*sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13")), *filter(None, [
        shutil.which("python3.13")])]
    made = subprocess.run([uv, "venv", "--no-python-downloads", "--python", str(found[0]) if found else "3.13",
                           str(tmp_path / "py313")], capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"no Python 3.13 on this machine for uv to use: {made.stderr.strip()[-200:]}")
    python = str(tmp_path / "py313" / "bin" / "python")
    excludes = tmp_path / "excludes.txt"
    excludes.write_text("\n".join(colab.EXCLUDES) + "\n")
    preinstalled = {"torch": "2.11.0+cu130", "torchvision": "0.26.0+cu130", "torchaudio": "2.11.0+cu130"}
    for gpu in COLAB_2026:
        d = colab.decide([gpu], have_agentrl=False, repo=str(ROOT), installed=preinstalled.get,
                         torch_build=lambda: "13.0")
        assert d.stack is CU130 and d.reinstall == (), gpu.name
        assert f"torch=={CU130.pins['torch']}" in d.install and d.install[:2] == ["-e", str(ROOT)]
        assert any("no native bfloat16" in n for n in d.notes) == (gpu.compute_cap < (8, 0)), gpu.name
        cmd = colab.install_command(d.install, excludes, python=python, uv=[uv], index_args=d.index_args,
                                    reinstall=d.reinstall)
        proc = subprocess.run([*cmd, "--dry-run", "--offline"], capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1) and "unexpected argument" not in proc.stderr, proc.stderr[-2000:]
        assert "Python 3.13" in proc.stderr and (proc.returncode == 0 or "network was disabled" in proc.stderr), \
            proc.stderr[-2000:]  # resolved from the cache, or stopped only where a package must be downloaded
    assert "3.13" in gpu_stack.PYTHONS


def test_an_installed_pin_counts_only_as_the_build_the_stack_asks_for():
    pins = ["torch==2.13.0", "vllm==0.30.0"]
    state = gpu_stack.installed_state
    assert state(CU130, pins, {"torch": "2.13.0", "vllm": "0.30.0"}.get, lambda: "13.0") == ([], [])
    assert state(CU130, pins, {"torch": "2.13.0+cu130", "vllm": "0.30.0"}.get, lambda: "13.0") == ([], [])
    # a CUDA 12 torch of the right version (a runtime's own, a cu129 install) on a CUDA 13 stack: reinstalled
    assert state(CU130, pins, {"torch": "2.13.0+cu129", "vllm": "0.30.0"}.get, lambda: "12.9") == (
        ["torch==2.13.0"], ["torch"])
    assert state(CU130, pins, {"torch": "2.13.0", "vllm": "0.30.0"}.get, lambda: "12.9")[1] == ["torch"]
    assert state(CU130, pins, {"torch": "2.13.0+cpu", "vllm": "0.30.0+cu129"}.get, lambda: "cpu")[1] == [
        "torch", "vllm"]
    # the CUDA 12 stack's pins carry their label: PyPI's CUDA 13 build of the same version is the wrong one
    cu129 = ["torch==2.13.0+cu129"]
    assert state(CU129, cu129, {"torch": "2.13.0"}.get, lambda: "13.0") == (cu129, ["torch"])
    assert state(CU129, cu129, {"torch": "2.13.0+cu129"}.get, lambda: "12.9") == ([], [])
    assert state(CU130, pins, {"torch": "2.12.1"}.get, lambda: "13.0") == (pins, [])  # another version: uv changes it
    assert gpu_stack.build_matches("2.13", "2.13.0", (13, 0)) == (True, True)


def test_the_t4_presets_4bit_colocated_grpo_gets_what_unsloth_needs_on_every_stack():
    """colab_qwen3_4b on a T4 trains GRPO with 4-bit weights and fast_inference (and fits: agentrl gpu-plan).
    unsloth_zoo's load_vllm raises for that on vLLM >= 0.28 unless vllm_bnb_plugin is importable (read in its
    source when installed): every stack with such a vLLM installs the plugin; vLLM <= 0.27.1 keeps bitsandbytes in
    tree and must not get it (duplicate op registration)."""
    import importlib.util

    from agentrl.app.presets import load
    from agentrl.train.gpu_plan import plans

    preset = load("colab_qwen3_4b", card="T4")
    model = preset.grpo().model
    assert model.load_in_4bit and model.fast_inference
    assert all(p.fits for p in plans(preset.sft(), preset.grpo(), "T4"))
    for stack in gpu_stack.STACKS.values():
        vllm = tuple(int(x) for x in stack.pins["vllm"].partition("+")[0].split(".")[:2])
        driver = "580.82.07" if stack.cuda[0] == 13 else "550.54.15"
        d = colab.decide([GPU("Tesla T4", driver, (7, 5), 15360)], have_agentrl=True, stack=stack.name, **NOTHING)
        assert ("vllm-bnb-plugin==0.0.3" in d.install) == (vllm >= (0, 28)), stack.name
    zoo = importlib.util.find_spec("unsloth_zoo")
    if zoo is not None:
        source = (Path(zoo.origin).parent / "vllm_utils.py").read_text()
        assert '"vllm_bnb_plugin.bitsandbytes"' in source and "vLLM >= 0.28 moved bitsandbytes out of tree" in source


def test_the_gpu_stack_is_installed_even_when_agentrl_is_importable_and_skipped_once_complete():
    versions = dict(CU130.pins)
    partial = colab.decide([A100], have_agentrl=True, installed=lambda n: None if n == "vllm" else versions[n],
                           torch_build=lambda: "13.0")
    assert partial.install and "-e" not in partial.install and partial.reinstall == ()
    complete = colab.decide([A100], have_agentrl=True, installed=versions.get, torch_build=lambda: "13.0")
    assert complete.install == [] and "installed already" in complete.notes[-1]
    wrong = colab.decide([A100], have_agentrl=True, installed={**versions, "torch": "2.13.0+cu129"}.get,
                         torch_build=lambda: "12.9")
    assert wrong.reinstall == ("torch",) and "torch==2.13.0" in wrong.install
    assert colab.decide([], have_agentrl=True).install == []  # no GPU, agentrl present: nothing
    assert colab.decide([], have_agentrl=False, repo="/r").install == ["-e", "/r"]


def test_the_installed_torchs_cuda_is_read_from_its_version_file_without_importing_it(tmp_path):
    for cuda, expected in (("'12.9'", "12.9"), ("None", "cpu")):
        site = tmp_path / expected
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text("raise SystemExit('imported')\n")
        (site / "torch" / "version.py").write_text(f"__version__ = '2.13.0'\ncuda: Optional[str] = {cuda}\n")
        proc = subprocess.run([sys.executable, "-S", "-c", "from agentrl import colab; print(colab.torch_cuda())"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT / 'lib'}"})
        assert proc.stdout.strip() == expected, proc.stderr


CARD_DRIVERS = [(card, driver) for card in ("T4", "L4", "A100", "H100")
                for driver in ("550.54.15", "570.172.08", "580.82.07")]


@pytest.mark.parametrize(("card", "driver"), CARD_DRIVERS)
def test_plan_prints_a_runnable_install_for_each_card_and_driver_with_the_standard_library_alone(card, driver):
    proc = subprocess.run([sys.executable, "-S", "-m", "agentrl.colab", "plan", "--gpu", card, "--driver", driver],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib"), "AGENTRL_GPU_STACK": "auto"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    cuda = "13.0" if driver.startswith("580") else "12.9"
    assert f"cuda: {cuda}" in lines and f"stack: cu{cuda.replace('.', '')}" in lines
    install = lines[-1].strip()
    assert " pip install --python " in install and f"-e {ROOT}" in install and "vllm-bnb-plugin==0.0.3" in install
    assert lines[-2].strip().startswith("printf ") and "agentrl-excludes.txt" in lines[-2]
    if cuda == "12.9":
        assert "--torch-backend cu129 --extra-index-url https://wheels.vllm.ai/0.30.0/cu129" in install
        assert "torch==2.13.0+cu129" in install and "vllm==0.30.0+cu129" in install
    else:
        assert "--torch-backend" not in install and "torch==2.13.0 " in install
    assert ("no native bfloat16" in proc.stdout) == (card == "T4")


def test_plan_for_a_driver_no_stack_supports_exits_1_with_what_to_do():
    proc = subprocess.run([sys.executable, "-S", "-m", "agentrl.colab", "plan", "--gpu", "T4", "--driver",
                           "470.256.02"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib"), "AGENTRL_GPU_STACK": "auto"})
    assert proc.returncode == 1 and "stop:" in proc.stderr and "AGENTRL_GPU_STACK=none" in proc.stderr
    assert ">= 525.60.13" in proc.stderr and "install" not in proc.stdout
    bad = subprocess.run([sys.executable, "-S", "-m", "agentrl.colab", "plan", "--gpu", "V100", "--driver", "550.1"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    assert bad.returncode == 2 and "unknown card" in bad.stderr


def test_the_docs_tables_of_stacks_and_of_card_by_driver_say_what_the_setup_does():
    text = (ROOT / "docs" / "colab.md").read_text()
    start = text.index("| card | driver 550.54.15")
    lines = text[start:].splitlines()
    drivers = [c.split()[1] for c in lines[0].strip("|").split("|")[1:4]]
    assert drivers == ["550.54.15", "570.172.08", "580.82.07"]
    for line in lines[2:6]:
        card, *cells = (c.strip() for c in line.strip("|").split("|"))
        for driver, cell in zip(drivers, cells[:3], strict=True):
            d = colab.decide([colab.plan_gpu(card, driver)], have_agentrl=False, repo="/r", **NOTHING)
            assert d.stack.name == cell, (card, driver)
        assert ("float16 + loss scaler" in cells[3]) == (card == "T4") and ("bfloat16" in cells[3]) == (card != "T4")
    for name, stack in gpu_stack.STACKS.items():  # every pin of every stack is in its row of the stacks table
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` "))
        assert [f"{p} {v}" for p, v in stack.pins.items() if f"{p} {v}" not in row] == [], name


def test_a_pypi_stacks_resolution_is_checked_for_versions_cuda_runtime_and_stray_cuda_13_packages():
    check = gpu_stack.check_resolution
    cu128 = {k.replace("_", "-"): v for k, v in CU128.pins.items()} | {"nvidia-cuda-runtime-cu12": "12.8.90"}
    assert check(CU128, cu128, colab.EXCLUDES) == []
    assert "CUDA 13 packages" in check(CU128, {**cu128, "nvidia-nccl-cu13": "2.29.7"}, colab.EXCLUDES)[0]
    assert "CUDA runtime (12, 9)" in check(CU128, {**cu128, "nvidia-cuda-runtime-cu12": "12.9.79"}, ())[0]
    cu130 = {k.replace("_", "-"): v for k, v in CU130.pins.items()} | {"nvidia-cuda-runtime": "13.0.96"}
    assert check(CU130, cu130, colab.EXCLUDES) == []
    assert check(CU130, {**cu130, "vllm-bnb-plugin": "0.0.2"}, ())[0].startswith("vllm-bnb-plugin resolved to 0.0.2")
    assert "excluded llm" in check(None, {"bitsandbytes": "0.50.2", "llm": "0.19"}, colab.EXCLUDES)[0]


def _wheel(out: Path, name: str, version: str) -> Path:
    """Write a minimal pure-Python wheel of distribution ``name`` (module ``name``) at ``version``."""
    import base64
    import hashlib
    import zipfile

    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                   "Tag: py3-none-any\n",
             f"{name}-{version}.dist-info/top_level.txt": f"{name}\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()}"
              f",{len(text.encode())}" for path, text in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join([*record, f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name_, text in files.items():
            z.writestr(name_, text)
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A real virtual environment without pip (as uv makes them) holding agentrl_probe 1.0."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "env")], check=True, timeout=120)
    python = root / "env" / "bin" / "python"
    for version in ("1.0", "2.0"):
        _wheel(root, "agentrl_probe", version)
    _wheel(root, "agentrl_other", "1.0")
    subprocess.run([shutil.which("uv"), "pip", "install", "--python", str(python), "--no-index",
                    str(root / "agentrl_probe-1.0-py3-none-any.whl")], check=True, capture_output=True, timeout=120)
    return python, root


def _in_venv(python: Path, code: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "AGENTRL_"))}
    return subprocess.run([str(python), "-c", "import sys; sys.path.insert(0, sys.argv[1]); " + code,
                           str(ROOT / "lib")], capture_output=True, text=True, timeout=300, env={**base, **env})


def test_an_install_that_replaces_an_imported_package_stops_with_the_restart_message(venv):
    """A real uv install into a real venv: agentrl_probe 1.0 is imported, the install brings 2.0 -> the setup stops
    with RestartRequired naming it; installing a package nobody imported goes on."""
    python, root = venv
    uv = shutil.which("uv")
    code = ("import agentrl_probe; from agentrl import colab; "
            "assert colab.imported_versions()['agentrl_probe'] == '1.0'; "
            f"colab.install_and_check([{uv!r}, 'pip', 'install', '--python', sys.executable, '--no-index', "
            f"{str(root / 'agentrl_other-1.0-py3-none-any.whl')!r}]); print('other: no restart'); "
            f"colab.install_and_check([{uv!r}, 'pip', 'install', '--python', sys.executable, '--no-index', "
            f"{str(root / 'agentrl_probe-2.0-py3-none-any.whl')!r}])")
    proc = _in_venv(python, code)
    assert proc.returncode == 1, proc.stderr
    assert "other: no restart" in proc.stdout
    message = next(line for line in proc.stderr.splitlines() if "RESTART the runtime" in line)
    assert "agentrl_probe 1.0 -> 2.0" in message
    assert "agentrl_other" not in message  # installed, but never imported: no reason to restart


def test_an_install_that_leaves_another_build_stops_naming_it(venv):
    """After the install the setup checks the builds it asked for: a resolver that kept another build (here a
    version that is not there at all) stops the setup with what was found and what was asked for."""
    python, _ = venv
    code = ("from agentrl import colab; from agentrl.train.gpu_stack import STACKS; "
            "colab.verify_builds(colab.Decision(['agentrl_probe==9.0+cu129'], stack=STACKS['cu129']))()")
    proc = _in_venv(python, code)
    assert proc.returncode == 1 and "not the builds asked for: agentrl_probe " in proc.stderr
    assert "asked for agentrl_probe==9.0+cu129" in proc.stderr and "python -m agentrl.colab" in proc.stderr


def test_imported_versions_cover_every_imported_distribution_not_only_the_pins():
    import certifi  # noqa: F401  (what a Colab kernel has imported before the setup cell: numpy, certifi, ...)
    import numpy  # noqa: F401

    found = colab.imported_versions()
    from importlib import metadata

    assert found["certifi"] == metadata.version("certifi") and found["numpy"] == metadata.version("numpy")
    assert colab.replaced_since(found) == {}
    assert colab.replaced_since({"numpy": "0.0.1"}) == {"numpy": ("0.0.1", metadata.version("numpy"))}
    assert "numpy 0.0.1 -> " in colab.restart_message(colab.replaced_since({"numpy": "0.0.1"}))


def test_uv_comes_from_path_in_a_venv_without_pip_or_the_setup_says_how_to_get_it(venv, tmp_path):
    python, _ = venv
    uv_dir = tmp_path / "uvbin"
    uv_dir.mkdir()
    (uv_dir / "uv").symlink_to(shutil.which("uv"))
    found = _in_venv(python, "from agentrl import colab; print(colab.uv_command())", PATH=f"{uv_dir}:/usr/bin:/bin")
    assert found.returncode == 0 and str(uv_dir / "uv") in found.stdout, found.stderr
    none = _in_venv(python, "from agentrl import colab; colab.uv_command()", PATH="/nonexistent")
    assert none.returncode == 1 and "neither uv nor pip" in none.stderr and "astral.sh/uv" in none.stderr
    target = _in_venv(python, "from agentrl import colab; print(colab.install_target())")
    assert target.stdout.strip() == "(False, None)"  # a venv installs as is


def test_a_uv_too_old_for_the_cuda_12_command_is_not_used(venv, tmp_path):
    python, _ = venv
    old = tmp_path / "old"
    old.mkdir()
    (old / "uv").write_text("#!/bin/sh\necho 'uv 0.5.31'\n")  # before --torch-backend knew cu129 (uv 0.8.13)
    (old / "uv").chmod(0o755)
    found = _in_venv(python, "from agentrl import colab; print(colab.find_uv())", PATH=f"{old}:/usr/bin:/bin")
    assert found.returncode == 0 and found.stdout.strip() == "None", found.stderr
    (old / "uv").write_text("#!/bin/sh\necho 'uv 0.9.7'\n")  # the last uv without --excludes (0.9.8)
    found = _in_venv(python, "from agentrl import colab; print(colab.find_uv())", PATH=f"{old}:/usr/bin:/bin")
    assert found.returncode == 0 and found.stdout.strip() == "None", found.stderr


def test_the_install_runs_without_the_machines_uv_constraints_and_says_so(tmp_path, monkeypatch, capsys):
    """Colab exports UV_CONSTRAINT / UV_BUILD_CONSTRAINT for every uv call; the setup's one pinned install is run
    without them (a real process prints the environment it got)."""
    from agentrl import colab

    monkeypatch.setenv("UV_CONSTRAINT", str(tmp_path / "c.txt"))
    monkeypatch.setenv("UV_BUILD_CONSTRAINT", str(tmp_path / "b.txt"))
    seen = tmp_path / "env.json"
    colab.install_and_check([sys.executable, "-c", f"import json, os; json.dump(dict(os.environ), open({str(seen)!r}, "
                                                   "'w'))"])
    env = json.loads(seen.read_text())
    assert "UV_CONSTRAINT" not in env and "UV_BUILD_CONSTRAINT" not in env and "PATH" in env
    out = capsys.readouterr().out
    assert "UV_CONSTRAINT=" in out and "is not applied to this install" in out


@pytest.mark.skipif(not Path("/usr/lib/python3").is_dir() or subprocess.run(
    ["/usr/bin/python3", "-c", "import sysconfig, pathlib, sys; sys.exit(not (pathlib.Path(sysconfig.get_path("
     "'stdlib')) / 'EXTERNALLY-MANAGED').is_file())"], capture_output=True).returncode != 0,
    reason="no externally managed system Python here")
def test_an_externally_managed_python_stops_unless_breaking_system_packages_is_asked_for():
    probe = "from agentrl import colab; print(colab.install_target())"
    refused = _in_venv(Path("/usr/bin/python3"), probe)
    assert "externally managed" in refused.stdout and "venv" in refused.stdout
    assert "AGENTRL_BREAK_SYSTEM_PACKAGES=1" in refused.stdout and refused.stdout.startswith("(False, ")
    allowed = _in_venv(Path("/usr/bin/python3"), probe, AGENTRL_BREAK_SYSTEM_PACKAGES="1")
    assert allowed.stdout.strip().endswith("(True, None)") and "--break-system-packages" in allowed.stdout
    cmd = colab.install_command(["x==1"], "/tmp/e", python="/usr/bin/python3", uv=["uv"], break_system=True)
    assert cmd[:4] == ["uv", "pip", "install", "--python"] and "--break-system-packages" in cmd


@pytest.mark.parametrize(("origin", "url"), [
    ("git@github.com:me/agentrl.git", "https://github.com/me/agentrl.git"),
    ("git@github.com:me/agentrl", "https://github.com/me/agentrl.git"),
    ("ssh://git@github.com/me/agentrl.git", "https://github.com/me/agentrl.git"),
    ("ssh://git@gitlab.example.com:2222/group/sub/agentrl", "https://gitlab.example.com/group/sub/agentrl.git"),
    ("git://example.com/me/agentrl.git", "https://example.com/me/agentrl.git"),
    ("https://me:ghp_SECRET@github.com/me/agentrl.git", "https://github.com/me/agentrl.git"),
    ("https://ghp_SECRET@github.com/me/agentrl", "https://github.com/me/agentrl.git"),
    ("https://github.com/me/agentrl.git", "https://github.com/me/agentrl.git"),
])
def test_origins_become_anonymous_https_clone_urls(origin, url):
    got, notes = colab.clone_url(origin)
    assert got == url and "SECRET" not in got
    assert bool(notes) == (origin != url)


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


@pytest.mark.slow
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
    # the cell imports agentrl.colab from the wheel on sys.path before anything is installed (-S: no site-packages,
    # as on a machine without agentrl); the setup's own decision installs the wheel and the pins in one call, although
    # importlib.metadata finds the wheel's dist-info on sys.path
    probe = (f"import sys; sys.path.insert(0, {str(wheel)!r}); from agentrl import colab; "
             "from agentrl.train import gpu_plan; "
             "g = gpu_plan.GPU('Tesla T4', '580.82.07', (7, 5), 15360); "
             f"d, w = colab.setup_decision([g], {str(out)!r}); print(d.install, w)")
    got = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60)
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


def test_the_setup_cell_is_added_by_the_standard_library_alone(tmp_path):
    """scripts/export_to_ipynb.sh runs `python -m agentrl.colab prepare` in a fresh clone before anything is installed:
    with site-packages off (-S) it must still work (it once imported msgspec through agentrl's io module)."""
    nb = tmp_path / "a.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    proc = subprocess.run([sys.executable, "-S", "-m", "agentrl.colab", "prepare", str(nb), "--git-url",
                           "https://github.com/example/agentrl.git"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(nb.read_text())["cells"][0]["metadata"] == {"agentrl": "setup"}


@pytest.mark.slow
def test_an_ssh_or_token_origin_is_exported_as_anonymous_https(tmp_path, fresh_clone):
    copy = tmp_path / "copy"
    shutil.copytree(fresh_clone, copy, ignore=shutil.ignore_patterns("build"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRL_")}
    for origin in ("git@github.com:example/agentrl.git", "https://me:ghp_SECRET@github.com/example/agentrl.git"):
        _git("remote", "set-url", "origin", origin, cwd=copy)
        out = tmp_path / "o"
        proc = subprocess.run(["bash", "scripts/export_to_ipynb.sh", "notebooks/03_sft.py"], cwd=copy,
                              env={**env, "OUT_DIR": str(out)}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        setup = "".join(json.loads((out / "03_sft.ipynb").read_text())["cells"][0]["source"])
        assert "'https://github.com/example/agentrl.git'" in setup
        assert "SECRET" not in (out / "03_sft.ipynb").read_text() and "git@" not in setup
        assert "exported as https" in proc.stderr or "credentials removed" in proc.stderr


def test_a_bundle_notebook_without_its_bundle_or_a_clone_url_says_what_to_copy(tmp_path):
    """A --bundle export from a checkout without origin has no clone URL: opened without agentrl_bundle/ next to
    it (and without agentrl installed: python -S, no PYTHONPATH; with agentrl importable the cell would install this
    checkout into the running Python's environment), the setup cell stops with what to copy, not a git error."""
    code = colab.setup_source("")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AGENTRL_") and k != "PYTHONPATH"},
           "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert "agentrl_bundle" in proc.stderr and "AGENTRL_GIT_URL" in proc.stderr and "scp -r" in proc.stderr
    assert "fatal:" not in proc.stderr and "Traceback" not in proc.stderr


def _vllm_serve_commands(text: str) -> list[str]:
    """Every `vllm serve ...` command in ``text``: continuation lines joined, inline code spans of Markdown that
    wrap across lines joined, each command up to the end of its line, code span, `&&`, `;` or `#` comment."""
    import re

    text = re.sub(r"\\\n\s*#?\s*", " ", text)  # shell continuations (also inside TOML comments)
    text = re.sub(r"(?m)^\s*```.*$", "", text)  # fence lines: code blocks are read line by line
    text = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("\n", " "), text)  # inline code wrapped in a paragraph
    found = []
    for m in re.finditer(r"vllm serve\b([^`\n;#]*?)(?=`|\n|&&|;|#|$)", text):
        found.append("vllm serve" + m.group(1))
    return found


DOCUMENTED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.py")),
              *sorted((ROOT / "scripts").glob("*.sh")), *sorted((ROOT / "configs").glob("*.toml"))]


def test_every_documented_vllm_serve_command_has_tool_calls_a_bounded_context_and_rank_64_lora():
    """vLLM 0.30 rejects tool_choice "auto" (the agent sends `tools`) without --enable-auto-tool-choice and
    --tool-call-parser, derives max_model_len from the model's config (262,144 tokens for Qwen3-4B-Instruct-2507:
    36 GiB of KV cache for one request) and refuses to start when that does not fit, and limits LoRA rank to 16."""
    import shlex

    from agentrl.app.notebook import serve_command

    commands = {(path.relative_to(ROOT), c) for path in DOCUMENTED for c in _vllm_serve_commands(path.read_text())}
    assert {p.parts[0] for p, _ in commands} >= {"docs", "scripts", "configs"}, commands  # README: a quickstart
    # the notebooks print the command of agentrl.app.notebook.serve_command (01: serve the model, 04: the adapter)
    for name in ("01_agent_eval", "04_grpo"):
        assert "nb.serve_command(" in (ROOT / "notebooks" / f"{name}.py").read_text()
    commands |= {(Path("lib/agentrl/notebook.py"), serve_command("Qwen/Qwen3-4B-Instruct-2507")),
                 (Path("lib/agentrl/notebook.py"), serve_command("Qwen/Qwen3-4B-Instruct-2507", "runs/x/adapter"))}
    for path, command in sorted(commands):
        words = shlex.split(command.translate(str.maketrans("{}&()", "     ")))
        assert len(words) > 2 and not words[2].startswith("-"), (path, command)  # a model comes first
        assert "--enable-auto-tool-choice" in words, (path, command)
        assert "--tool-call-parser" in words, (path, command)
        assert words[words.index("--tool-call-parser") + 1] == "hermes", (path, command)
        assert "--max-model-len" in words, (path, command)
        if "--enable-lora" in words:
            assert words[words.index("--max-lora-rank") + 1] == "64", (path, command)


def test_the_devcontainer_installs_the_gpu_stack_the_way_the_notebooks_do():
    """The container's GPU path is the notebooks' setup (the pinned stack for the driver), not an unpinned install;
    it carries what the environments need beyond uv (Java for the text game, Node for the npm MCP servers)."""
    import json
    import re

    text = (ROOT / ".devcontainer" / "devcontainer.json").read_text()
    assert "python -m agentrl.colab setup" in text and not re.search(r"pip install[^\n]*(unsloth|vllm)", text)
    config = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    features = config["features"]
    assert features["ghcr.io/devcontainers/features/java:1"]["version"] == "17"
    assert features["ghcr.io/devcontainers/features/node:1"]["version"] == "20"
    assert config["postCreateCommand"] == "uv sync"
