"""The Colab / rented-GPU setup: a pinned GPU stack chosen for the machine's NVIDIA driver, installed in one resolver
call, and the exported notebooks' setup cell that runs it.

The stacks (agentrl.train.gpu_stack) pin one set of versions built for CUDA 13.0 (driver >= 580.65.06, PyPI's own
wheels) or 12.9 (driver >= 525.60.13: Colab's 550.54.15, rented 570-series images; torch and vLLM from PyTorch's and
vLLM's indexes), or a PyPI-only CUDA 12.8 set on request. ``python -m agentrl.colab plan --gpu T4 --driver 550.54.15``
prints the decision for any card and driver without installing anything; ``python -m agentrl.colab check-pins``
resolves every stack whose wheels all come from PyPI (CI runs it). The setup cell (:func:`setup_source`, added by
``scripts/export_to_ipynb.sh``):

1. finds the code: agentrl already importable (a checkout, an image), an ``agentrl_bundle/`` next to the
   notebook (``export_to_ipynb.sh --bundle``, copied to a rented GPU with scp), or a ``git clone``;
2. on a machine with an NVIDIA GPU, picks the stack for its driver, or stops with what to do when no build runs
   there (an old driver would make torch silently fall back to the CPU);
3. installs whatever of the stack is missing, or installed as another CUDA build, in ONE ``uv pip install`` call
   (torch, torchvision and torchaudio at the versions vLLM was built against, unsloth, unsloth_zoo, vLLM, trl,
   transformers and this repository), so no later call can downgrade what an earlier one chose; then checks that
   the builds it asked for are the ones installed. Without a GPU it installs only the repository; with
   ``AGENTRL_GPU_STACK=none`` the repository and bitsandbytes. uv comes from the interpreter, a standalone ``uv``
   on PATH, or pip; a Python that is neither a venv nor writable, or is externally managed (PEP 668), stops with
   what to do;
4. stops with the message to restart the runtime when the install replaced a package this process had already
   imported (any package, not only the pinned ones: numpy, certifi, ...), so "Run all" cannot go on with stale
   modules.

Everything the cell and ``plan`` use is stdlib only: the cell imports this module from the clone before anything is
installed.

    python -m agentrl.colab prepare build/ipynb/03_sft.ipynb --git-url https://github.com/you/agentrl --ref main
    python -m agentrl.colab plan --gpu T4 --driver 550.54.15
    python -m agentrl.colab check-pins
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from agentrl.core.io import DataError, write_text_atomic
from agentrl.train.gpu_plan import CARDS, GPU, query_gpus
from agentrl.train.gpu_stack import (
    ALL_STACKS,
    BNB,
    CHOICES,
    EXCLUDES,
    Stack,
    check_pins,
    choose_stack,
    installed_state,
)

UV_FLOOR = (0, 9, 8)  # the oldest uv with every flag the setup passes: --excludes came in 0.9.8 (astral-sh/uv #16528)
UV_PIN = f"uv>={'.'.join(map(str, UV_FLOOR))},<1"
# constraints the machine's environment sets for every uv call (Colab exports both: colabtools #5237); the setup
# installs a stack pinned as a whole, which another set of constraints would refuse or bend
UV_CONSTRAINTS = ("UV_CONSTRAINT", "UV_BUILD_CONSTRAINT")
BUNDLE = "agentrl_bundle"
DEFAULT_REF = "main"
BREAK_SYSTEM = "AGENTRL_BREAK_SYSTEM_PACKAGES"
REPO = Path(__file__).resolve().parents[2]  # the checkout (lib/agentrl/colab.py)


class RestartRequired(SystemExit):
    """The install replaced packages this process had imported: the runtime must restart. A SystemExit, so
    IPython shows the message without a traceback and ``python -m agentrl.colab setup`` exits 1 with it."""


@dataclass
class Decision:
    """What the setup cell does on this machine."""

    install: list[str]  # requirement strings for the one install call (empty: nothing to do)
    stop: str | None = None  # why it must stop instead (driver too old, unknown stack)
    notes: tuple[str, ...] = ()
    stack: Stack | None = None  # the GPU stack chosen (None: no GPU, or AGENTRL_GPU_STACK=none)
    index_args: tuple[str, ...] = ()  # uv flags for builds from other indexes than PyPI
    reinstall: tuple[str, ...] = ()  # installed at the pinned version but as another build: uv must replace them


def install_command(reqs: list[str], excludes_file: str | Path, python: str = sys.executable,
                    uv: list[str] | None = None, break_system: bool = False, index_args=(),
                    reinstall=()) -> list[str]:
    """Return the one ``uv pip install`` call for ``reqs`` into the interpreter ``python`` (``uv``: the command
    that runs uv, default ``python -m uv``), with a stack's ``index_args`` and a ``--reinstall-package`` for each
    name in ``reinstall``."""
    extra = ["--break-system-packages"] if break_system else []
    again = [a for name in reinstall for a in ("--reinstall-package", name)]
    return [*(uv or [python, "-m", "uv"]), "pip", "install", "--python", python, *extra, *index_args, *again,
            "--excludes", str(excludes_file), *reqs]


def install_target() -> tuple[bool, str | None]:
    """Return ``(break_system_packages, stop)`` for installing into this interpreter: a venv or a writable
    Python installs as is; an externally managed one (PEP 668, e.g. Debian's /usr/bin/python3) only with
    AGENTRL_BREAK_SYSTEM_PACKAGES=1; otherwise ``stop`` says what to do."""
    venv = sys.prefix != sys.base_prefix
    managed = not venv and (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").is_file()
    make_venv = (f"create a virtual environment and run from it: {Path(sys.executable).name} -m venv ~/agentrl-venv "
                 "&& . ~/agentrl-venv/bin/activate (scripts/gpu_smoke.sh makes its own with uv)")
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


def _recent_uv(cmd: list[str]) -> bool:
    """True when ``cmd --version`` runs a uv of at least UV_FLOOR (every flag the setup passes)."""
    try:
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    m = re.match(r"uv (\d+)\.(\d+)(?:\.(\d+))?", out.stdout.strip())
    return out.returncode == 0 and m is not None and tuple(int(g or 0) for g in m.groups()) >= UV_FLOOR


def find_uv() -> list[str] | None:
    """Return the command that runs a recent enough uv without installing anything: ``python -m uv`` when this
    interpreter has it, else a standalone ``uv`` on PATH; None when neither does."""
    here = [sys.executable, "-m", "uv"]
    if _recent_uv(here):
        return here
    standalone = shutil.which("uv")
    return [standalone] if standalone and _recent_uv([standalone]) else None


def uv_command(break_system: bool = False) -> list[str]:
    """Return the command that runs uv (:func:`find_uv`), else uv installed into this interpreter with pip
    (``--break-system-packages`` when ``break_system``); raise SystemExit saying how to get uv when there is no
    pip either (a uv-made venv)."""
    found = find_uv()
    if found:
        return found
    if not _works([sys.executable, "-m", "pip", "--version"]):
        raise SystemExit(f"agentrl setup stopped: {sys.executable} has neither uv nor pip, and no uv is on PATH. "
                         "Install uv (curl -LsSf https://astral.sh/uv/install.sh | sh, or pipx install uv; "
                         "https://docs.astral.sh/uv/getting-started/installation/) and run this again.")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "-U", *(["--break-system-packages"] if break_system else []),
           UV_PIN]
    print("agentrl setup: installing uv:", " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    return [sys.executable, "-m", "uv"]


def imported_versions(modules=None) -> dict[str, str]:
    """Return ``{distribution: version}`` of every installed distribution one of whose top-level modules is in
    ``modules`` (default: what this process has imported)."""
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


def install_and_check(cmd: list[str], verify=None) -> None:
    """Run the install command ``cmd``; then ``verify()`` (it raises SystemExit when the install did not leave what
    was asked for); raise RestartRequired when the install replaced a package this process imported."""
    before = imported_versions()
    env = {k: v for k, v in os.environ.items() if k not in UV_CONSTRAINTS}
    for name in UV_CONSTRAINTS:
        if name in os.environ:
            print(f"agentrl setup: {name}={os.environ[name]} is not applied to this install (its pins are one stack)")
    subprocess.run(cmd, check=True, env=env)
    if verify is not None:
        verify()
    changed = replaced_since(before)
    if changed:
        raise RestartRequired(restart_message(changed))


def torch_cuda() -> str | None:
    """Return the CUDA version the installed torch was built for ("13.0"; "cpu" for a CPU build), read from
    ``torch/version.py`` without importing torch; None when torch is not installed or the file does not say."""
    importlib.invalidate_caches()
    try:
        spec = importlib.util.find_spec("torch")
        text = (Path(spec.origin).parent / "version.py").read_text() if spec and spec.origin else ""
    except (ImportError, ValueError, OSError):
        return None
    m = re.search(r"^cuda\b[^=\n]*=\s*(?:['\"]([^'\"]+)['\"]|None)", text, re.M)
    return (m.group(1) or "cpu") if m else None


def _t4_note(gpu) -> list[str]:
    if gpu.compute_cap >= (8, 0):
        return []
    return [f"{gpu.name} (SM {gpu.compute_cap[0]}.{gpu.compute_cap[1]}): no native bfloat16, training runs in float16 "
            "with a loss scaler; vLLM uses its Triton attention backend"]


def decide(gpus: list, *, have_agentrl: bool, repo=None, wheel=None, stack: str = "auto", vllm: bool = True,
           installed=None, torch_build=None) -> Decision:
    """Return what the setup does: with a GPU the stack for its driver (``stack``: AGENTRL_GPU_STACK) unless all of
    it is installed already as the right builds; with ``stack = "none"`` agentrl and bitsandbytes; without a GPU
    only the repository when agentrl is missing. ``installed(name)`` and ``torch_build()`` describe what is installed
    (default: this interpreter)."""
    installed = installed or _version
    torch_build = torch_build or torch_cuda
    if stack not in CHOICES:
        return Decision([], f"AGENTRL_GPU_STACK={stack!r} is not a stack: choose one of {', '.join(CHOICES)}")
    gpu = gpus[0] if gpus else None
    own = ([str(wheel)] if wheel is not None else ["-e", str(repo)] if repo is not None else []) if not have_agentrl \
        else []
    if gpu is None:
        return Decision(own)
    chosen, stop = choose_stack(gpu.driver, stack)
    if stop:
        return Decision([], stop)
    if chosen is None:  # AGENTRL_GPU_STACK=none: the runtime's torch; bitsandbytes for 8-bit optimisers and 4-bit
        pins = [f"{k}=={v}" for k, v in BNB.items()]
        missing, _ = installed_state(None, pins, installed, torch_build)
        note = "AGENTRL_GPU_STACK=none: agentrl and bitsandbytes on the runtime's own torch (transformers + peft)"
        return Decision(own + pins if own or missing else [], None, (note,))
    notes = [f"NVIDIA driver {gpu.driver}: stack {chosen.name} (CUDA {chosen.cuda[0]}.{chosen.cuda[1]} builds)",
             *_t4_note(gpu), *chosen.notes, *(chosen.vllm_notes if vllm else ())]
    pins = chosen.requirements(vllm)
    missing, wrong = installed_state(chosen, pins, installed, torch_build)
    if not own and not missing:
        return Decision([], None, (*notes, "the pinned GPU stack is installed already"), chosen)
    return Decision(own + pins, None, tuple(notes), chosen, tuple(chosen.index_args(vllm)), tuple(wrong))


def verify_builds(d: Decision):
    """Return a check for after the install: it raises SystemExit naming every pin of ``d`` still not installed as
    the build asked for (a resolver that kept another CUDA's torch would otherwise surface as a CUDA error later)."""
    def verify() -> None:
        importlib.invalidate_caches()  # importlib.metadata caches directory listings
        pins = [r for r in d.install if "==" in r]
        missing, _ = installed_state(d.stack, pins, _version, torch_cuda)
        if missing:
            found = ", ".join(f"{r.partition('==')[0]} {_version(r.partition('==')[0]) or 'missing'}" for r in missing)
            built = f" (torch built for CUDA {torch_cuda()})" if any(r.startswith("torch==") for r in missing) else ""
            raise SystemExit(f"agentrl setup stopped: after the install these are not the builds asked for: {found}"
                             f"{built}; asked for {', '.join(missing)}. Run the printed install command by hand to "
                             "see uv's output, or set AGENTRL_GPU_STACK to another stack (python -m agentrl.colab "
                             "plan shows each).")
    return verify


def setup_decision(gpus: list, notebook_dir: str | Path = ".") -> tuple[Decision, Path | None]:
    """Return the setup's decision for ``gpus`` and the bundle's wheel next to the notebook (None without one): the
    wheel the setup cell put on ``sys.path`` (the last by name) is installed unless agentrl is installed for real."""
    bundle = Path(notebook_dir).resolve() / BUNDLE
    wheels = sorted(bundle.glob("agentrl-*.whl")) if bundle.is_dir() else []
    wheel = wheels[-1] if wheels else None
    d = decide(gpus, have_agentrl=_installed("agentrl"), repo=None if wheel is not None else REPO, wheel=wheel,
               stack=os.environ.get("AGENTRL_GPU_STACK", "auto"), vllm=os.environ.get("AGENTRL_VLLM", "1") != "0")
    return d, wheel


def run_setup(notebook_dir: str | Path = ".", git_url: str = "", ref: str = DEFAULT_REF) -> dict:
    """The setup cell's work (after the code is found): decide, install in one call; return
    ``{"installed": [...], "workdir": path}``, or raise RestartRequired when the install replaced an imported
    package, SystemExit when no stack runs on the driver, the install left another build, or this Python cannot be
    installed into."""
    d, wheel = setup_decision(query_gpus(), notebook_dir)
    for note in d.notes:
        print(f"agentrl setup: {note}")
    if d.stop:
        raise SystemExit(f"agentrl setup stopped: {d.stop}")
    if d.install:
        break_system, stop = install_target()
        if stop:
            raise SystemExit(f"agentrl setup stopped: {stop}")
        excludes = excludes_path()
        excludes.write_text("\n".join(EXCLUDES) + "\n")
        cmd = install_command(d.install, excludes, uv=uv_command(break_system), break_system=break_system,
                              index_args=d.index_args, reinstall=d.reinstall)
        print("agentrl setup:", " ".join(cmd))
        install_and_check(cmd, verify_builds(d))
        print("agentrl setup: done, no restart needed")
    return {"installed": d.install, "workdir": str(wheel.parent if wheel is not None else REPO)}


def excludes_path() -> Path:
    """Return where the setup writes the ``--excludes`` file (EXCLUDES, one per line)."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / "agentrl-excludes.txt"


def plan(gpu, *, stack: str = "auto", vllm: bool = True, python: str = sys.executable) -> tuple[list[str], int]:
    """Return ``(lines, exit code)``: what the setup would install for ``gpu`` (a gpu_plan.GPU, or None for a machine
    without one) into a fresh ``python``, without installing anything: the stack, a ``cuda: MAJOR.MINOR`` line, where
    each pin comes from, the notes and the exact install commands; exit 1 with what to do when no stack runs there."""
    d = decide([gpu] if gpu else [], have_agentrl=False, repo=REPO, stack=stack, vllm=vllm,
               installed=lambda name: None, torch_build=lambda: None)
    where = (f"{gpu.name} (compute capability {gpu.compute_cap[0]}.{gpu.compute_cap[1]}), NVIDIA driver {gpu.driver}"
             if gpu else "no NVIDIA GPU")
    lines = [f"plan for {where}; AGENTRL_GPU_STACK={stack}, AGENTRL_VLLM={int(vllm)}"]
    if d.stop:
        return [*lines, f"stop: {d.stop}"], 1
    if d.stack is not None:
        s = d.stack
        lines += [f"stack: {s.name}", f"cuda: {s.cuda[0]}.{s.cuda[1]}", *(f"from {x}" for x in s.sources(vllm))]
        checked = ("every pin resolves with uv pip compile in CI (python -m agentrl.colab check-pins)" if s.pypi_only
                   else "the PyPI pins resolve in CI as part of cu130 (check-pins); the +cu129 builds live on "
                        "PyTorch's and vLLM's indexes, which CI cannot reach: docs/colab.md gives the evidence")
        lines.append(f"checked: {checked}; on a GPU: scripts/gpu_smoke.sh")
    else:
        lines.append("cuda: none (the runtime's own torch)" if gpu else "cuda: none (no GPU: agentrl only)")
    lines += [f"note: {n}" for n in d.notes]
    uv = find_uv()
    commands = [] if uv else [shlex.join([python, "-m", "pip", "install", "-q", UV_PIN])]
    excludes = excludes_path()
    commands += [f"printf '%s\\n' {' '.join(EXCLUDES)} > {shlex.quote(str(excludes))}",
                 shlex.join(install_command(d.install, excludes, python=python, uv=uv or [python, "-m", "uv"],
                                            index_args=d.index_args))]
    lines.append(f"install into {python} (a fresh environment; the setup cell installs only what is missing):")
    lines += [f"  {c}" for c in commands]
    return lines, 0


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _installed(name: str) -> bool:
    """Return True when distribution ``name`` is installed: on disk, not a wheel the setup cell put on ``sys.path``
    (importlib.metadata finds the dist-info inside that zip too, and would skip installing it and its dependencies)."""
    return any(Path(str(d.locate_file(""))).is_dir() for d in metadata.distributions(name=name))

SETUP = '''# agentrl setup (added by scripts/export_to_ipynb.sh): finds or fetches the code (this checkout, an
# agentrl_bundle/ next to the notebook, or a git clone), then on a GPU machine installs the pinned GPU stack built
# for its driver's CUDA (torch, unsloth, vLLM, trl, transformers) and agentrl in one call. Does nothing when all of
# it is installed. `python -m agentrl.colab plan` shows the decision for any card and driver.
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
        raise DataError(f"clone URL {url!r}: not an https, ssh or git URL")
    path = parts.path if parts.path.endswith(".git") else parts.path.rstrip("/") + ".git"
    return urlunsplit(parts._replace(path=path)), notes


def plan_gpu(card: str | None, driver: str | None):
    """Return the GPU ``plan`` describes: the card class ``card`` (a gpu_plan.CARDS key, ``A100`` for A100-40, or
    ``none``) at ``driver``, or this machine's first GPU (its driver replaced by ``driver`` when given); None for
    no GPU. Raise ValueError saying what is missing."""
    if card == "none":
        return None
    found = query_gpus()
    if card is None:
        if not found:
            if driver:
                raise ValueError("--driver without --gpu on a machine without an NVIDIA GPU: name the card with --gpu")
            return None
        g = found[0]
        return GPU(g.name, driver or g.driver, g.compute_cap, g.memory_mib)
    key = {"A100": "A100-40"}.get(card, card)
    if key not in CARDS:
        raise ValueError(f"--gpu {card}: unknown card (choose from {', '.join([*CARDS, 'A100', 'none'])})")
    driver = driver or (found[0].driver if found else None)
    if not driver:
        raise ValueError(f"--gpu {card} needs --driver (no NVIDIA GPU here to read it from), e.g. --driver 550.54.15")
    c = CARDS[key]
    return GPU(key, driver, c.sm, int(c.gib * 1024))


def main(argv: list[str] | None = None) -> int:
    """``prepare NOTEBOOK... --git-url URL [--ref REF]``, ``clone-url URL``, ``plan [--gpu CARD --driver VERSION]``,
    ``check-pins [--stack NAME...]`` or ``setup``; return the exit code."""
    ap = argparse.ArgumentParser(description="The Colab / GPU setup: notebook setup cells, the install plan, the pin "
                                             "check.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="add the setup cell and a kernelspec to exported notebooks")
    p.add_argument("notebooks", nargs="+")
    p.add_argument("--git-url", required=True)
    p.add_argument("--ref", default=DEFAULT_REF)
    u = sub.add_parser("clone-url", help="print the https clone URL for an origin (SSH -> https, no credentials)")
    u.add_argument("url")
    pl = sub.add_parser("plan", help="print what the setup cell would install for a card and driver (installs "
                                     "nothing); exit 1 when no stack runs on that driver")
    pl.add_argument("--gpu", help="T4, L4, A100 (A100-40), A100-80, H100 or none (default: this machine's GPU)")
    pl.add_argument("--driver", help="NVIDIA driver version, e.g. 550.54.15 (default: this machine's)")
    pl.add_argument("--stack", default=os.environ.get("AGENTRL_GPU_STACK", "auto"),
                    help=f"{', '.join(CHOICES)} (default: AGENTRL_GPU_STACK, else auto)")
    pl.add_argument("--no-vllm", action="store_true", default=os.environ.get("AGENTRL_VLLM", "1") == "0",
                    help="without vLLM (as AGENTRL_VLLM=0)")
    pl.add_argument("--python", default=sys.executable, help="the interpreter to install into (default: this one)")
    c = sub.add_parser("check-pins", help="resolve every stack whose wheels come from PyPI with uv pip compile "
                                          "(Python 3.12 and 3.13, linux x86_64)")
    c.add_argument("--stack", action="append", choices=ALL_STACKS, help="only this stack (repeatable)")
    sub.add_parser("setup", help="what the setup cell does, in this interpreter")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        for nb in args.notebooks:
            prepare(nb, args.git_url, args.ref)
        return 0
    if args.cmd == "setup":
        run_setup(".")
        return 0
    if args.cmd == "plan":
        try:
            gpu = plan_gpu(args.gpu, args.driver)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        lines, code = plan(gpu, stack=args.stack, vllm=not args.no_vllm, python=args.python)
        print("\n".join(lines), file=sys.stderr if code else sys.stdout)
        return code
    if args.cmd == "clone-url":
        try:
            url, notes = clone_url(args.url)
        except DataError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        print(url)
        return 0
    for line in check_pins(tuple(args.stack or ALL_STACKS)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
