"""Rollout: the agent loop, the batch runner, phase-01 evaluation, the policies (endpoint, local model, oracle),
the LLM judge and the GRPO rewards."""
