"""Weight-update sharding on 4 logical CPU replicas: the same weights as the
unsharded update after K steps, and 1/N of the optimizer state per replica."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from tools.benchmarks import common
from training import losses
from training import optimizers
from training import step as step_lib
from training import weight_update_sharding as wus

REPLICAS = 4
STEPS = 5


@pytest.fixture(scope='module')
def strategy():
  return strategies.make_strategy(kind='mirrored', num_cpu_devices=REPLICAS)


class Mlp(tf.Module):
  """Two layers with sizes that do not divide by 4 (shards get padding)."""

  def __init__(self):
    super().__init__()
    rng = np.random.default_rng(0)
    self.params = {
        'dense_1/kernel': tf.Variable(
            rng.standard_normal((5, 7)).astype(np.float32) * 0.3,
            name='dense_1/kernel'),
        'dense_1/bias': tf.Variable(np.zeros(7, np.float32) + 0.1,
                                    name='dense_1/bias'),
        'dense_2/kernel': tf.Variable(
            rng.standard_normal((7, 3)).astype(np.float32) * 0.3,
            name='dense_2/kernel'),
    }
    self.state = {}

  def __call__(self, x):
    h = tf.nn.relu(x @ self.params['dense_1/kernel'] +
                   self.params['dense_1/bias'])
    return h @ self.params['dense_2/kernel']


class RegressionTask:
  def loss_share(self, model, batch):
    error = tf.reduce_sum(tf.square(model(batch['x']) - batch['y']), -1)
    return losses.share_of_global_mean(error), {}


def is_bias(name):
  return 'bias' in name


OPTIMIZERS = {
    'lars': lambda: optimizers.Lars(exclude=is_bias, momentum=0.9,
                                    weight_decay=1e-4, eeta=0.001),
    'lamb': lambda: optimizers.Lamb(exclude=is_bias, weight_decay=0.01),
    'adam': lambda: optimizers.Adam(),
    'sgd': lambda: optimizers.SgdMomentum(exclude=is_bias),
}


def train(strategy, make_optimizer, sharded):
  """STEPS steps; returns (weights, optimizer, model)."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((64, 5)).astype(np.float32)
  y = rng.standard_normal((64, 3)).astype(np.float32)
  optimizer = make_optimizer()
  with strategy.scope():
    model, step = Mlp(), tf.Variable(0, dtype=tf.int64)
    optimizer.build(list(model.trainable_variables), make_slot=(
        wus.make_slot_factory(REPLICAS) if sharded else None))
  ds = tf.data.Dataset.from_tensor_slices({'x': x, 'y': y}).repeat().batch(16)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=optimizer,
      learning_rate=lambda s: 0.05, task=RegressionTask(), step=step,
      weight_update_sharding=sharded)
  loop(iter(strategy.experimental_distribute_dataset(ds)), tf.constant(STEPS))
  return {k: v.numpy() for k, v in model.params.items()}, optimizer, model


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
                      ('sharded', ['train.train.weight_update_sharding=True'])):
    out = tmp_path / name
    out.mkdir()
    helpers.run_worker_processes(
        ['tests.multi_worker_main', quickstart_data, str(tmp_path / f'm_{name}'),
         'gin/resnet_quickstart.gin', *extra], out)
    results[name] = [np.load(out / f'w{i}.npz') for i in range(2)]
  plain, sharded = results['plain'], results['sharded']
  keys = [k for k in plain[0].files if k != 'count']
  assert len(keys) > 50
  for k in keys:
    np.testing.assert_array_equal(sharded[0][k], sharded[1][k], err_msg=k)
    np.testing.assert_allclose(sharded[0][k], plain[0][k], rtol=1e-5,
                               atol=1e-6, err_msg=k)


def test_gradient_pack_size_changes_the_collectives_not_the_weights(
    strategy):
  # TensorFlow packs all gradients into one all-reduce by default
  # (bytes_per_pack=0); small packs split it into one a tensor.
  rng = np.random.default_rng(1)
  x = rng.standard_normal((64, 5)).astype(np.float32)
  y = rng.standard_normal((64, 3)).astype(np.float32)
  results = {}
  for pack in (0, 16):
    optimizer = OPTIMIZERS['sgd']()
    with strategy.scope():
      model, step = Mlp(), tf.Variable(0, dtype=tf.int64)
      optimizer.build(list(model.trainable_variables))
    ds = tf.data.Dataset.from_tensor_slices({'x': x, 'y': y}).repeat().batch(
        16)
    iterator = iter(strategy.experimental_distribute_dataset(ds))
    loop = step_lib.make_train_loop(
        strategy=strategy, model=model, optimizer=optimizer,
        learning_rate=lambda s: 0.05, task=RegressionTask(), step=step,
        gradients=step_lib.GradientOptions(bytes_per_pack=pack))
    loop(iterator, tf.constant(STEPS))
    results[pack] = ({k: v.numpy() for k, v in model.params.items()},
                     common.collective_ops(loop.get_concrete_function(
                         iterator, tf.constant(1)).graph))
  (one, one_ops), (split, split_ops) = results[0], results[16]
  for k in one:  # The ring adds chunks in another order: round-off only.
    np.testing.assert_allclose(split[k], one[k], rtol=1e-6, atol=1e-7,
                               err_msg=k)
  assert split_ops > one_ops, (split_ops, one_ops)
