"""Environments: one folder per task family (search, sql, textgame, math, code, mixed, mcp), each declared once in its
``__init__.py`` and found through :mod:`agentrl.envs.registry`; ``base`` is the tool contract every environment class
follows, ``task`` the episode settings and the Task an environment builds (docs/environments.md)."""

# the built-in folders, in the order listings show them (and in which the tiny model's tokenizer reads their prompts)
BUILTIN = ("search", "sql", "textgame", "math", "code", "mixed", "mcp")
DEFAULT = BUILTIN[0]
# the environment `agentrl gpu-plan --measure` runs GRPO in: a tool in every rollout, in-process (SQLite), no index
MEASURE = BUILTIN[1]
# the environment `agentrl mcp-tasks` writes a task file for: any MCP server's tools
MCP = BUILTIN[6]
