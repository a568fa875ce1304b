"""Make an exported marimo notebook ready for Colab / a rented GPU: a setup cell first, a Python 3 kernelspec.

The setup cell installs this repository (and, when a CUDA GPU is present, the GPU stack: Unsloth, vLLM) and
does nothing at all when ``agentrl`` is already importable (a local checkout, a prepared image).

    python -m agentrl.colab build/ipynb/03_sft.ipynb --git-url https://github.com/you/agentrl --ref main
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_GIT_URL = "https://github.com/agentrl/agentrl.git"
GPU_PACKAGES = ("unsloth", "vllm")

SETUP = '''# agentrl setup (added by scripts/export_to_ipynb.sh). On Colab or a bare GPU machine it clones the
# repository, installs it, and installs the GPU stack when a CUDA GPU is present. Where agentrl is importable it
# does nothing.
import importlib.util, os, shutil, subprocess, sys

AGENTRL_GIT_URL = os.environ.get("AGENTRL_GIT_URL", {git_url!r})
AGENTRL_REF = os.environ.get("AGENTRL_REF", {ref!r})
if importlib.util.find_spec("agentrl") is None:
    repo = os.path.join("/content" if os.path.isdir("/content") else os.path.expanduser("~"), "agentrl")
    if not os.path.isdir(repo):
        subprocess.run(["git", "clone", "--depth", "1", "--branch", AGENTRL_REF, AGENTRL_GIT_URL, repo], check=True)
    if shutil.which("nvidia-smi"):  # the GPU path: Unsloth kernels and vLLM generation
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", {gpu}], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", repo], check=True)
    sys.path.insert(0, os.path.join(repo, "lib"))  # importable now, without restarting the kernel
    os.chdir(repo)
os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")  # Unsloth's savers must never apt-get or git clone on their own
'''

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def setup_source(git_url: str = DEFAULT_GIT_URL, ref: str = "main") -> str:
    """Return the source of the setup cell."""
    gpu = ", ".join(repr(p) for p in GPU_PACKAGES)
    return SETUP.format(git_url=git_url, ref=ref, gpu=gpu)


def prepare(path: str | Path, git_url: str = DEFAULT_GIT_URL, ref: str = "main") -> Path:
    """Prepend the setup cell and set a python3 kernelspec in the notebook at ``path`` (in place, idempotent)."""
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in nb.get("cells", []) if c.get("metadata", {}).get("agentrl") != "setup"]
    source = setup_source(git_url, ref)
    cell = {"cell_type": "code", "execution_count": None, "id": "agentrl-setup",
            "metadata": {"agentrl": "setup"}, "outputs": [], "source": source.splitlines(keepends=True)}
    nb["cells"] = [cell, *cells]
    nb.setdefault("metadata", {})["kernelspec"] = KERNELSPEC
    nb["metadata"].setdefault("language_info", {"name": "python"})
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    """Prepare the notebooks given on the command line."""
    ap = argparse.ArgumentParser(description="Add the agentrl setup cell and a kernelspec to exported notebooks.")
    ap.add_argument("notebooks", nargs="+")
    ap.add_argument("--git-url", default=DEFAULT_GIT_URL)
    ap.add_argument("--ref", default="main")
    args = ap.parse_args(argv)
    for nb in args.notebooks:
        prepare(nb, args.git_url, args.ref)


if __name__ == "__main__":
    main()
