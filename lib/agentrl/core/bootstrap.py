"""Bootstrap confidence intervals for per-item outcomes (learning tables, run comparisons).

Items are resampled with replacement; a paired interval resamples the same items for both runs, so it measures
the difference on shared held-out items rather than two independent samples (narrower, and the right test when
both runs answered the same questions).
"""

from __future__ import annotations

from collections.abc import Sequence


def bootstrap_ci(values: Sequence[float], n_boot: int = 10_000, alpha: float = 0.05, seed: int = 0
                 ) -> tuple[float, float, float]:
    """Return ``(mean, low, high)``: the mean of ``values`` and its percentile bootstrap interval at ``1 - alpha``.

    An empty sequence gives NaNs; a single value gives a zero-width interval."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(low), float(high)


def paired_bootstrap_ci(a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, alpha: float = 0.05,
                        seed: int = 0) -> tuple[float, float, float]:
    """Return ``(mean(b - a), low, high)`` for outcomes of the same items under two runs (``a[i]`` and ``b[i]``
    are item ``i``). Raises ValueError when the lengths differ: an unpaired comparison would be silently wrong."""
    if len(a) != len(b):
        raise ValueError(f"paired bootstrap needs the same items in both runs ({len(a)} vs {len(b)})")
    return bootstrap_ci([float(y) - float(x) for x, y in zip(a, b, strict=True)], n_boot, alpha, seed)
