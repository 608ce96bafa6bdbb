"""Weight-update sharding on 4 logical CPU replicas: the same weights as the
unsharded update after K steps, and 1/N of the optimizer state per replica."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from distribution import weight_update_sharding as wus
from models.common import backbone_checkpoint
from tests import regression_mlp
from tests.regression_mlp import Mlp, OPTIMIZERS

REPLICAS = 4
STEPS = 5


@pytest.fixture(scope='module')
def strategy():
  return strategies.make_strategy(kind='mirrored', num_cpu_devices=REPLICAS)


def train(strategy, make_optimizer, sharded):
  """STEPS steps; returns (weights, optimizer, model)."""
  weights, optimizer, model, _ = regression_mlp.train(
      strategy, make_optimizer, steps=STEPS, sharded=sharded)
  return weights, optimizer, model


@pytest.mark.parametrize('name', sorted(OPTIMIZERS))
def test_sharded_updates_give_the_unsharded_weights(strategy, name):
  plain, _, _ = train(strategy, OPTIMIZERS[name], sharded=False)
  sharded, _, model = train(strategy, OPTIMIZERS[name], sharded=True)
  for key in plain:
    if name in ('sgd', 'adam'):  # Elementwise only: the same arithmetic.
      np.testing.assert_array_equal(sharded[key], plain[key], err_msg=key)
    else:  # Norms add their squares shard by shard: float32 round-off.
      np.testing.assert_allclose(sharded[key], plain[key], rtol=2e-6,
                                 atol=1e-7, err_msg=key)
    # Every replica holds the same full weights.
    copies = strategy.experimental_local_results(model.params[key])
    for copy in copies[1:]:
      np.testing.assert_array_equal(copy.numpy(), copies[0].numpy())


@pytest.mark.parametrize('name,extra', [('lamb', 3), ('sgd', 2)])
def test_sharded_updates_add_two_collectives_whatever_the_variable_count(
    strategy, name, extra):
  # One all-reduce of every norm's partial sums (none for SGD), one
  # all-gather of every new shard (two ops in TensorFlow: the shapes, then
  # the data): per replica, not per variable.
  *_, plain_ops = regression_mlp.train(strategy, OPTIMIZERS[name],
                                       steps=1)
  *_, sharded_ops = regression_mlp.train(strategy, OPTIMIZERS[name],
                                         steps=1, sharded=True)
  assert sharded_ops - plain_ops == extra * REPLICAS, (sharded_ops, plain_ops)


def test_each_replica_keeps_a_quarter_of_the_optimizer_state(strategy):
  _, plain, _ = train(strategy, OPTIMIZERS['lamb'], sharded=False)
  _, sharded, _ = train(strategy, OPTIMIZERS['lamb'], sharded=True)

  def per_device(optimizer):
    sizes = {}
    for slot in optimizer.slots.values():
      for copy in strategy.experimental_local_results(slot):
        sizes[copy.device] = sizes.get(copy.device, 0) + int(
            np.prod(copy.shape))
    return sizes

  full, split = per_device(plain), per_device(sharded)
  assert len(split) == REPLICAS and len(set(split.values())) == 1
  total = sum(v.shape.num_elements() for v in plain.slots.values())
  per_replica = next(iter(split.values()))
  # 1/N of every slot, rounded up: at most one padding element a slot.
  assert total / REPLICAS <= per_replica <= total / REPLICAS + len(
      sharded.slots)
  assert next(iter(full.values())) == total
  # Each replica's shards differ: the state is split, not copied.
  slot = next(iter(sharded.slots.values()))
  copies = [c.numpy() for c in strategy.experimental_local_results(slot)]
  assert not all(np.array_equal(copies[0], c) for c in copies[1:])


def test_checkpoints_move_between_sharded_and_unsharded_runs(strategy,
                                                              tmp_path):
  from training import checkpoints
  _, sharded_opt, sharded_model = train(strategy, OPTIMIZERS['lamb'],
                                        sharded=True)
  variables = list(sharded_model.trainable_variables)
  view = wus.ShardedSlots.for_optimizer(strategy=strategy,
                                        optimizer=sharded_opt,
                                        variables=variables)
  saver = checkpoints.Checkpointer(
      model_dir=str(tmp_path / 'a'), chief=True, before_save=view.gather,
      model=sharded_model, optimizer=view.views)
  saver.save(STEPS)
  # Unsharded run restores the sharded run's state in full layout.
  plain_opt = OPTIMIZERS['lamb']()
  with strategy.scope():
    plain_model = Mlp()
    plain_opt.build(list(plain_model.trainable_variables))
  restorer = checkpoints.Checkpointer(model_dir=str(tmp_path / 'a'),
                                      chief=True, model=plain_model,
                                      optimizer=plain_opt.slots)
  assert restorer.restore_latest().path.endswith(f'ckpt-{STEPS}')
  for name, slot in plain_opt.slots.items():
    shards = [c.numpy() for c in
              strategy.experimental_local_results(sharded_opt.slots[name])]
    size = slot.shape.num_elements()
    np.testing.assert_array_equal(
        slot.numpy().reshape(-1), np.concatenate(shards)[:size], err_msg=name)
  for key, var in plain_model.params.items():
    np.testing.assert_array_equal(var.numpy(),
                                  sharded_model.params[key].numpy())
  # And back: an unsharded checkpoint restores into shards.
  restorer.save(STEPS + 1)
  fresh_opt = OPTIMIZERS['lamb']()
  with strategy.scope():
    fresh_model = Mlp()
    fresh_opt.build(list(fresh_model.trainable_variables),
                    make_slot=wus.make_slot_factory(REPLICAS))
  fresh_view = wus.ShardedSlots.for_optimizer(
      strategy=strategy, optimizer=fresh_opt,
      variables=list(fresh_model.trainable_variables))
  again = checkpoints.Checkpointer(model_dir=str(tmp_path / 'a'), chief=True,
                                   model=fresh_model,
                                   optimizer=fresh_view.views)
  assert again.restore_latest().path.endswith(f'ckpt-{STEPS + 1}')
  for name, slot in fresh_opt.slots.items():
    full = plain_opt.slots[name].numpy().reshape(-1)
    per = wus.shard_size(full.size, REPLICAS)
    padded = np.pad(full, (0, per * REPLICAS - full.size))
    for r, copy in enumerate(strategy.experimental_local_results(slot)):
      np.testing.assert_array_equal(copy.numpy(),
                                    padded[r * per:(r + 1) * per])


@pytest.mark.slow
def test_two_worker_processes_shard_updates_to_the_same_weights(
    quickstart_data, tmp_path):
  from tests import helpers
  results = {}
  for name, extra in (('plain', []),
                      ('sharded', ['WEIGHT_UPDATE_SHARDING = True'])):
    out = tmp_path / name
    out.mkdir()
    helpers.run_worker_processes(
        ['tests.multi_worker_main', quickstart_data, str(tmp_path / f'm_{name}'),
         'gin/resnet_quickstart.gin', *extra], out)
    results[name] = [np.load(out / f'w{i}.npz') for i in range(2)]
  # ResNet-18 quickstart, LARS, one gin switch: sharded updates against
  # plain ones.
  plain, sharded = results['plain'], results['sharded']
  keys = [k for k in plain[0].files if k != 'count']
  assert len(keys) > 30  # ResNet-10: 38 variables.
  # The two differ by rounding (the shards' norms are sums of partial sums)
  # that 6 steps grow by CPU: 2.6e-6 on a batch-norm gamma of 0.016 on an
  # AMD EPYC. Each variable must agree to 1% of how far the plain run moved
  # it over its last 4 steps (the worst here: 7e-5 of it), a bound far
  # below any wrong update.
  early = tf.train.load_checkpoint(
      str(tmp_path / 'm_plain' / 'checkpoints' / 'ckpt-2'))
  for k in keys:
    np.testing.assert_array_equal(sharded[0][k], sharded[1][k], err_msg=k)
    moved = np.abs(plain[0][k] - early.get_tensor(
        backbone_checkpoint.suite_checkpoint_key(k.replace('.', '/'), 'params'))).max()
    assert moved > 0, k
    assert np.abs(sharded[0][k] - plain[0][k]).max() <= 0.01 * moved, k
  # Its checkpoints are in the unsharded layout: the plain run's reader
  # sees the same names and shapes.
  layouts = [tf.train.load_checkpoint(str(tmp_path / f'm_{name}' /
                                          'checkpoints'))
             .get_variable_to_shape_map() for name in ('plain', 'sharded')]
  assert layouts[0] == layouts[1]
