"""Runs that need their own processes: the CLI, kill-and-resume, multi-worker."""

import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers

pytestmark = pytest.mark.slow  # End-to-end: real runs and processes.

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=helpers.ROOT)


def train_cmd(data_dir, model_dir, *params):
  return [helpers.PYTHON, os.path.join(helpers.ROOT, 'train.py'),
          '--gin_file=gin/resnet_quickstart.gin', f'--model_dir={model_dir}',
          f"--gin.DATA_DIR='{data_dir}'", *params]


def run(cmd, timeout=300):
  return subprocess.run(cmd, capture_output=True, text=True, env=ENV,
                        cwd=helpers.ROOT, timeout=timeout)


def test_cli_writes_configs_and_accepts_gin_sugar(quickstart_data, tmp_path):
  model_dir = str(tmp_path / 'run')
  done = run(train_cmd(quickstart_data, model_dir,
                       '--gin.training.controller.RunSchedule.train_steps=4',
                       '--gin_param=training.schedules.PolynomialWarmup.warmup_epochs=0.01',
                       '--gin_param=STEPS_PER_LOOP=2',
                       '--gin_param=EVAL_EVERY_STEPS=4'))
  # Exit 1: the run ended without reaching the target (4 steps).
  assert done.returncode == 1, done.stderr[-3000:]
  assert 'time to train' in done.stdout
  config = open(os.path.join(model_dir, 'config.gin')).read()
  operative = open(os.path.join(model_dir, 'operative_config.gin')).read()
  assert 'train_steps = 4' in config
  assert 'ImageNetInput.data_dir' in operative
  events = [os.path.join(model_dir, 'train', f)
            for f in os.listdir(os.path.join(model_dir, 'train'))]
  tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0])
          for v in e.summary.value}
  assert 'gin/config' in tags


def test_gin_mistakes_fail_before_anything_runs(tmp_path):
  cases = {
      'gin.REQUIRED': ['--gin_file=gin/resnet50_pod.gin'],
      "No configurable matching 'models.resnet.ResNt'": [
          '--gin_file=gin/resnet_quickstart.gin',
          '--gin_param=models.resnet.ResNt.depth=18'],
      "doesn't have a parameter named 'dept'": [
          '--gin_file=gin/resnet_quickstart.gin',
          '--gin.models.resnet.ResNet.dept=18'],
  }
  for i, (message, args) in enumerate(cases.items()):
    model_dir = tmp_path / str(i)
    done = run([helpers.PYTHON, 'train.py', f'--model_dir={model_dir}', *args])
    assert done.returncode != 0
    assert message in done.stderr, done.stderr[-2000:]
    assert not model_dir.exists() or not os.listdir(model_dir)


def final_weights(model_dir):
  reader = tf.train.load_checkpoint(os.path.join(model_dir, 'checkpoints'))
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith('model/')}


def latest_step(state_file: str) -> int:
  """The step of the checkpoint the state file names (-1 if none yet).

  TensorFlow replaces the state file atomically, so a read sees a whole one.
  """
  try:
    with open(state_file) as f:
      first = f.readline()
  except FileNotFoundError:
    return -1
  match = re.search(r'ckpt-(\d+)"', first)
  return int(match.group(1)) if match else -1


def test_killed_run_resumes_to_the_same_weights(quickstart_data, tmp_path):
  params = ['--gin.DETERMINISTIC=True', '--gin.TRAIN_STEPS=120',
            '--gin.STEPS_PER_LOOP=2',
            '--gin.EVAL_EVERY_STEPS=40',
            '--gin.CHECKPOINT_EVERY_STEPS=10',
            '--gin.STOP_AT_TARGET=False',
            '--gin.GLOBAL_BATCH_SIZE=32']
  straight, killed = str(tmp_path / 'straight'), str(tmp_path / 'killed')
  proc = subprocess.Popen(train_cmd(quickstart_data, killed, *params),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=ENV, cwd=helpers.ROOT, text=True)
  # Wait for what the test needs: the checkpoint state naming step 20 or
  # later. ckpt-20.index exists a moment before the state file names it, and
  # a kill in between rightly resumes from step 10.
  state = os.path.join(killed, 'checkpoints', 'checkpoint')
  deadline = time.time() + 240
  while latest_step(state) < 20 and proc.poll() is None:
    assert time.time() < deadline
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  latest = tf.train.latest_checkpoint(os.path.join(killed, 'checkpoints'))
  killed_at = int(latest.rsplit('-', 1)[1])
  assert 20 <= killed_at < 120, 'the run was not killed mid-way'

  resumed = run(train_cmd(quickstart_data, killed, *params))
  assert f'resumed from {latest} at step {killed_at}' in resumed.stdout
  done = run(train_cmd(quickstart_data, straight, *params))
  assert done.returncode in (0, 1), done.stderr[-3000:]
  a, b = final_weights(straight), final_weights(killed)
  assert a.keys() == b.keys() and len(a) > 100
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_two_worker_processes_end_with_identical_weights(quickstart_data,
                                                         tmp_path):
  model_dir = str(tmp_path / 'run')
  helpers.run_two_workers(quickstart_data, model_dir, tmp_path)
  w0, w1 = (np.load(tmp_path / f'w{i}.npz') for i in range(2))
  # Each host counted its own eval shard; together every example once.
  assert int(w0['count']) == 360
  names = [k for k in w0.files if k != 'count']
  assert len(names) == 62  # every ResNet-18 weight
  for k in names:
    np.testing.assert_array_equal(w0[k], w1[k], err_msg=k)
  # Only the chief wrote the run's log and checkpoints; the scratch is gone.
  assert os.path.exists(os.path.join(model_dir, 'mlperf.log'))
  assert tf.train.latest_checkpoint(os.path.join(model_dir, 'checkpoints'))
  assert not os.listdir(os.path.join(model_dir, 'worker_scratch'))


def test_tpu_path_without_a_tpu_says_what_to_check():
  done = run([helpers.PYTHON, '-c', (
      'from distribution import strategy\n'
      "strategy.make_strategy(kind='tpu', tpu='local')")], timeout=120)
  assert done.returncode != 0
  assert "Cannot reach or initialise the TPU --tpu='local'" in done.stderr
  assert 'TPUs not found' in done.stderr
