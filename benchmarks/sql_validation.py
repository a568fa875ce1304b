"""Where the SFT adapter stands on a validation slice of the widened SQL generator: off the ceiling or not.

Issue 44, item 2: hyperparameters of SQL GRPO are chosen on a held-out slice of the synthetic generator, never on DB
Bench dev, and a slice the SFT adapter nearly solves (greedy em 0.875-0.94 on the narrow generator's tables) cannot
choose. This script builds the SFT adapter as the learning benchmark does (oracle demonstrations of the seed-0
tables, curated, one epoch of cpu_smol's ``[sft]``) and evaluates it greedily with the SQL environment's own
evaluation budget on the validation slice the learning benchmark's GRPO uses (the last ``--val`` tasks of the seed-1
tables, never trained on), printing em and exec with 95% bootstrap intervals. The target band is 0.2-0.7.

    uv run agentrl models prepare smollm2
    uv run python benchmarks/sql_validation.py              # -> runs/bench/sql_validation/ (about 35 min on 2 cores)
    uv run python benchmarks/sql_validation.py --val 28 --adapter runs/bench/sql_validation/runs/sft/.../adapter
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import learning  # the learning benchmark's phases; scripts run from benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu_smol")
    ap.add_argument("--val", type=int, default=28, help="validation tasks: the last ones of the seed-1 tables")
    ap.add_argument("--adapter", help="an SFT adapter to evaluate instead of building one")
    ap.add_argument("--dbbench", action="store_true", help="also evaluate it on DB Bench dev (the held-out file, "
                                                            "AgentBench's rules): what the slice should predict")
    args = ap.parse_args()
    os.chdir(ROOT)
    from agentrl.app.presets import load
    from agentrl.core.bootstrap import bootstrap_ci
    from agentrl.envs import registry
    from agentrl.envs.sql import SQLSettings

    preset = load(args.config)
    out = ROOT / "runs" / "bench" / "sql_validation"
    runs = out / "runs"
    adapter = args.adapter
    if adapter is None:
        learning.oracle(preset, runs, "sqlval_oracle", env="sql", split="train", qa=None, offset=0, limit=None)
        data, report = learning.curate_export(preset, runs, ["sqlval_oracle"], name="sqlval_sft")
        steps = math.ceil(report["written"]["train"] / preset.sft().per_device_train_batch_size)
        sft = learning.run_sft_phase(preset, runs, False, str(data), name="sqlval_sft", max_steps=steps)
        adapter = sft["adapter"]
        print(f"SFT: {steps} steps (one epoch of {report['written']['train']} demonstrations), "
              f"{sft['seconds']:.0f} s, loss {sft['loss'][0]['loss']:.3f} -> {sft['loss'][-1]['loss']:.3f}")
    rows = registry.split_rows(registry.get("sql"), "validation", SQLSettings(synthetic_seed=1, validation=args.val))
    row = learning.evaluate(preset, "sql", rows, adapter, "sqlval_sft", out)
    per_item = learning.outcomes(out, "sqlval_sft", "em")
    exec_items = learning.outcomes(out, "sqlval_sft", "exec")
    em, ex = list(per_item.values()), list(exec_items.values())
    kinds = {}
    for r in rows:
        kinds.setdefault(r["metadata"]["type"] if r["metadata"]["kind"] == "modify" else "SELECT", []).append(
            per_item[str(r["id"])])
    _, lo, hi = bootstrap_ci(sorted(em))  # sorted: the same interval whatever order the episodes finished in
    print(f"SFT adapter on the validation slice ({len(rows)} tasks of the seed-1 tables): em {row['em']:.3f} "
          f"[{lo:.3f}, {hi:.3f}], exec {sum(ex) / len(ex):.3f}; by kind: "
          + ", ".join(f"{k} {sum(v) / len(v):.2f} ({len(v)})" for k, v in sorted(kinds.items()))
          + f"; {'inside' if 0.2 <= row['em'] <= 0.7 else 'outside'} the 0.2-0.7 band; {row['seconds']:.0f} s")
    held = None
    if args.dbbench:
        held = learning.evaluate(preset, "sql", learning.heldout_rows(preset, "sql", None), adapter, "sqlval_dbbench",
                                 out)
        values = list(learning.outcomes(out, "sqlval_dbbench", "em").values())
        _, hlo, hhi = bootstrap_ci(sorted(values))
        print(f"the same adapter on DB Bench dev ({held['n']} tasks, AgentBench's rules): em {held['em']:.3f} "
              f"[{hlo:.3f}, {hhi:.3f}]; {held['seconds']:.0f} s")
    (out / "result.json").write_text(json.dumps({"adapter": adapter, "val": len(rows), "row": row,
                                                 "em_interval": [lo, hi], "by_kind": kinds, "dbbench": held},
                                                indent=1))
    print(f"wrote {out / 'result.json'}")


if __name__ == "__main__":
    main()
