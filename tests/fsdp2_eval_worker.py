"""One rank of a two-process FSDP2 run on CPU (gloo), started by tests/test_distributed_eval.py with torchrun:
the tiny model with a LoRA, sharded as accelerate's FSDP2 plugin shards it (each decoder layer, then the root),
evaluated on three held-out questions with GRPO's agent_eval on both ranks. Each rank generates its share alone (two
questions on rank 0, one on rank 1, one episode at a time), so the ranks make different numbers of forward calls;
on the sharded model that hangs in an all-gather (before issue 21 rank 0 evaluated alone: it never returned).

    torchrun --nproc_per_node 2 tests/fsdp2_eval_worker.py MODEL INDEX QA OUT
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from agentrl.envs.registry import Budget, within
from agentrl.rollout.runner import RunConfig
from agentrl.train.configs import GRPOSettings
from agentrl.train.grpo import build_task, heldout_rows
from agentrl.train.grpo_eval import agent_eval
from agentrl.train.models import load_for_training


def main() -> int:
    model_path, index, qa, out = sys.argv[1:5]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    settings = GRPOSettings.of(name="fsdp", model={"name": model_path, "backend": "transformers",
                                                   "lora": {"r": 4, "alpha": 8}},
                               eval_questions=3,
                               search={"index": index, "qa": qa, "train": 10, "top_k": 2, "passage_chars": 120})
    preset, run = {}, RunConfig(concurrency=1, progress=False)
    loaded = load_for_training(settings.model, seed=1)
    model = loaded.model
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    task = within(build_task(settings, preset), Budget(max_turns=2, max_new_tokens=24))  # [eval.search]'s budget
    held_out = heldout_rows(settings, preset)
    ids = torch.tensor([[1, 2, 3]])
    kinds = sorted({type(p).__name__ for p in model.parameters()})  # every parameter a shard (DTensor)
    sharded = model(input_ids=ids).logits.sum().item()  # a sharded forward: both ranks, one all-gather per layer
    forwards = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda module, args: forwards.append(1))
    metrics = agent_eval(model, loaded.tokenizer, settings, task, preset, Path(out), 1, held_out, run=run)
    hook.remove()
    kinds_after_eval = sorted({type(p).__name__ for p in model.parameters()})  # resharded when the eval ended
    after = model(input_ids=ids).logits.sum().item()  # the sharded forward still works, with the same weights
    report = {"rank": rank, "metrics": metrics, "same_logits": abs(sharded - after) < 1e-3, "kinds": kinds,
              "kinds_after_eval": kinds_after_eval, "forwards": len(forwards)}
    Path(out, f"report_{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
