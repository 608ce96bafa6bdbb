"""DLRM against Google's v0.7 sequence in NumPy, its schedule, and sparse
updates of the embedding rows a batch touched (on one device and on 4
logical CPU replicas)."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from models.dlrm import model as dlrm
from models.dlrm import task as dlrm_task
from training import optimizers
from training import schedules
from training import step as step_lib

VOCAB = (50, 7, 300, 3)
DENSE = 5


def small_model(**kwargs):
  return dlrm.Dlrm(vocab_sizes=VOCAB, num_dense=DENSE, embedding_dim=8,
                   bottom_mlp=(16, 8), top_mlp=(12, 6, 1), seed=3, **kwargs)


def batch(n=32, seed=0):
  rng = np.random.default_rng(seed)
  return {'dense': rng.random([n, DENSE]).astype(np.float32),
          'sparse': np.stack([rng.integers(0, v, n) for v in VOCAB], 1),
          'label': rng.integers(0, 2, n).astype(np.float32)}


def google_logits(model, dense, sparse):
  """Google's `logits_fn` (opt_skip_gather=True) in NumPy: every pairwise
  product with the upper triangle and diagonal zeroed, flattened n x n,
  into a top MLP whose first kernel has a row for each of them (the rows
  of this model's kernel at the lower-triangle entries, noise elsewhere)."""
  x = dense
  for kernel, bias in model.bottom:
    x = np.maximum(x @ kernel.numpy() + bias.numpy(), 0)
  cats = [t.numpy()[sparse[:, i]] for i, t in enumerate(model.tables)]
  stack = np.concatenate([x] + cats, -1).reshape(len(x), -1, x.shape[1])
  n = stack.shape[1]
  xactions = stack @ stack.transpose(0, 2, 1)
  upper = np.triu(np.ones([n, n], bool))
  acts = np.where(upper, 0.0, xactions).reshape(len(x), n * n)
  kernel0 = np.random.default_rng(9).normal(size=[x.shape[1] + n * n, 12])
  ours = model.top[0][0].numpy()
  kernel0[:x.shape[1]] = ours[:x.shape[1]]
  pairs = [(i, j) for i in range(n) for j in range(i)]
  for k, (i, j) in enumerate(pairs):
    kernel0[x.shape[1] + i * n + j] = ours[x.shape[1] + k]
  h = np.concatenate([x, acts], 1)
  for i, (kernel, bias) in enumerate(model.top):
    h = h @ (kernel0 if i == 0 else kernel.numpy()) + bias.numpy()
    if i < len(model.top) - 1:
      h = np.maximum(h, 0)
  return h[:, 0]


def test_forward_equals_googles_skip_gather_sequence():
  model = small_model()
  b = batch()
  want = google_logits(model, b['dense'].astype(np.float64), b['sparse'])
  got = model(tf.constant(b['dense']), tf.constant(b['sparse'])).numpy()
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
  # 5 features' 10 pairs + the bottom MLP's 8: the top MLP's fan-in.
  assert model.top[0][0].shape == (5 * 4 // 2 + 8, 12)


def test_initial_values_follow_the_reference():
  model = small_model()
  for rows, table in zip(VOCAB, model.tables):
    values = table.numpy()
    assert values.shape == (rows, 8)
    assert np.abs(values).max() <= 1 / np.sqrt(rows)
    assert np.abs(values).max() > 0.8 / np.sqrt(rows)  # Uniform, not tiny.
  # The top MLP's first kernel: N(0, sqrt(2 / (fan_in + fan_out))).
  kernel = model.top[0][0].numpy()
  assert kernel.std() == pytest.approx(np.sqrt(2 / (18 + 12)), rel=0.15)
  assert small_model().tables[2].numpy().tolist() == (
      model.tables[2].numpy().tolist())  # Seeded.


def test_bfloat16_compute_keeps_float32_weights_and_logits():
  model = small_model(compute_dtype='bfloat16')
  b = batch()
  logits = model(tf.constant(b['dense']), tf.constant(b['sparse']))
  assert logits.dtype == tf.float32
  assert all(v.dtype == tf.float32 for v in model.trainable_variables)
  plain = small_model()(tf.constant(b['dense']), tf.constant(b['sparse']))
  np.testing.assert_allclose(logits.numpy(), plain.numpy(), atol=0.05)


def test_bad_widths_and_table_sizes_are_named():
  with pytest.raises(ValueError, match='embedding_dim'):
    dlrm.Dlrm(vocab_sizes=VOCAB, num_dense=2, embedding_dim=8,
              bottom_mlp=(16, 4))
  with pytest.raises(ValueError, match='one logit'):
    dlrm.Dlrm(vocab_sizes=VOCAB, num_dense=2, embedding_dim=8,
              bottom_mlp=(8,), top_mlp=(4, 2))
  with pytest.raises(ValueError, match="'item' 10 rows.*has 20"):
    dlrm_task.check_table_sizes((5, 10), (5, 20), ('user', 'item'))
  with pytest.raises(ValueError, match='2 sparse features'):
    dlrm_task.check_table_sizes((5,), (5, 20), ('user', 'item'))
  assert dlrm_task.check_table_sizes((), (5, 20), ('a', 'b')) == [5, 20]
  assert dlrm_task.check_table_sizes((6, 20), (5, 20), ('a', 'b')) == [6, 20]


def google_lr(step, *, base=0.887, batch=55296, warmup=2750,
              decay_start=49315, decay_steps=27772):
  """utils.lr_fn in float32 NumPy, their order of operations."""
  f = np.float32
  step, adjusted = f(step), f(base * (batch / 2048.0))
  rate = adjusted / f(warmup)
  warm = adjusted - (f(warmup) - step) * rate
  done = np.minimum(step - f(decay_start), f(decay_steps))
  decay = np.maximum(adjusted * ((f(decay_steps) - done) / f(decay_steps))
                     ** f(2), f(1e-7))
  is_warm, is_decay = f(step < warmup), f(step > decay_start)
  middle = f(is_warm + is_decay == 0)
  return is_warm * warm + middle * adjusted + is_decay * decay


def test_schedule_is_googles_lr_fn():
  lr = schedules.GoogleDlrmV07(base=0.887, warmup_steps=2750,
                               decay_start_step=49315, decay_steps=27772,
                               global_batch_size=55296)
  for s in (0, 1, 1374, 2749, 2750, 30000, 49315, 49316, 60000, 77086,
            77087, 80000):
    assert float(lr(s)) == google_lr(s), s
  assert lr.describe()['base_learning_rate'] == pytest.approx(23.949)
  keys = optimizers.Sgd().mlperf_params(lr)
  assert keys == {
      'opt_base_learning_rate': pytest.approx(23.949),
      'sgd_opt_base_learning_rate': pytest.approx(23.949),
      'sgd_opt_learning_rate_decay_poly_power': 2,
      'sgd_opt_learning_rate_decay_steps': 27772,
      'opt_learning_rate_warmup_steps': 2750,
      'lr_decay_start_steps': 49315}
  with pytest.raises(ValueError, match='before the warmup'):
    schedules.GoogleDlrmV07(base=1, warmup_steps=10, decay_start_step=5,
                            decay_steps=3, global_batch_size=2048)


def test_lookup_gradient_is_the_touched_rows_and_sgd_moves_only_them():
  model = small_model()
  task = dlrm_task.DlrmTask(model=None, data=None)
  b = {k: tf.constant(v) for k, v in batch(8).items()}
  with tf.GradientTape() as tape:
    share, _ = task.loss_share(model, b)
  grads = tape.gradient(share.value, model.tables)
  assert all(isinstance(g, tf.IndexedSlices) for g in grads)
  before = model.tables[2].numpy()
  optimizers.Sgd().update_sparse(model.tables[2], grads[2], (), 0.5, 0,
                                 decay=False)
  after = model.tables[2].numpy()
  touched = np.unique(b['sparse'].numpy()[:, 2])
  changed = np.flatnonzero(np.any(after != before, axis=1))
  np.testing.assert_array_equal(changed, touched)
  # The same as the dense rule on the densified gradient (repeats summed).
  want = before - 0.5 * tf.convert_to_tensor(grads[2]).numpy()
  np.testing.assert_allclose(after, want, rtol=1e-6, atol=1e-8)


def train(strategy, steps, lr=0.5):
  """`steps` steps of the runtime's train loop; returns the weights and
  what reached the optimizer."""
  with strategy.scope():
    model = small_model()
    step = tf.Variable(0, dtype=tf.int64)
  seen = []

  class Recording(optimizers.Sgd):
    def update_sparse(self, var, grad, slots, lr, step, *, decay):
      seen.append(type(grad).__name__)
      return super().update_sparse(var, grad, slots, lr, step, decay=decay)

    def update(self, var, grad, slots, lr, step, *, decay):
      seen.append(type(grad).__name__)
      return super().update(var, grad, slots, lr, step, decay=decay)

  optimizer = Recording()
  optimizer.build(model.trainable_variables)
  task = dlrm_task.DlrmTask(model=None, data=None)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=optimizer,
      learning_rate=lambda s: tf.constant(lr), task=task, step=step)
  data = tf.data.Dataset.from_tensor_slices(batch(32 * steps, seed=5))
  per_replica = 32 // strategy.num_replicas_in_sync
  iterator = iter(strategy.distribute_datasets_from_function(
      lambda ctx: data.shard(ctx.num_input_pipelines,
                             ctx.input_pipeline_id).batch(per_replica)))
  before = [t.numpy() for t in model.tables]
  loop(iterator, tf.constant(steps))
  return model, before, seen


def test_four_replicas_apply_sparse_updates_equal_to_one_device():
  four = strategies.make_strategy(kind='mirrored', num_cpu_devices=4)
  model4, before, seen = train(four, steps=3)
  model1, _, _ = train(tf.distribute.get_strategy(), steps=3)
  # Each table's gradient reached the optimizer as rows, the MLPs' dense.
  assert seen.count('IndexedSlices') == len(VOCAB) * 4  # Traced per replica.
  for got, want in zip(model4.trainable_variables,
                       model1.trainable_variables):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5,
                               atol=2e-7, err_msg=got.name)
  # Rows no batch touched are the initial ones, bit for bit.
  ids = batch(96, seed=5)['sparse']
  for t, (table, start) in enumerate(zip(model4.tables, before)):
    untouched = np.setdiff1d(np.arange(VOCAB[t]), ids[:, t])
    np.testing.assert_array_equal(table.numpy()[untouched], start[untouched])


def test_sparse_adagrad_moves_only_the_touched_rows_and_their_accumulators():
  model = small_model()
  task = dlrm_task.DlrmTask(model=None, data=None)
  b = {k: tf.constant(v) for k, v in batch(16, seed=2).items()}
  with tf.GradientTape() as tape:
    share, _ = task.loss_share(model, b)
  table = model.tables[2]
  grad = tape.gradient(share.value, table)
  sparse, dense = optimizers.Adagrad(), optimizers.Adagrad()
  sparse.build([table])
  twin = tf.Variable(table.numpy())
  dense.build([twin])
  before = table.numpy()
  sparse.update_sparse(table, grad, sparse.slots_for([table])[0], 0.5, 0,
                       decay=False)
  dense.update(twin, tf.convert_to_tensor(grad), dense.slots_for([twin])[0],
               0.5, 0, decay=False)
  touched = np.unique(b['sparse'].numpy()[:, 2])
  changed = np.flatnonzero(np.any(table.numpy() != before, axis=1))
  np.testing.assert_array_equal(changed, touched)
  accumulator = sparse.slots_for([table])[0][0].numpy()
  np.testing.assert_array_equal(
      np.flatnonzero(np.any(accumulator != 0.01, axis=1)), touched)
  # The dense rule on the densified gradient: the same weights and sums.
  np.testing.assert_allclose(table.numpy(), twin.numpy(), rtol=1e-6,
                             atol=1e-8)
  np.testing.assert_allclose(accumulator, dense.slots_for([twin])[0][0].numpy(),
                             rtol=1e-6)
  with pytest.raises(ValueError, match='initial_accumulator'):
    optimizers.Adagrad(initial_accumulator=0.0)
