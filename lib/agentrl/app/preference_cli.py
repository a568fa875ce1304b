"""The command line of learning from the model's own attempts: ``agentrl sample``, ``agentrl dpo``, ``agentrl rft``
(``agentrl export --pairs / --successes`` is in agentrl.cli's export command). Each is a thin layer over
agentrl.train.sample / dpo / rft."""

from __future__ import annotations

from pathlib import Path

RUNS = Path("runs")


def cmd_sample(args, preset: dict) -> int:
    """`agentrl sample`: k attempts per training item with the starting policy; print the difficulty filter's
    line; return 0."""
    from agentrl.train.sample import run_sample, sample_config, summary_line

    cfg = sample_config(preset, name=args.name, k=args.k, items=args.items, adapter=args.adapter,
                        temperature=args.temperature)
    result = run_sample(cfg, preset, runs=RUNS, env=args.env)
    print(summary_line(result, cfg.k))
    return 0


def cmd_dpo(args, preset: dict) -> int:
    """`agentrl dpo`: DPO on preference pairs, on top of the SFT adapter; print the loss; return 0."""
    from agentrl.train.dpo import dpo_config, print_dpo_summary, run_dpo

    cfg = dpo_config(preset, name=args.name, data=args.data, adapter=args.adapter, max_steps=args.max_steps,
                     learning_rate=args.learning_rate, beta=args.beta)
    print_dpo_summary(run_dpo(cfg, runs=RUNS))
    return 0


def cmd_rft(args, preset: dict) -> int:
    """`agentrl rft`: rejection-sampling fine-tuning (SFT on the successes, from the SFT adapter); return 0."""
    from agentrl.train.rft import rft_config
    from agentrl.train.sft import print_sft_summary, run_sft

    cfg = rft_config(preset, name=args.name, data=args.data, max_steps=args.max_steps, check_questions=0)
    result = run_sft(cfg, preset, runs=RUNS)
    if result.is_main:
        print_sft_summary(result.metrics, result.out)
    return 0


def export_preference(args) -> int:
    """`agentrl export --pairs / --successes SAMPLE_RUN`: write the preference pairs and / or the successes;
    return 0."""
    from agentrl.data.pairs import export_pairs, export_successes

    if args.pairs:
        print(f"wrote {Path(args.data) / 'pairs' / 'train.jsonl'}: {export_pairs(args.data)}")
    if args.successes:
        print(f"wrote {Path(args.data) / 'successes'}: {export_successes(args.data)}")
    return 0


def add_parsers(sub, with_preset) -> None:
    """Add the sample, dpo and rft subcommands to ``sub``; ``with_preset(fn)`` wraps a ``fn(args, preset)``."""
    c = sub.add_parser("sample", help="k attempts per training item with the starting policy (difficulty filter, "
                                      "pairs, successes)")
    c.add_argument("--config", required=True, help="preset name or TOML path ([sample], [grpo] give defaults)")
    c.add_argument("--name", help="run name (runs/sample/NAME)")
    c.add_argument("--env", help="environment (default [grpo].env)")
    c.add_argument("--k", type=int, help="attempts per item")
    c.add_argument("--items", type=int, help="the first N training items")
    c.add_argument("--adapter", help="LoRA adapter of the policy (default [grpo].adapter; 'none' = base model)")
    c.add_argument("--temperature", type=float, help="default [grpo].temperature")
    c.set_defaults(func=with_preset(cmd_sample))

    c = sub.add_parser("dpo", help="DPO on the model's own preference pairs, on top of the SFT adapter (TRL)")
    c.add_argument("--config", required=True, help="preset name or TOML path (its [dpo] table)")
    c.add_argument("--name", help="run name (runs/dpo/NAME)")
    c.add_argument("--data", help="sample run with pairs/ (agentrl export --pairs) or a pairs .jsonl")
    c.add_argument("--adapter", help="the SFT adapter to train further")
    c.add_argument("--max-steps", type=int)
    c.add_argument("--learning-rate", type=float)
    c.add_argument("--beta", type=float)
    c.set_defaults(func=with_preset(cmd_dpo))

    c = sub.add_parser("rft", help="rejection-sampling fine-tuning: SFT on the model's successes ([rft] over [sft])")
    c.add_argument("--config", required=True, help="preset name or TOML path (its [rft] table)")
    c.add_argument("--name", help="run name (runs/sft/NAME)")
    c.add_argument("--data", help="the successes' dataset (runs/sample/NAME/successes)")
    c.add_argument("--max-steps", type=int)
    c.set_defaults(func=with_preset(cmd_rft))
