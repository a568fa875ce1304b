"""The resident set over text-game GRPO steps with freed memory kept (glibc's default) and released after each step.

    uv run python benchmarks/learning.py --envs textgame     # builds the SFT adapter this starts from
    uv run python benchmarks/memory_release.py --steps 4     # ~20 min on 2 cores -> runs/memory_release/

Each arm runs in a fresh process: ``--steps`` GRPO steps of benchmarks/learning.py's text-game run (its ``[grpo]``
layer: 2 games x 4 rollouts a step, no validation) from the SFT adapter, and records the process's resident set at
the end of every step. ``released`` is what ``run_grpo`` does (agentrl.core.memory's callback: ``gc.collect()`` and
``malloc_trim(0)`` after each optimizer step); ``kept`` replaces that callback with one that does nothing. The table:
the resident set per step in each arm and the growth from the first step to the last, released / kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "runs/learning/runs/sft/learning_sft_textgame/adapter"
ARMS = ("kept", "released")


def rss_gb() -> float:
    """Return this process's resident set in GB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 2**20
    raise RuntimeError("no VmRSS in /proc/self/status")


def arm(name: str, steps: int, adapter: str, out: Path) -> list[float]:
    """Run ``steps`` text-game GRPO steps in this process as arm ``name``; return the resident set (GB) after each."""
    sys.path.insert(0, str(ROOT / "lib"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from transformers import TrainerCallback

    import agentrl.train.grpo as grpo
    import learning
    from agentrl.app.presets import load

    if name == "kept":  # what the trainer did before the callback existed
        grpo.release_callback = TrainerCallback
    seen: list[float] = []

    class Resident(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # after run_grpo's own callbacks, the release's too
            seen.append(round(rss_gb(), 3))

    preset = load("cpu_smol")
    sizes = dict(learning.FULL)
    preset = learning.env_preset(preset, dataclasses.asdict(preset.demo_envs()), False, ["textgame"])
    layer = learning.grpo_layer(preset, "textgame", sizes, adapter, False)
    layer.update(name=f"memory_{name}", max_steps=steps, eval_every=0)
    layer["textgame"]["validation"] = 0
    p = preset.with_layer({"grpo": layer}, "benchmarks/memory_release.py")
    grpo.run_grpo(p.grpo(), p.heldout, p.data, runs=out / "runs", overwrite=True, source=p.describe(),
                  callbacks=[Resident()])
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--adapter", default=str(ADAPTER), help="the text game's SFT adapter (benchmarks/learning.py's)")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # one arm in this process (the parent's child)
    args = ap.parse_args()
    out = ROOT / "runs" / "memory_release"
    if args.arm:
        os.chdir(ROOT)
        (out / f"{args.arm}.json").write_text(json.dumps(arm(args.arm, args.steps, args.adapter, out)))
        return 0
    if args.steps < 2:
        ap.error("--steps: at least 2 (the growth is read from the first step to the last)")
    if not Path(args.adapter, "adapter_config.json").is_file():
        print(f"error: --adapter {args.adapter}: no adapter there (run benchmarks/learning.py --envs textgame)",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for name in ARMS:
        subprocess.run([sys.executable, __file__, "--arm", name, "--steps", str(args.steps), "--adapter",
                        args.adapter], check=True)
    seen = {name: json.loads((out / f"{name}.json").read_text()) for name in ARMS}
    print("| step | " + " | ".join(f"resident GB, {n}" for n in ARMS) + " |")
    print("|---|" + "---|" * len(ARMS))
    for i in range(args.steps):
        print(f"| {i + 1} | " + " | ".join(f"{seen[n][i]:.2f}" for n in ARMS) + " |")
    growth = {n: seen[n][-1] - seen[n][0] for n in ARMS}
    print(f"growth, step 1 -> {args.steps}: kept {growth['kept']:+.2f} GB, released {growth['released']:+.2f} GB; "
          f"released at the last step / kept: {seen['released'][-1] / seen['kept'][-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
