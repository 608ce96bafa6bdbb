"""Collective tuning: gradient packing and two-level (2-D) summation give
the weights of one all-reduce, on 4 logical CPUs here, on 8 logical CPUs and
on 4 worker processes (tests/two_level_main.py)."""

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from distribution import gradients as gradients_lib
from distribution import strategy as strategies
from distribution import two_level_sum
from tests import helpers
from tests import regression_mlp

REPLICAS = 4
STEPS = 5


@pytest.fixture(scope='module')
def strategy():
  return strategies.make_strategy(kind='mirrored', num_cpu_devices=REPLICAS)


def train(strategy, **gradient_options):
  weights, _, model, ops = regression_mlp.train(
      strategy, regression_mlp.OPTIMIZERS['lamb'], steps=STEPS,
      gradients=gradients_lib.GradientOptions(**gradient_options))
  return weights, model, ops


def test_gradient_pack_size_changes_the_collectives_not_the_weights(
    strategy):
  # TensorFlow packs all gradients into one all-reduce by default
  # (bytes_per_pack=0); small packs split it into one a tensor.
  one, _, one_ops = train(strategy)
  split, _, split_ops = train(strategy, bytes_per_pack=16)
  for k in one:  # The ring adds chunks in another order: round-off only.
    np.testing.assert_allclose(split[k], one[k], rtol=1e-6, atol=1e-7,
                               err_msg=k)
  assert split_ops > one_ops, (split_ops, one_ops)


def test_two_level_sum_is_exact_on_a_2x2_grid(strategy):
  summation = two_level_sum.TwoLevelSum(strategy, 2)

  @tf.function
  def sums():
    def replica():
      ctx = tf.distribute.get_replica_context()
      r = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
      # Integers: float32 sums are exact in any order.
      values = [tf.fill([2, 3], r + 1.0), tf.range(5.0) * (10.0 ** r)]
      return summation(values)
    return [strategy.experimental_local_results(t)
            for t in strategy.run(replica)]

  block, powers = sums()
  for copy in block:
    np.testing.assert_array_equal(copy.numpy(), np.full([2, 3], 10.0))
  for copy in powers:  # 1 + 10 + 100 + 1000: every replica counted once.
    np.testing.assert_array_equal(copy.numpy(), np.arange(5.0) * 1111.0)


def test_two_level_gradient_sums_give_the_weights_of_one_all_reduce(
    strategy):
  one, _, one_ops = train(strategy)
  two, model, two_ops = train(strategy, two_level_group_size=2)
  for k in one:  # Rows then columns: another order of the same additions.
    np.testing.assert_allclose(two[k], one[k], rtol=1e-6, atol=1e-7,
                               err_msg=k)
    copies = strategy.experimental_local_results(model.params[k])
    for copy in copies[1:]:
      np.testing.assert_array_equal(copy.numpy(), copies[0].numpy())
  # One packed all-reduce a replica becomes two (a row's, a column's).
  assert two_ops == one_ops + REPLICAS, (two_ops, one_ops)
  packed, _, packed_ops = train(strategy, two_level_group_size=2,
                                bytes_per_pack=16)
  assert packed_ops > two_ops
  for k in one:
    np.testing.assert_allclose(packed[k], two[k], rtol=1e-6, atol=1e-7,
                               err_msg=k)


@pytest.mark.parametrize('group_size', [1, 3, 4])
def test_a_group_size_that_makes_no_grid_is_named_before_compute(
    strategy, group_size):
  with pytest.raises(ValueError, match=(
      rf'groups of {group_size} replicas do not make a grid of the 4 '
      r'replicas.*\(here: \[2\]\).*two_level_group_size')):
    train(strategy, two_level_group_size=group_size)


def _check(results, group_sizes):
  flat_keys = [k for k in results.files if k.startswith('flat/')]
  assert len(flat_keys) == 3
  for g in group_sizes:
    for i in range(2):  # Integer sums: exact, on every replica.
      np.testing.assert_array_equal(results[f'g{g}/sum{i}'],
                                    results[f'g{g}/allreduce{i}'])
    for k in flat_keys:
      name = k.split('/', 1)[1]
      np.testing.assert_allclose(results[f'g{g}/{name}'], results[k],
                                 rtol=1e-6, atol=1e-7, err_msg=f'{g} {name}')
    assert results[f'g{g}_ops'] > results['flat_ops']


@pytest.mark.slow
def test_two_level_sums_on_8_logical_cpus(tmp_path):
  out = str(tmp_path / 'r.npz')
  run = subprocess.run(
      [helpers.PYTHON, '-m', 'tests.two_level_main', out, 'mirrored8', '2',
       '4'], cwd=helpers.ROOT, capture_output=True, text=True, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  _check(np.load(out), (2, 4))


@pytest.mark.slow
def test_two_level_sums_across_4_worker_processes(tmp_path):
  # Rows {0, 1} {2, 3}, columns {0, 2} {1, 3}: every group spans processes.
  helpers.run_worker_processes(['tests.two_level_main', 'multi_worker', '2'],
                               tmp_path, num_workers=4)
  results = [np.load(tmp_path / f'w{i}.npz') for i in range(4)]
  for r in results:
    _check(r, (2,))
  for k in results[0].files:  # Every worker ends with the same weights.
    for r in results[1:]:
      np.testing.assert_array_equal(r[k], results[0][k], err_msg=k)
