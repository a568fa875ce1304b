"""Environments: one small class per task family (search over a corpus, SQL over SQLite)."""
