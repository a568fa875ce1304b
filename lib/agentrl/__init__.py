"""agentrl: turn a small open model into a tool-using agent.

The library behind the five phase notebooks (corpus -> agent eval -> trajectories -> SFT -> GRPO).
Importing it is cheap: heavy dependencies (torch, transformers, trl, faiss, sentence-transformers)
are imported inside the functions that need them.
"""

__version__ = "0.1.0"
