"""Policies produce assistant turns: an OpenAI-compatible endpoint, a local transformers model, or an oracle."""

from agentrl.policies.base import Turn, parse_hermes

__all__ = ["Turn", "parse_hermes"]
