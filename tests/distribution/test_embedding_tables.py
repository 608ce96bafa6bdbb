"""Sharded embedding tables on 4 logical CPU replicas: 1/N of a table per
replica, the unsharded model's outputs and weights after K steps, sparse
updates on the rows' owners, collectives whose size does not follow the
table, and checkpoints that move between the layouts."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import embedding_tables
from distribution import gradients as gradients_lib
from distribution import plan as plan_lib
from distribution import strategy as strategies
from models.dlrm import model as dlrm
from models.dlrm import task as dlrm_task
from training import optimizers
from training import step as step_lib

REPLICAS = 4
VOCAB = (50, 7, 301, 3)  # 301: the last shard has a padding row.
DENSE = 5
STEPS = 3


def make_plan(sharding):
  return plan_lib.PlanOptions(
      distribution=strategies.StrategyConfig(kind='mirrored',
                                             num_cpu_devices=REPLICAS),
      embedding_sharding=sharding, sharded_tables=2).make(
          task=None, deterministic=False)


def build(plan):
  with plan.scope():
    model = dlrm.Dlrm(vocab_sizes=VOCAB, num_dense=DENSE, embedding_dim=8,
                      bottom_mlp=(16, 8), top_mlp=(12, 1), seed=3)
    step = tf.Variable(0, dtype=tf.int64)
  optimizer = optimizers.Sgd()
  optimizer.build(model.trainable_variables)
  plan.built(model=model, optimizer=optimizer)
  return model, step, optimizer


def data(n, seed=5):
  rng = np.random.default_rng(seed)
  return {'dense': rng.random([n, DENSE]).astype(np.float32),
          'sparse': np.stack([rng.integers(0, v, n) for v in VOCAB], 1),
          'label': rng.integers(0, 2, n).astype(np.float32)}


def whole(plan, model) -> dict:
  """Every weight in the unsharded layout (a sharded table gathered)."""
  view, gather = plan.checkpoint_model(model)
  if gather:
    gather()
  out = {}
  for name, value in view.params.items():
    if isinstance(value, embedding_tables.FullTable):
      out[name] = value._serialize_to_tensors()['VARIABLE_VALUE'].numpy()
    else:
      out[name] = plan.strategy.experimental_local_results(value)[0].numpy()
  return out


def copy_weights(source_plan, source, target_plan, target, tmp_path):
  """Through a checkpoint of the source's view into the target's."""
  view, gather = source_plan.checkpoint_model(source)
  if gather:
    gather()
  path = tf.train.Checkpoint(model=view).write(str(tmp_path / 'ckpt'))
  into, _ = target_plan.checkpoint_model(target)
  tf.train.Checkpoint(model=into).read(path).assert_consumed()


def train(plan, model, step, optimizer, batches):
  task = dlrm_task.DlrmTask(model=None, data=None)
  loop = step_lib.make_train_loop(
      strategy=plan.strategy, model=model, optimizer=optimizer,
      learning_rate=lambda s: tf.constant(0.5), task=task, step=step,
      **plan.train_loop_options())
  ds = tf.data.Dataset.from_tensor_slices(batches)
  per_replica = 32 // REPLICAS
  iterator = iter(plan.distribute(
      lambda ctx: ds.shard(ctx.num_input_pipelines,
                           ctx.input_pipeline_id).batch(per_replica),
      32, training=True))
  loop(iterator, tf.constant(STEPS))


@pytest.fixture(scope='module')
def replicated():
  plan = make_plan('none')
  return (plan, *build(plan))


@pytest.mark.parametrize('partition', ['mod', 'div'])
def test_sharded_tables_equal_the_unsharded_model(replicated, partition,
                                                  tmp_path):
  plain_plan, plain, plain_step, plain_opt = replicated
  plan = make_plan(partition)
  model, step, optimizer = build(plan)
  # The two largest tables (301 and 50 rows) are sharded, the others whole.
  for t, rows in enumerate(VOCAB):
    copies = plan.strategy.experimental_local_results(model.tables[t])
    if rows in (301, 50):
      # 1/N of the table a replica: ceil(rows / 4) rows, each its own.
      assert [c.shape[0] for c in copies] == [-(-rows // REPLICAS)] * 4
      assert not np.array_equal(copies[0].numpy(), copies[1].numpy())
    else:
      assert model.tables[t].shape[0] == rows and model.tables[t].trainable
  # Built sharded, the tables hold the unsharded model's initial values.
  built = whole(plan, model)
  fresh_plain, _, _ = build(make_plan('none'))
  for name, value in whole(make_plan('none'), fresh_plain).items():
    np.testing.assert_array_equal(built[name], value, err_msg=name)
  start = whole(plain_plan, plain)
  copy_weights(plain_plan, plain, plan, model, tmp_path)  # Unsharded in.
  np.testing.assert_array_equal(whole(plan, model)['embedding/table2'],
                                start['embedding/table2'])

  # The forward pass on every replica's own batch.
  b = data(32)

  def forward(the_plan, the_model):
    def one(ctx):
      del ctx
      return tf.data.Dataset.from_tensor_slices(b).batch(8)
    batch = next(iter(the_plan.distribute(one, 32, training=True)))
    out = the_plan.strategy.run(
        tf.function(lambda x: the_model(x['dense'], x['sparse'])),
        args=(batch,))
    return np.concatenate([o.numpy() for o in
                           the_plan.strategy.experimental_local_results(out)])

  np.testing.assert_allclose(forward(plan, model), forward(plain_plan, plain),
                             rtol=1e-6, atol=1e-7)

  # K steps: the same weights within float32 round-off, rows no batch
  # touched exactly as they were.
  batches = data(32 * STEPS)
  plain_start = whole(plain_plan, plain)
  train(plain_plan, plain, plain_step, plain_opt, batches)
  train(plan, model, step, optimizer, batches)
  got, want = whole(plan, model), whole(plain_plan, plain)
  for name in want:
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-7,
                               err_msg=name)
  untouched = np.setdiff1d(np.arange(301), batches['sparse'][:, 2])
  np.testing.assert_array_equal(got['embedding/table2'][untouched],
                                plain_start['embedding/table2'][untouched])

  # Sharded out: a fresh unsharded model restores the trained tables.
  fresh_plan = make_plan('none')
  fresh, _, _ = build(fresh_plan)
  copy_weights(plan, model, fresh_plan, fresh, tmp_path / 'out')
  np.testing.assert_array_equal(whole(fresh_plan, fresh)['embedding/table2'],
                                got['embedding/table2'])
  # Restore the plain model for the next partition's comparison.
  copy_weights(fresh_plan, fresh, plain_plan, plain, tmp_path / 'back')


def collective_elements(plan, model, batch_size):
  """Elements a replica's lookup sends into its collectives (ids to the
  all-gather, vectors to the all-reduce), as traced."""
  ids = tf.zeros([batch_size, len(VOCAB)], tf.int64)
  graph = tf.function(lambda x: plan.strategy.run(
      lambda y: model.embeddings.lookup(model.tables, y), args=(x,)))
  graph.get_concrete_function(ids)
  return model.embeddings.traced_collective_elements


def test_the_lookups_collectives_follow_the_batch_not_the_table():
  small, big = make_plan('mod'), make_plan('mod')
  with small.scope():
    a = dlrm.Dlrm(vocab_sizes=(100, 100, 3, 3), num_dense=DENSE,
                  embedding_dim=8, bottom_mlp=(8,), top_mlp=(1,))
  with big.scope():
    b = dlrm.Dlrm(vocab_sizes=(100_000, 100_000, 3, 3), num_dense=DENSE,
                  embedding_dim=8, bottom_mlp=(8,), top_mlp=(1,))
  sizes = [collective_elements(p, m, 16) for p, m in ((small, a), (big, b))]
  # 16 x 2 ids in, 4 replicas x 16 x 2 vectors of 8 summed: the same for
  # tables of 100 and 100,000 rows.
  assert sizes[0] == sizes[1] == (16 * 2, REPLICAS * 16 * 2 * 8)
  assert collective_elements(small, a, 32) == (32 * 2,
                                               REPLICAS * 32 * 2 * 8)


def test_what_sharded_tables_refuse_is_named():
  with pytest.raises(ValueError, match="'mod', 'div'"):
    make_plan('rows')
  with pytest.raises(ValueError, match='WEIGHT_UPDATE_SHARDING'):
    plan_lib.PlanOptions(
        distribution=strategies.StrategyConfig(kind='mirrored',
                                               num_cpu_devices=REPLICAS),
        embedding_sharding='mod', weight_update_sharding=True).make(
            task=None, deterministic=False)
  plan = make_plan('mod')
  with plan.scope():
    model = dlrm.Dlrm(vocab_sizes=VOCAB, num_dense=DENSE, embedding_dim=8,
                      bottom_mlp=(8,), top_mlp=(1,))
  momentum = optimizers.SgdMomentum(exclude=lambda n: False)
  with pytest.raises(ValueError, match='Sgd'):
    plan.built(model=model, optimizer=momentum)
  with pytest.raises(ValueError, match='MESH_SHAPE'):
    plan_lib.check_mesh_options(
        distribution=strategies.StrategyConfig(), deterministic=True,
        gradients=gradients_lib.GradientOptions(), weight_update_sharding=False,
        spatial_partitions=1, embedding_sharding='mod')
