"""agentrl's GRPO trainer: TRL's ``GRPOTrainer`` with every override of a TRL internal agentrl makes, in one class.

TRL's public hooks carry most of agentrl: reward functions (agentrl.rollout.rewards), callbacks (held-out evaluation,
progress), ``environment_factory`` (the environments). Three things they cannot reach, each overridden here with the
reason, and each method's signature pinned in :data:`OVERRIDES` (tests/test_trainers.py fails when the installed TRL
changes one):

- ``_tool_call_loop``: rollouts that run out of ``max_completion_length`` before answering. In TRL's tool loop the
  budget covers the model's tokens and the tool results; a tool result that would overflow it is dropped and the
  rollout ends on an unanswered call, so its answer reward is 0 for a reason the policy cannot learn from (cpu_smol's
  256 tokens against search episodes of median 374: docs/results.md). Logged as ``tools/cut_by_length`` per step,
  warned once above a quarter. A reward function sees the completions but would be logged and weighted as a reward;
  a callback never sees them.
- ``_generate_and_score_completions``: groups whose rewards are all equal (DAPO's dynamic-sampling remedy, without
  resampling). Their advantages are zero, so they carry no gradient, but where the loss is normalised by the batch's
  token count (``dapo``, ``bnpo``, ``cispo``, ``vespo``) their tokens dilute every other group's update: their
  completion mask is zeroed and the token count reduced by theirs; ``groups/skipped`` and ``groups/total`` are logged.
  Under the per-sequence losses (``grpo``, ``dr_grpo``, ``sapo``, ``luspo``) masking changes nothing, so it is not
  done (one line says so). Only this method holds the advantages and the masks together.
- ``_calculate_rewards``: each task family's weighted total reward and headline success (``<family>/reward``,
  ``<family>/success``: a mixture's per family; one family's otherwise). The rewards of one function reach a reward
  function, never the weighted total.
- ``_generate``: the rollouts with the LoRA adapter merged into a copy of the weights (``merge_for_generation``,
  agentrl.train.lora_merge): the whole tool loop, and nothing after it (the loss's forward passes run unmerged).
  Said in one line at the first step, with the reason where it cannot be done.
- ``_generate_single_turn``: a first turn reads the prefix all its rows share (system prompt, tool schema) once, a
  turn after a tool result continues each row's cache from the turn before and reads only the tool result
  (``share_prompt_prefill``, agentrl.train.shared_prefill, agentrl.train.turn_cache), decoding without copied keys
  (``fast_decode``, agentrl.rollout.decode), on TRL's transformers generation path; vLLM, multimodal batches and the
  Unsloth backend are TRL's (Unsloth's) own.
- ``_get_per_token_logps_and_entropies``: the loss's (and any log-prob) forward pass reads the prompt tokens its rows
  share once, the completions on top of the copied cache (``share_prompt_prefill``); a batch with images, an MoE
  auxiliary loss, Liger's chunked path or nothing shared is TRL's own.
- ``_compute_loss``: the micro-batch without rows that have no loss token and columns of padding only
  (``compact_loss_batch``, agentrl.train.loss_batch), under the losses where that changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os

from agentrl.envs import registry
from agentrl.envs.base import schema_of
from agentrl.rollout.decode import decoding_attention, growing_cache
from agentrl.rollout.rewards import episode_metrics
from agentrl.train.lora_merge import merge_cost, mergeable, merged_for_generation
from agentrl.train.loss_batch import EXACT_LOSSES, compact
from agentrl.train.shared_prefill import (
    completions_until_eos,
    generate_from_common_prefix,
    keeps_cache,
    shared_prompt_logits,
)
from agentrl.train.turn_cache import continue_turn, new_state

log = logging.getLogger(__name__)

WARN_SHARE = 0.25  # above this share of cut rollouts a step's reward mostly measures the budget
MASKED_LOSSES = ("dapo", "bnpo", "cispo", "vespo")  # losses normalised by the batch's token count (TRL 1.14)
# the overridden methods' signatures in the pinned TRL (1.14.2)
OVERRIDES = {
    "_tool_call_loop": "(self, prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields)",
    "_generate_and_score_completions": "(self, inputs: list[dict[str, torch.Tensor | typing.Any]]) -> "
                                       "dict[str, torch.Tensor | typing.Any]",
    "_calculate_rewards": "(self, inputs, prompts, completions, completion_ids_list)",
    "_generate": "(self, prompts: list)",
    "_generate_single_turn": "(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False)",
    "_get_per_token_logps_and_entropies": "(self, model, *args, batch_size=None, compute_aux_loss=False, **kwargs)",
    "_compute_loss": "(self, model, inputs)",
}


def cut_by_length(completion: list[dict], max_iterations: int | None) -> bool:
    """Return True when a rollout (its completion messages) ended on a tool call that was never answered while tool
    iterations were left: TRL's overlong case. Ending on a call after ``max_iterations`` tool rounds is the
    iteration limit instead, not counted."""
    if not completion or completion[-1].get("role") != "assistant" or not completion[-1].get("tool_calls"):
        return False
    rounds = sum(1 for m in completion if m.get("role") == "assistant" and m.get("tool_calls"))
    return max_iterations is None or rounds <= max_iterations


def budget_note(completions: list[list[dict]], max_iterations: int | None, budget: int) -> tuple[float, str | None]:
    """Return the share of ``completions`` cut by the completion budget (:func:`cut_by_length`) and, above
    ``WARN_SHARE``, the warning that says so (None below it)."""
    cut = sum(cut_by_length(c, max_iterations) for c in completions)
    share = cut / max(len(completions), 1)
    if share <= WARN_SHARE:
        return share, None
    return share, (f"GRPO: {cut} of {len(completions)} rollouts ran out of max_completion_length = {budget} before "
                   "answering (tool results count towards it; the answer reward is 0 for them): raise "
                   "[grpo].max_completion_length")


def equal_groups(advantages, num_generations: int):
    """Return a bool tensor, one per group of ``num_generations`` consecutive completions: True where every
    advantage is zero (all rewards equal; unscorable completions have advantage 0 too)."""
    import torch

    grouped = advantages.view(-1, num_generations)
    return torch.isclose(grouped, torch.zeros_like(grouped)).all(dim=1)


def family_summary(families: list, rewards: list[float], successes: list) -> dict[str, float]:
    """Return ``{"<family>/reward": mean total reward, "<family>/success": mean headline success}`` over the
    rollouts of each family in a batch (rollouts without a reward, NaN, or without a success, None, left out)."""
    out: dict[str, float] = {}
    for family in sorted({f for f in families if f}):
        got = [r for f, r in zip(families, rewards, strict=True) if f == family and not math.isnan(r)]
        won = [float(s) for f, s in zip(families, successes, strict=True) if f == family and s is not None]
        if got:
            out[f"{family}/reward"] = sum(got) / len(got)
        if won:
            out[f"{family}/success"] = sum(won) / len(won)
    return out


class AgentGRPOTrainer:
    """The overrides (module docstring); combined with the GRPOTrainer TRL exports when training starts
    (:func:`grpo_trainer_class`). Reads the run's settings from ``self.args.agentrl``."""

    _budget_warned = False
    _merge: bool | None = None  # decided at the first rollout (merge_plan)
    _share: bool | None = None  # decided at the first use (share_plan)
    _keeps_cache: bool | None = None  # decided at the first loss forward (shared_prefill.keeps_cache)
    _compact: bool | None = None  # decided at the first loss (compact_plan)
    _turns = None  # the last turn's cache within one step's rollouts (turn_cache.TurnState)

    def _sharing(self) -> bool:
        """Return whether this run reads shared prompt tokens once (``share_prompt_prefill``, :func:`share_plan`)."""
        if self._share is None:
            unsloth = any(c.__name__.startswith("Unsloth") for c in type(self).__mro__)
            self._share, line = share_plan(getattr(self.args, "agentrl", None), unsloth, self.args.use_cpu)
            if line:
                print(line)
        return self._share

    def _generate(self, prompts):
        if self._merge is None:
            model = self.accelerator.unwrap_model(self.model)
            self._merge, line = merge_plan(getattr(self.args, "agentrl", None), model, self.use_vllm,
                                           self.args.use_cpu)
            if line:
                print(line)
        self._turns = None  # a turn continues only the rollouts of this step
        try:
            if not self._merge:
                return super()._generate(prompts)
            with merged_for_generation(self.accelerator.unwrap_model(self.model)):
                return super()._generate(prompts)
        finally:
            self._turns = None  # the caches are freed with the step's rollouts

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if (self.use_vllm or self.use_transformers_continuous_batching or images or multimodal_fields or self._is_vlm
                or not self._sharing()):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        import torch
        from trl.models import unwrap_model_for_generation

        device = self.accelerator.device
        pad = self._tokenizer.pad_token_id
        fast = asked(getattr(self.args, "agentrl", None), "fast_decode", self.args.use_cpu)
        previous, self._turns = self._turns, None
        with (unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                          gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                          generation_kwargs=self.generation_kwargs) as model,
              torch.no_grad(), self._dist.summon_full_params(self.model_wrapped, recurse=False),
              decoding_attention(model) if fast else contextlib.nullcontext()):
            turn = None
            if previous is not None:
                turn = continue_turn(model, previous, prompt_ids, self.generation_config, pad, device)
            if turn is None:
                turn = generate_from_common_prefix(model, prompt_ids, self.generation_config, pad, device,
                                                   cache=growing_cache(model) if fast else None)
        if turn is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        sequences, width, mask, cache = turn
        completions = completions_until_eos(sequences[:, width:], self.eos_token_ids)
        self._turns = new_state(cache, sequences, mask, prompt_ids, completions)
        return completions, None

    def _get_per_token_logps_and_entropies(self, model, *args, batch_size=None, compute_aux_loss=False, **kwargs):
        logps = self._shared_logps(model, *args, batch_size=batch_size, compute_aux_loss=compute_aux_loss, **kwargs)
        if logps is not None:
            return logps
        return super()._get_per_token_logps_and_entropies(model, *args, batch_size=batch_size,
                                                          compute_aux_loss=compute_aux_loss, **kwargs)

    def _shared_logps(self, model, input_ids=None, attention_mask=None, logits_to_keep=None, batch_size=None,
                      compute_entropy=False, compute_aux_loss=False, **extra):
        """TRL's ``_full_logits_logps`` with the shared prompt tokens read once; None where TRL's own must run."""
        if (compute_aux_loss or self.use_liger_kernel or input_ids is None or any(v is not None for v in extra.values())
                or (batch_size is not None and batch_size < input_ids.size(0)) or not self._sharing()):
            return None
        from trl.trainer.utils import selective_log_softmax, selective_log_softmax_and_entropy

        if model.training:
            if self._keeps_cache is None:  # decided once: walking the modules costs every forward otherwise
                self._keeps_cache = keeps_cache(model)
            if not self._keeps_cache:
                return None
        shared = shared_prompt_logits(model, input_ids, attention_mask, logits_to_keep)
        if shared is None:
            return None
        logits, saved = shared
        if model.training:  # the share of the prompt columns TRL's pass computes that were not computed
            self._metrics["train"]["prompts/reused"].append(saved)
        completion_ids = input_ids[:, -logits_to_keep:]
        row_mask = attention_mask[:, -logits_to_keep:]
        if not compute_entropy:
            return selective_log_softmax(logits, completion_ids, temperature=self.temperature,
                                         row_mask=row_mask), None, None
        logps, entropies = selective_log_softmax_and_entropy(logits, completion_ids,
                                                             entropy_requires_grad=self._entropy_bonus_enabled,
                                                             temperature=self.temperature, row_mask=row_mask)
        return logps, entropies, None

    def _compute_loss(self, model, inputs):
        if self._compact is None:
            unsloth = any(c.__name__.startswith("Unsloth") for c in type(self).__mro__)
            self._compact, line = compact_plan(getattr(self.args, "agentrl", None), self.loss_type, unsloth,
                                               self.args.use_cpu)
            if line:
                print(line)
        if self._compact:
            cut = compact(inputs)
            if cut is not None:
                inputs, sizes = cut
                mode = "train" if self.model.training else "eval"
                before, after = sizes["tokens"]
                self._metrics[mode]["loss/columns_computed"].append(after / before)
        return super()._compute_loss(model, inputs)

    def _tool_call_loop(self, *args, **kwargs):
        out = super()._tool_call_loop(*args, **kwargs)
        share, warning = budget_note(out[1], self.max_tool_calling_iterations, self.max_completion_length)
        self._metrics["train" if self.model.training else "eval"]["tools/cut_by_length"].append(share)
        if warning and not self._budget_warned:
            self._budget_warned = True  # once per run: a notebook session may train several
            log.warning(warning)
        return out

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        settings = getattr(self.args, "agentrl", None)
        if settings is None or not settings.skip_equal_groups or self.loss_type not in MASKED_LOSSES:
            return output
        adv = output["advantages"]
        n = self.num_generations if self.model.training else self.num_generations_eval or self.num_generations
        if adv.dim() != 1 or adv.numel() % n:
            return output  # groups split across processes: nothing is skipped (logged as 0 below)
        skip = equal_groups(adv, n)
        rows = skip.repeat_interleave(n)
        mask = output["completion_mask"]
        loss_mask = mask if "tool_mask" not in output else mask * output["tool_mask"]
        removed = loss_mask[rows].sum()
        output["completion_mask"] = mask * (~rows).unsqueeze(1).to(mask.dtype)
        output["num_items_in_batch"] = output["num_items_in_batch"] - self.accelerator.gather(removed).sum()
        # straight into this batch's metrics (TRL flushes _log_metric's values inside the call above)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["groups/skipped"].append(float(self.accelerator.gather(skip.sum()).sum()))
        self._metrics[mode]["groups/total"].append(float(self.accelerator.gather(_count(skip)).sum()))
        return output

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        import torch

        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        start = self.accelerator.process_index * len(prompts)  # gathered over processes: take ours
        local = per_func[start:start + len(prompts)]
        total = (local * self.reward_weights.to(local.device).unsqueeze(0)).nansum(dim=1)
        total[torch.isnan(local).all(dim=1)] = torch.nan  # no reward scored it: TRL leaves it out too
        envs = self.environments or [None] * len(inputs)
        success = []
        for c, e, x in zip(completions, envs, inputs, strict=True):
            family, metrics = episode_metrics(c, e, x.get("golden_answers"), x.get("env"))
            success.append(None if metrics is None else metrics.get(registry.get(family).success))
        for key, value in family_summary([x.get("env") for x in inputs], total.tolist(), success).items():
            self._log_metric(key, value)
        return per_func


def asked(settings, knob: str, on_cpu: bool) -> bool:
    """Return whether the speed-up ``knob`` of ``settings`` ("auto" = on a CPU, where it was measured; "on"; "off";
    no settings: off) is asked for on this machine."""
    wanted = getattr(settings, knob, "off")
    return wanted == "on" or (wanted == "auto" and on_cpu)


def merge_plan(settings, model, use_vllm: bool, on_cpu: bool) -> tuple[bool, str | None]:
    """Return ``(merge, line)``: whether rollouts run with the adapter merged (``settings.merge_for_generation``:
    "auto" = on a CPU, where it is measured faster; never with vLLM, which holds its own weights) and the line that
    says so, or why a requested merge cannot be done (None when there is nothing to say)."""
    if use_vllm or not asked(settings, "merge_for_generation", on_cpu):
        return False, None
    why = mergeable(model)
    if why:
        return False, f"merge_for_generation: rollouts run with the adapter unmerged ({why})"
    return True, (f"merge_for_generation: rollouts run with the LoRA adapter merged into a copy of the weights "
                  f"({merge_cost(model) / 2**20:.0f} MB while generating; merge_for_generation = \"off\" turns it off)")


def share_plan(settings, unsloth: bool, on_cpu: bool) -> tuple[bool, str | None]:
    """Return ``(share, line)``: whether the run reads shared prompt tokens once (``settings.share_prompt_prefill``:
    "auto" = on a CPU; never on the Unsloth backend, whose trainer computes log-probs its own way) and the line that
    says a requested one is not done (None when there is nothing to say)."""
    if not asked(settings, "share_prompt_prefill", on_cpu):
        return False, None
    if unsloth:
        return False, ("share_prompt_prefill: not applied on the Unsloth backend (its trainer computes log-probs "
                       "and generates its own way)") if settings.share_prompt_prefill == "on" else None
    return True, None


def compact_plan(settings, loss_type: str, unsloth: bool, on_cpu: bool) -> tuple[bool, str | None]:
    """Return ``(compact, line)``: whether the loss's micro-batches drop rows without loss tokens and padding-only
    columns (``settings.compact_loss_batch``: "auto" = on a CPU; only under the losses where that changes nothing,
    agentrl.train.loss_batch; never on the Unsloth backend, whose trainer computes the loss its own way) and the line
    that says a requested one is not done (None when there is nothing to say)."""
    if not asked(settings, "compact_loss_batch", on_cpu):
        return False, None
    explicit = settings.compact_loss_batch == "on"
    if unsloth:
        return False, ("compact_loss_batch: not applied on the Unsloth backend (its trainer computes the loss its "
                       "own way)") if explicit else None
    if loss_type not in EXACT_LOSSES:
        return False, (f"compact_loss_batch: not applied with loss_type {loss_type!r} (its normaliser counts rows; "
                       f"it is exact under {', '.join(EXACT_LOSSES)})") if explicit else None
    return True, None


def _count(t):
    """Return ``t.numel()`` as a one-element tensor on ``t``'s device (for a gather across processes)."""
    import torch

    return torch.tensor(t.numel(), device=t.device)


@functools.cache
def grpo_trainer_class(base: type) -> type:
    """Return AgentGRPOTrainer over ``base``, the GRPOTrainer TRL exports when training starts (Unsloth's patched one
    once unsloth is imported: it replaces TRL's class)."""
    return type("AgentGRPOTrainer", (AgentGRPOTrainer, base), {"__module__": __name__,
                                                               "__doc__": AgentGRPOTrainer.__doc__})


def close_environments(trainer) -> int:
    """Close every environment the trainer made through ``environment_factory`` (its ``_close``, where it has one:
    an MCP server's process, a database) and return how many were closed; TRL keeps them for reuse and never
    closes them."""
    made = list(getattr(trainer, "environments", None) or [])
    for pool in (getattr(trainer, "_environment_pool", None) or {}).values():
        made += list(pool)
    closed, seen = 0, set()
    for env in made:
        close = getattr(env, "_close", None)
        if close is None or id(env) in seen:
            continue
        seen.add(id(env))
        try:
            close()
        except Exception as exc:  # one failed close must not leave the others open
            log.warning("closing environment %s failed: %s", type(env).__name__, exc)
        closed += 1
    return closed


def make_grpo_trainer(args, **kwargs):
    """Return agentrl's GRPO trainer for TRL config ``args`` (agentrl.train.configs.trl_args) and TRL's other
    GRPOTrainer arguments; says in one line when skipping equal groups cannot change this loss."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOTrainer

    if args.agentrl.skip_equal_groups and args.loss_type not in MASKED_LOSSES:
        print(f"skip_equal_groups: not applied with loss_type {args.loss_type!r} (a per-sequence loss: equal-reward "
              "groups carry no gradient and masking them changes nothing)")
    trainer = grpo_trainer_class(GRPOTrainer)(args=args, **kwargs)
    # TRL renders an environment's tools with get_json_schema, from type hints that cannot say an MCP server's nested
    # objects or array items: a method carrying its definition (__tool_schema__) is rendered from it, the definition
    # evaluation and the SFT export use (TRL calls the tools through the environments, never through this list)
    if getattr(trainer, "_env_tools", None):
        trainer._env_tools = {name: [schema_of(t) if hasattr(t, "__tool_schema__") else t for t in tools]
                              for name, tools in trainer._env_tools.items()}
    return trainer
