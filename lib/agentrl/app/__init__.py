"""Application helpers: the demo, the notebooks' shared cells, the trajectory viewer."""
