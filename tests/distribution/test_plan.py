"""The parallelism plans' answers to the runtime (distribution/plan.py); the
runs that use them end to end are in tests/test_train.py, test_mesh.py and
test_weight_update_sharding.py."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import gradients as gradients_lib
from distribution import mesh as mesh_lib
from distribution import plan as plan_lib
from distribution import strategy as strategies
from distribution import weight_update_sharding as wus
from training import optimizers


def make(*, task=None, deterministic=False, **options):
  defaults = dict(distribution=strategies.StrategyConfig(
      kind='mirrored', num_cpu_devices=4))
  return plan_lib.PlanOptions(**{**defaults, **options}).make(
      task=task, deterministic=deterministic)


def built(plan):
  with plan.scope():
    weight = tf.Variable(tf.ones([5, 3]), name='w')
    optimizer = optimizers.Adam()
    optimizer.build([weight], make_slot=plan.make_slot())
  plan.built(model=None, optimizer=optimizer)
  return weight, optimizer


def test_data_parallel_answers_for_its_strategy():
  plan = make()
  assert isinstance(plan, plan_lib.DataParallel)
  assert (plan.replicas, plan.train_batch_replicas()) == (4, 4)
  assert (plan.chief, plan.worker_id, plan.collective_save,
          plan.per_host_outputs) == (True, 0, False, True)
  assert plan.worker_sum(2.5) == 2.5  # One worker.
  assert plan.on_devices(len) is len
  assert plan.train_loop_options() == {
      'gradients': gradients_lib.GradientOptions(),
      'weight_update_sharding': False, 'replicas_in_batch': 1,
      'local_variables': ()}
  weight, optimizer = built(plan)
  assert isinstance(weight, tf.distribute.DistributedValues)
  slots, before_save = plan.checkpoint_optimizer(optimizer, [weight])
  assert slots is optimizer.slots and before_save is None


def test_weight_update_sharding_composes_with_data_parallelism():
  plan = make(weight_update_sharding=True)
  weight, optimizer = built(plan)
  # Each replica holds ceil(15 / 4) = 4 elements of each slot.
  shards = [plan.strategy.experimental_local_results(s)
            for s in optimizer.slots.values()]
  assert {tuple(t.shape) for replica in shards for t in replica} == {(4,)}
  views, before_save = plan.checkpoint_optimizer(optimizer, [weight])
  assert set(views) == set(optimizer.slots) and callable(before_save)
  assert plan.train_loop_options()['weight_update_sharding']


def test_spatial_groups_are_the_data_parallel_replicas_of_a_train_batch():
  import types
  task = types.SimpleNamespace(spatial_feature='image')
  plan = make(spatial_partitions=2, task=task)
  assert (plan.replicas, plan.train_batch_replicas()) == (4, 2)
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS \(3\) needs a '
                     r'task with a spatial_feature and a replica count \(4\)'):
    make(spatial_partitions=3, task=task)
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS \(2\) needs a '
                     r'task with a spatial_feature'):
    make(spatial_partitions=2, task=types.SimpleNamespace())


def test_a_mesh_refuses_replica_options_before_it_connects():
  mesh = mesh_lib.MeshConfig(shape=(2, 2))
  for options, message in (
      (dict(spatial_partitions=2), r'SPATIAL_PARTITIONS \(2\) splits'),
      (dict(weight_update_sharding=True), 'weight_update_sharding shards'),
      (dict(deterministic=False), 'MESH_SHAPE needs DETERMINISTIC'),
      (dict(gradients=gradients_lib.GradientOptions(bytes_per_pack=64)),
       'bytes_per_pack tune'),
  ):
    with pytest.raises(ValueError, match=message):
      make(mesh=mesh, distribution=strategies.StrategyConfig(),
           **{'deterministic': True, **options})


def test_a_mesh_answers_for_its_one_program(monkeypatch):
  # Op determinism is process-wide: keep it off for the tests after this.
  monkeypatch.setattr(tf.config.experimental, 'enable_op_determinism',
                      lambda: None)
  plan = make(mesh=mesh_lib.MeshConfig(shape=(2, 2)),
              distribution=strategies.StrategyConfig(), deterministic=True)
  assert isinstance(plan, plan_lib.Mesh)
  assert (plan.replicas, plan.train_batch_replicas()) == (2, 2)
  assert (plan.chief, plan.worker_id, plan.collective_save,
          plan.per_host_outputs) == (True, 0, False, False)
  assert plan.strategy is tf.distribute.get_strategy()
  assert plan.make_slot() is None
  assert plan.train_loop_options() == {
      'gradients': gradients_lib.GradientOptions(),
      'weight_update_sharding': False, 'replicas_in_batch': 2}


def test_the_run_state_moves_between_plans_both_ways(tmp_path, monkeypatch):
  """The step (int64), the weights and the optimizer's slots, saved under
  each plan and restored under the next: data parallel -> weight-update
  sharded -> mesh -> data parallel, each checkpoint in the one layout."""
  monkeypatch.setattr(tf.config.experimental, 'enable_op_determinism',
                      lambda: None)
  rules = (('kernel$', (None, 'model')),)
  plans = {
      'data': lambda: make(),
      'sharded': lambda: make(weight_update_sharding=True),
      'mesh': lambda: make(mesh=mesh_lib.MeshConfig(shape=(2, 2),
                                                    rules=rules),
                           distribution=strategies.StrategyConfig(),
                           deterministic=True),
  }
  rng = np.random.default_rng(0)
  want = {'kernel': rng.standard_normal([3, 4]).astype(np.float32),
          'kernel/adam_m': rng.standard_normal([3, 4]).astype(np.float32),
          'kernel/adam_v': rng.random([3, 4]).astype(np.float32), 'step': 7}

  def run_state(plan):
    with plan.scope():
      kernel = tf.Variable(tf.zeros([3, 4]), name='kernel')
      step = tf.Variable(0, dtype=tf.int64, trainable=False,
                         name='global_step')
      optimizer = optimizers.Adam()
      optimizer.build([kernel], make_slot=plan.make_slot())
    plan.built(model=None, optimizer=optimizer)
    slots, before_save = plan.checkpoint_optimizer(optimizer, [kernel])
    checkpoint = tf.train.Checkpoint(model={'kernel': kernel},
                                     optimizer=slots, step=step)
    return checkpoint, before_save, kernel, step, slots, optimizer

  def full(value):  # A mesh's DVariable or a strategy's value, on the host.
    if isinstance(plan, plan_lib.Mesh):
      return plan.partitioner.to_host(tf.convert_to_tensor(value)).numpy()
    return tf.convert_to_tensor(value).numpy()

  plans_made = {}
  path = None
  for name in ('data', 'sharded', 'mesh', 'data'):
    plan = plans_made[name] = plans[name]()
    checkpoint, before_save, kernel, step, slots, optimizer = run_state(plan)
    if path is None:  # The first run: its own state.
      kernel.assign(want['kernel'])
      step.assign(want['step'])
      for slot in ('adam_m', 'adam_v'):
        slots[f'kernel/{slot}'].assign(want[f'kernel/{slot}'])
    else:
      checkpoint.read(path).assert_consumed()
      assert step.dtype == tf.int64, name
      assert int(full(step)) == want['step'], name
      np.testing.assert_array_equal(full(kernel), want['kernel'],
                                    err_msg=name)
      for slot in ('adam_m', 'adam_v'):
        if before_save:  # Weight-update sharding: replica r holds shard r.
          shards = plan.strategy.experimental_local_results(
              optimizer.slots[f'kernel/{slot}'])
          for r, shard in enumerate(shards):
            np.testing.assert_array_equal(
                shard.numpy(), wus.shard_of(want[f'kernel/{slot}'], r, 4),
                err_msg=f'{name} {slot} shard {r}')
        else:
          np.testing.assert_array_equal(full(slots[f'kernel/{slot}']),
                                        want[f'kernel/{slot}'],
                                        err_msg=f'{name} {slot}')
    if before_save:
      before_save()
    path = checkpoint.write(str(tmp_path / f'{len(plans_made)}_{name}'))
