"""The v0.5 MultiStream emulation's search (inference/multistream.py) on
latency curves given as functions: the largest N within the bound, found
in few runs."""

import itertools
import math

import pytest

from inference import multistream


def brute_force(latency, bound, most):
  return max([0] + [n for n in range(1, most + 1) if latency(n) <= bound])


@pytest.mark.parametrize('per_sample,fixed,most', itertools.product(
    [0.5e-3, 3e-3, 11e-3, 60e-3], [0.0, 5e-3, 49e-3], [1, 7, 256, 1024]))
def test_the_search_finds_the_largest_n_within_the_bound(per_sample, fixed,
                                                         most):
  latency = lambda n: fixed + per_sample * n  # noqa: E731
  found = multistream.largest_within(latency, bound_s=0.05, percentile=0.99,
                                     most=most)
  assert found.samples_per_query == brute_force(latency, 0.05, most)
  # Doubling then bisection: about 2 log2(most) runs, not `most`.
  assert len(found.tried) <= 2 * math.ceil(math.log2(most + 1)) + 2
  assert set(found.tried) <= set(range(1, most + 1))


def test_the_report_says_it_is_an_emulation_and_lists_each_run():
  found = multistream.largest_within(lambda n: 0.01 * n, bound_s=0.05,
                                     percentile=0.99, most=64)
  text = str(found)
  assert found.samples_per_query == 5
  assert text.startswith('v0.5 MultiStream, emulated')
  assert '5 samples per query within 50 ms at the 99th percentile' in text
  assert '6 samples a query: 60.00 ms (over)' in text


def test_no_n_within_the_bound_is_zero():
  found = multistream.largest_within(lambda n: 1.0, bound_s=0.05,
                                     percentile=0.99, most=16)
  assert found.samples_per_query == 0 and set(found.tried) == {1, 2, 4}
