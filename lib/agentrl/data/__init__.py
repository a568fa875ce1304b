"""Data: corpora from QA sets, trajectory loading and statistics, curation, export, seed imports."""
