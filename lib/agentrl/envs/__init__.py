"""Environments: one folder per task family (search, sql, textgame, math, code, mixed), each declared once in its
``__init__.py`` and found through :mod:`agentrl.envs.registry`; ``base`` is the tool contract every environment class
follows, ``task`` the episode settings and the Task an environment builds (docs/environments.md)."""
