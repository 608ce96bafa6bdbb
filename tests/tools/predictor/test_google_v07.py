"""tools/predictor/google_v07.py on Google's own v0.7 logs (tests/data/training_results_v0.7):
the score as MLPerf's summarizer computes it, the chips of each system, how
far each run trained in every way the logs count, and the committed table
agreeing with what the tool reads from those logs."""

import json
import os
import shutil
import subprocess

import pytest

from tests import helpers
from tools.predictor import google_v07
from tools import score as score_lib

LOGS = os.path.join(helpers.ROOT, 'tests', 'data', 'training_results_v0.7')
RESULTS = os.path.join(LOGS, 'Google', 'results')
TABLE = os.path.join(helpers.ROOT, 'tools', 'predictor', 'data', 'google_v07_results.json')


@pytest.fixture(scope='module')
def extracted():
  return {(r['system'], r['benchmark']): r
          for r in google_v07.extract(LOGS)['folders']}


def raw(path, key):
  """Every line of `key` in a log, read without the tool."""
  out = []
  for line in open(path):
    if ':::MLLOG' in line:
      entry = json.loads(line.split(':::MLLOG ', 1)[1])
      if entry['key'] == key:
        out.append(entry)
  return out


def test_the_score_is_mlperf_summarizers(extracted):
  folder = os.path.join(RESULTS, 'tpu-v3-32-TF2.0', 'resnet')
  _, summarizer = score_lib._summarizer_score(  # pylint: disable=protected-access
      folder, 'resnet', '0.7.0')
  row = extracted[('tpu-v3-32-TF2.0', 'resnet')]
  assert summarizer is not None
  assert row['score_minutes'] == pytest.approx(summarizer, rel=1e-9)
  assert len(row['runs']) == 5 and len(row['dropped']) == 2


def test_every_runs_minutes_are_its_run_start_to_run_stop(extracted):
  for (system, benchmark), row in extracted.items():
    for run in row['runs']:
      path = os.path.join(RESULTS, system, benchmark, run['name'] + '.txt')
      start = raw(path, 'run_start')[0]['time_ms']
      stop = raw(path, 'run_stop')[0]['time_ms']
      assert run['minutes'] == pytest.approx((stop - start) / 60000.0)


def test_chips_come_from_the_name_and_agree_with_the_system_file(extracted):
  assert extracted[('tpu-v3-32-TF2.0', 'resnet')]['chips'] == 16
  assert extracted[('tpu-v3-8192-TF', 'bert')]['chips'] == 4096
  assert extracted[('tpu-v4-128-TF', 'resnet')]['chips'] == 64
  assert extracted[('tpu-v4-128-TF', 'resnet')]['generation'] == 'v4'
  with pytest.raises(ValueError, match='tpu-v3-32-TF2.0: the name says 16 '
                     'chips, its system description 32'):
    google_v07.describe_system('tpu-v3-32-TF2.0', {
        'number_of_nodes': '4', 'accelerators_per_node': '8'})


def test_bert_counts_steps_by_block_in_tf2_logs_and_by_step_on_pods(
    extracted):
  tf2 = extracted[('tpu-v3-32-TF2.0', 'bert')]['runs'][0]
  path = os.path.join(RESULTS, 'tpu-v3-32-TF2.0', 'bert', 'result_0.txt')
  blocks = raw(path, 'block_start')
  assert tf2['epoch_num'] == len(blocks)  # The eval is numbered by blocks.
  steps = sum(b['metadata']['epoch_count'] for b in blocks)
  assert tf2['steps_at_target'] == steps
  assert tf2['samples_at_target'] == steps * 448
  pod = extracted[('tpu-v3-8192-TF', 'bert')]['runs'][0]
  assert pod['steps_at_target'] == pod['epoch_num'] == 496
  assert pod['samples_at_target'] == 496 * 8192


def test_epochs_done_whether_numbered_from_zero_or_one(extracted):
  # tpu-v3-32: first block epochs 0..2, its eval labelled 2 (3 done).
  v3 = extracted[('tpu-v3-32-TF2.0', 'resnet')]['runs'][0]
  assert v3['epochs_at_target'] == v3['epoch_num'] + 1
  # tpu-v4-128: blocks of 4 from 0, the first eval labelled 3.
  v4 = extracted[('tpu-v4-128-TF', 'resnet')]['runs'][0]
  assert v4['epochs_at_target'] == v4['epoch_num'] + 1
  # JAX: epochs from 1, each eval labelled by its block's last epoch.
  jax = extracted[('tpu-v3-8192-JAX', 'resnet')]['runs'][0]
  assert jax['epochs_at_target'] == jax['epoch_num']
  assert jax['samples_at_target'] == jax['epoch_num'] * 1281167


def test_ssds_eval_beside_training_records_how_far_training_went(extracted):
  run = extracted[('tpu-v3-8192-TF', 'ssd')]['runs'][0]
  assert run['status'] == 'success'
  assert run['epochs_at_stop'] > run['epochs_at_target'] == run['epoch_num']


def test_the_committed_table_holds_what_the_logs_say(extracted):
  with open(TABLE) as f:
    table = json.load(f)
  assert table['source']['commit'] == (
      '0a8a85a209c8e45b661596c382cc20f4e32fd2fe')
  committed = {(r['system'], r['benchmark']): r for r in table['folders']}
  assert len(committed) == 35
  for key, row in extracted.items():
    runs = {r['name']: r for r in committed[key]['runs']}
    for run in row['runs']:
      assert runs[run['name']] == run, (key, run['name'])
  full = committed[('tpu-v3-32-TF2.0', 'resnet')]
  assert full == extracted[('tpu-v3-32-TF2.0', 'resnet')]


def test_the_olympic_mean_counts_a_failed_run_as_the_slowest():
  runs = [{'name': f'result_{i}', 'status': 'success', 'minutes': m}
          for i, m in enumerate([3.0, 1.0, 2.0, 5.0, 4.0])]
  assert google_v07.olympic(runs) == (3.0, ['result_1', 'result_3'])
  runs[3]['status'] = 'abort'
  assert google_v07.olympic(runs) == (3.0, ['result_1', 'result_3'])
  runs[0]['status'] = 'abort'
  assert google_v07.olympic(runs)[0] is None


def test_a_folder_without_results_is_one_line(tmp_path):
  shutil.copytree(os.path.join(LOGS, 'Google', 'systems'),
                  tmp_path / 'Google' / 'systems')
  result = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.predictor.google_v07', f'--results={tmp_path}',
       f'--out={tmp_path / "t.json"}'], cwd=helpers.ROOT, capture_output=True,
      text=True, check=False, timeout=120)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      f'error: {tmp_path}/Google/results holds no <system>/<benchmark> '
      'folders: give a checkout of '
      'github.com/mlcommons/training_results_v0.7.']
  assert not (tmp_path / 't.json').exists()


def test_dlrm_numbers_its_evals_each_five_percent_of_the_clicks(extracted):
  run = extracted[('tpu-v4-128-TF', 'dlrm')]['runs'][0]
  path = os.path.join(RESULTS, 'tpu-v4-128-TF', 'dlrm', 'result_0.txt')
  evals = raw(path, 'eval_accuracy')
  assert run['unit'] == 'evals' and run['epoch_num'] == len(evals) == 18
  # Google's --steps_between_evals=3793 at batch 55,296: 5% of the clicks.
  train_samples = raw(path, 'train_samples')[0]['value']
  assert 3793 * 55296 == pytest.approx(0.05 * train_samples, rel=2e-4)
  assert run['samples_at_target'] == pytest.approx(18 * 3793 * 55296,
                                                   rel=2e-4)


def test_a_steps_time_is_its_blocks_over_their_steps(extracted):
  # ResNet-50 on a v4-128: each block's time over epoch_count epochs of
  # ImageNet at the global batch, the median of the blocks between the
  # first and the last, recomputed here from the raw lines.
  path = os.path.join(RESULTS, 'tpu-v4-128-TF', 'resnet', 'result_0.txt')
  batch = raw(path, 'global_batch_size')[0]['value']
  starts, stops = raw(path, 'block_start'), raw(path, 'block_stop')
  per_step = sorted(
      (stop['time_ms'] - start['time_ms']) /
      (start['metadata']['epoch_count'] * 1281167 / batch)
      for start, stop in list(zip(starts, stops))[1:-1])
  middle = len(per_step) // 2
  median = (per_step[middle] if len(per_step) % 2 else
            (per_step[middle - 1] + per_step[middle]) / 2)
  run = extracted[('tpu-v4-128-TF', 'resnet')]['runs'][0]
  assert run['block_step_ms'] == pytest.approx(median)
  assert 30 < run['block_step_ms'] < 50  # 128 images a chip.
  # BERT's blocks count steps; a log of fewer than three blocks has none.
  bert = extracted[('tpu-v3-32-TF2.0', 'bert')]['runs'][0]
  assert 300 < bert['block_step_ms'] < 600
  assert google_v07.block_step_ms('transformer', google_v07.read_lines(
      path)) is None
