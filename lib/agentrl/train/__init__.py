"""Training: model loading with Unsloth or transformers + peft, LoRA SFT and multi-turn GRPO."""
