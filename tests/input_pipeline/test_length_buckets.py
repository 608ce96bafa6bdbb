"""GNMT's bucketed input: every replica of every host on the same bucket
each step, the replicas' slices disjoint, an epoch's plan, exact resume."""

import random

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import length_buckets
from input_pipeline.length_buckets import LengthBucketInput


def test_buckets_are_their_switch():
  lengths = length_buckets.bucket_lengths(48)
  assert lengths == (18, 24, 30, 36, 42, 48)
  for s in range(1, 49):
    for t in range(1, 49):
      # model.py: switch_case(int((max(src, tgt, 12) - 12) / 6)), default 48.
      theirs = int((max(s, t, 12) - 12) / 6)
      want = theirs if theirs < 5 else 5
      got = length_buckets.bucket_of(s, t, lengths)
      assert got == want and max(s, t) <= lengths[got]
  assert length_buckets.bucket_lengths(30) == (18, 24, 30)


@pytest.fixture(scope='module')
def pairs_dir(tmp_path_factory):
  """600 pairs of random lengths over six buckets, 8 eval pairs."""
  from tools import build_translation_data
  rng = random.Random(0)
  words = [f'w{i}' for i in range(40)]
  def sentence(n):
    return ' '.join(rng.choice(words) for _ in range(n))
  pairs = []
  for _ in range(600):
    n = rng.randint(1, 45)
    pairs.append((sentence(n), sentence(rng.randint(1, n))))
  out = str(tmp_path_factory.mktemp('pairs'))
  build_translation_data.build(
      output_dir=out, train_pairs=pairs, eval_pairs=pairs[:8],
      vocab_size=200, max_length=48, train_shards=3, layout='pairs')
  return out


def batches(data, context, steps, start_step=0, batch=8):
  ds = data.train_dataset(context, global_batch_size=batch,
                          start_step=start_step)
  return list(ds.take(steps * context.num_replicas_in_sync //
                      context.num_input_pipelines))


def test_every_replica_of_every_host_gets_the_steps_bucket(pairs_dir):
  data = LengthBucketInput(data_dir=pairs_dir, deterministic=True, seed=3)
  data.check()
  assert sum(p for _, p in data.buckets) == data.num_train_examples
  assert all(p > 20 for _, p in data.buckets)  # Every bucket in use.
  # Two hosts of two replicas each: each host's dataset gives its replicas
  # consecutive elements.
  steps = 2 * int(data.steps_per_epoch(8))
  hosts = [batches(data, tf.distribute.InputContext(2, i, 4), steps)
           for i in range(2)]
  lengths = data.lengths
  seen = set()
  for step in range(steps):
    slices = [hosts[h][2 * step + r] for h in range(2) for r in range(2)]
    buckets = {int(b) for s in slices for b in s['bucket'].numpy()}
    assert len(buckets) == 1, (step, buckets)
    bucket = buckets.pop()
    rows = []
    for s in slices:
      longest = max(s['source_length'].numpy().max(),
                    s['target_length'].numpy().max())
      assert longest <= lengths[bucket]
      if bucket:  # The lengths choose this bucket, not a shorter one.
        assert max(longest, 12) >= lengths[bucket - 1]
      rows += [tuple(r) for r in s['source'].numpy()]
    # The global batch: four slices of 2 distinct pairs each.
    assert len(rows) == 8
    seen.update(rows)
  # Target input is the output shifted right behind the start id 0.
  s = hosts[0][0]
  np.testing.assert_array_equal(s['target_input'][:, 1:],
                                s['target_output'][:, :-1])
  assert not s['target_input'][:, 0].numpy().any()


def test_an_epochs_plan_has_each_bucket_by_its_share(pairs_dir):
  data = LengthBucketInput(data_dir=pairs_dir, seed=3)
  steps = data.steps_per_bucket(8)
  assert sum(steps) == data.num_train_examples // 8
  for (_, pairs), share in zip(data.buckets, steps):
    assert abs(share - pairs / 8) < 1
  assert length_buckets.apportion([100, 1, 0, 50], 3) == [2, 1, 0, 1]
  for epoch in range(3):
    plan = length_buckets.epoch_plan(steps, 3, epoch).numpy()
    assert np.bincount(plan).tolist() == steps
  assert not np.array_equal(length_buckets.epoch_plan(steps, 3, 0),
                            length_buckets.epoch_plan(steps, 3, 1))


def test_resume_continues_exactly(pairs_dir):
  data = LengthBucketInput(data_dir=pairs_dir, deterministic=True, seed=5,
                           shuffle_buffer=64)
  context = tf.distribute.InputContext(1, 0, 2)
  per_epoch = int(data.steps_per_epoch(8))
  start = per_epoch + 7  # Into the second epoch of the plan.
  whole = batches(data, context, start + 10)
  resumed = batches(data, context, 10, start_step=start)
  for a, b in zip(whole[2 * start:], resumed):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_data_without_buckets_is_named(tmp_path):
  from tools import build_translation_data
  pairs = [('a b', 'c d')] * 20
  build_translation_data.build(output_dir=str(tmp_path), train_pairs=pairs,
                               eval_pairs=pairs[:2], vocab_size=50,
                               max_length=16, train_shards=1)
  with pytest.raises(ValueError, match='--layout=pairs'):
    LengthBucketInput(data_dir=str(tmp_path)).check()


def test_a_mirrored_strategys_replicas_get_the_same_bucket(pairs_dir):
  # The strategy's own dealing of a host's elements to its replicas.
  from distribution import strategy as strategies
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=4)
  data = LengthBucketInput(data_dir=pairs_dir, deterministic=True, seed=3)
  dataset = strategy.distribute_datasets_from_function(
      lambda context: data.train_dataset(context, global_batch_size=8))
  buckets_seen = set()
  for _, batch in zip(range(40), dataset):
    per_replica = strategy.experimental_local_results(batch['bucket'])
    assert len(per_replica) == 4
    assert len({int(b) for r in per_replica for b in r.numpy()}) == 1
    buckets_seen.add(int(per_replica[0][0]))
  assert len(buckets_seen) > 1


def test_synthetic_buckets_are_the_real_ones_shapes(pairs_dir):
  """The synthetic mode (what tools.predict counts a step from) gives each
  bucket's batches, the real features and dtypes, pairs filling the
  bucket; shape_only leaves the other buckets without pairs, and the
  shares are the pairs'."""
  real = LengthBucketInput(data_dir=pairs_dir, deterministic=True)
  synthetic = LengthBucketInput(data_dir='/nonexistent', synthetic=True)
  synthetic.check()  # Reads nothing.
  context = tf.distribute.InputContext()
  want = next(iter(real.train_dataset(context, global_batch_size=4)))
  shares = synthetic.train_shares()
  assert sum(shares) == pytest.approx(1.0)
  assert synthetic.lengths == (18, 24, 30, 36, 42, 48)
  for index, length in enumerate(synthetic.lengths):
    synthetic.shape_only(index)
    got = next(iter(synthetic.train_dataset(context, global_batch_size=4)))
    assert {k: (v.dtype, v.shape) for k, v in got.items()} == {
        k: (v.dtype, v.shape) for k, v in want.items()}
    assert set(got['bucket'].numpy()) == {index}
    assert set(got['source_length'].numpy()) == {length}
    assert np.all(np.sum(got['target_output'].numpy() > 0, 1) == length)
    assert [p > 0 for _, p in synthetic.buckets] == [
        i == index for i in range(6)]
    assert synthetic.train_shares() == shares
  with pytest.raises(ValueError, match='synthetic'):
    real.shape_only(0)
