"""BERT through the runtime: pipeline checks, exact eval, MLPerf log."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import bert as bert_input
from tests import helpers


@pytest.mark.slow
def test_two_replica_run_reaches_target_and_passes_the_checker(bert_run,
                                                               tmp_path):
  assert bert_run['status'] == 'success', bert_run['evals']
  assert bert_run['evals'][0][0] == 80  # No eval before first_eval_step.
  assert bert_run['evals'][-1][3]['examples'] == 100
  log = os.path.join(bert_run['model_dir'], 'mlperf.log')
  for ruleset in ('0.7.0', '5.0.0'):
    checked = helpers.run_checker(log, ruleset, str(tmp_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
  text = open(log).read()
  for key in ('"opt_lamb_beta_1"', '"opt_lamb_weight_decay_rate"',
              '"start_warmup_step"', '"opt_learning_rate_training_steps"',
              '"submission_benchmark", "value": "bert"'):
    assert key in text


def test_eval_counts_every_sample_once_across_hosts_and_replicas(sums_data):
  data = bert_input.BertPretrainingInput(
      data_dir=sums_data, max_seq_length=32, max_predictions_per_seq=5,
      num_eval_samples=50)
  hosts, replicas_per_host, global_batch = 2, 3, 12  # 50 % 12 != 0
  steps = data.eval_steps(num_pipelines=hosts, global_batch_size=global_batch)
  seen = collections.Counter()
  for host in range(hosts):
    ctx = tf.distribute.InputContext(hosts, host, hosts * replicas_per_host)
    batches = list(data.eval_dataset(ctx, global_batch_size=global_batch,
                                     steps=steps))
    assert len(batches) == steps * replicas_per_host
    for b in batches:
      real = b['mask'].numpy() == 1
      assert not b['masked_lm_weights'].numpy()[~real].any()
      for ids in b['input_ids'].numpy()[real]:
        seen[ids.tobytes()] += 1
  first_50 = [ex.numpy() for ex in tf.data.TFRecordDataset(sorted(
      tf.io.gfile.glob(os.path.join(sums_data, 'eval-*')))).take(50)]
  assert sum(seen.values()) == 50 == len(first_50)


def test_wrong_sequence_length_names_the_feature(sums_data):
  data = bert_input.BertPretrainingInput(data_dir=sums_data,
                                         max_seq_length=128,
                                         max_predictions_per_seq=5)
  with pytest.raises(ValueError, match="'input_ids'.*32 values.*expects 128"):
    data.check()


def test_resumed_stream_continues_where_the_first_stopped(sums_data):
  data = bert_input.BertPretrainingInput(
      data_dir=sums_data, max_seq_length=32, max_predictions_per_seq=5,
      deterministic=True)
  ctx = tf.distribute.InputContext()
  full = list(data.train_dataset(ctx, global_batch_size=8).take(9))
  resumed = list(data.train_dataset(ctx, global_batch_size=8,
                                    start_step=4).take(5))
  for a, b in zip(full[4:], resumed):
    np.testing.assert_array_equal(a['input_ids'], b['input_ids'])


def test_resumed_stream_two_epochs_later_is_the_uninterrupted_one(sums_data):
  from input_pipeline import records
  data = bert_input.BertPretrainingInput(
      data_dir=sums_data, max_seq_length=32, max_predictions_per_seq=5,
      deterministic=True)
  per_epoch = records.count_records(records.list_files(data.train_files))
  start = 2 * per_epoch // 8 + 3  # In the third epoch, not at its start.
  ctx = tf.distribute.InputContext()
  full = list(data.train_dataset(ctx, global_batch_size=8).take(start + 2))
  resumed = list(data.train_dataset(ctx, global_batch_size=8,
                                    start_step=start).take(2))
  for a, b in zip(full[start:], resumed):
    np.testing.assert_array_equal(a['input_ids'], b['input_ids'])


def test_clipping_before_and_after_the_all_reduce(sums_data):
  del sums_data
  from distribution import gradients as gradients_lib
  from distribution import strategy as strategies
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=2)
  # Replica r holds gradient r+1 times [3, 4] (norm 5 (r+1)) as a 1/2 share.
  def run(clip_before, dtype='float32'):
    def fn():
      r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group,
                  tf.float32)
      g = tf.constant([3.0, 4.0]) * (r + 1) / 2
      return gradients_lib.all_reduce_gradients(
          [g], options=gradients_lib.GradientOptions(
              clip_norm=1.0, clip_before_allreduce=clip_before,
              allreduce_dtype=dtype), replica_factor=2)[0]
    return strategy.experimental_local_results(strategy.run(tf.function(fn)))[
        0].numpy()
  # Before: each replica's own mean clipped to norm 1, then averaged.
  np.testing.assert_allclose(run(True), [0.6, 0.8], rtol=1e-6)
  # After: the sum (norm 7.5) clipped to norm 1.
  np.testing.assert_allclose(run(False), [0.6, 0.8], rtol=1e-6)
  np.testing.assert_allclose(run(False, 'bfloat16'), [0.6, 0.8], rtol=1e-2)


@pytest.mark.slow
def test_no_success_before_the_minimum_samples(sums_data, tmp_path):
  # The budget ends (and evaluates) before first_eval_step: however good the
  # accuracy, MLPerf does not count it as reaching the target.
  result = helpers.run_gin(
      ['gin/bert_quickstart.gin'],
      helpers.sums_bindings(sums_data, str(tmp_path / 'run'),
                            TARGET_ACCURACY=0.0,
                            **{'TRAIN_STEPS': 40,
                               'FIRST_EVAL_STEP': 80}))
  assert [e[0] for e in result.evals] == [40]
  assert result.status == 'aborted'


@pytest.mark.slow
def test_create_pretraining_data_command_line(bert_data, tmp_path):
  import subprocess
  folder, _ = bert_data
  out = tmp_path / 'part'
  done = subprocess.run(
      [helpers.PYTHON, 'tools/create_pretraining_data.py',
       f'--input_file={folder}/eval_corpus.txt',
       f'--vocab_file={folder}/vocab.txt', f'--output_file={out}-0,{out}-1',
       '--max_seq_length=64', '--max_predictions_per_seq=10',
       '--dupe_factor=1', '--random_seed=7'],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=120,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  assert done.returncode == 0, done.stderr[-2000:]
  assert 'sentences/s' in done.stdout
  assert all(os.path.getsize(f'{out}-{i}') > 0 for i in range(2))
