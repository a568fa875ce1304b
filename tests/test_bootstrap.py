import math

import pytest

from agentrl.core.bootstrap import bootstrap_ci, paired_bootstrap_ci


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_items():
    few = bootstrap_ci([0, 1] * 10)
    many = bootstrap_ci([0, 1] * 200)
    assert few[1] < few[0] == 0.5 < few[2]
    assert (many[2] - many[1]) < (few[2] - few[1])


def test_paired_interval_excludes_zero_when_every_item_improves_and_includes_it_when_none_changes():
    base = [0.0] * 30 + [1.0] * 30
    better = [1.0] * 60
    diff, low, high = paired_bootstrap_ci(base, better)
    assert diff == pytest.approx(0.5) and low > 0
    same = paired_bootstrap_ci(base, base)
    assert same == (0.0, 0.0, 0.0)


def test_paired_interval_refuses_runs_over_different_items_and_empty_input_gives_nan():
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap_ci([1, 0], [1])
    assert all(math.isnan(v) for v in bootstrap_ci([]))
