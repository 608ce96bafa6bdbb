"""Runs that need their own processes: the CLI, kill-and-resume, multi-worker."""

import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from core import exit_codes
from tests import helpers

pytestmark = pytest.mark.slow  # End-to-end: real runs and processes.

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=helpers.ROOT)


def train_cmd(data_dir, model_dir, *params):
  return [helpers.PYTHON, os.path.join(helpers.ROOT, 'train.py'),
          '--gin_file=gin/resnet_quickstart.gin', f'--model_dir={model_dir}',
          f"--gin.DATA_DIR='{data_dir}'", f'--gin.{helpers.SMALL_RESNET}',
          *params]


def run(cmd, timeout=helpers.HANG_SECONDS):
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
  assert 'input_pipeline.imagenet.ImageNetInput.data_dir' in operative
  # gin's module aliases (`import distribution.gradients as
  # distribution7`) undone.
  for text in (config, operative):
    assert 'import distribution.gradients\n' in text
    assert not re.search(r'\b(core|training|models|distribution)\d+\b',
                         text)
  tags = {}
  for kind in ('train', 'eval'):
    folder = os.path.join(model_dir, kind)
    tags[kind] = {v.tag for f in os.listdir(folder) for e in
                  tf.compat.v1.train.summary_iterator(os.path.join(folder, f))
                  for v in e.summary.value}
  assert {'gin/config', 'loss', 'learning_rate', 'examples_per_second',
          'steps_per_second', 'step_time_ms', 'epoch'} <= tags['train']
  assert {'top1_accuracy', 'loss', 'epoch'} <= tags['eval']
  assert 'quality' not in tags['eval']


def test_gin_mistakes_fail_before_anything_runs(tmp_path):
  cases = {
      'gin.REQUIRED': ['--gin_file=gin/resnet50_pod.gin',
                       '--gin_file=gin/hardware/cpu.gin'],
      'no configurable is named models.common.resnet.ResNt': [
          '--gin_file=gin/resnet_quickstart.gin',
          '--gin_param=models.common.resnet.ResNt.depth=18'],
      "doesn't have a parameter named 'dept'": [
          '--gin_file=gin/resnet_quickstart.gin',
          '--gin.models.common.resnet.ResNet.dept=18'],
      # A name from before models/ was split by benchmark: the new one.
      'models.resnet.ResNet is now models.common.resnet.ResNet': [
          '--gin_file=gin/resnet_quickstart.gin',
          '--gin.models.resnet.ResNet.depth=18'],
      'is now models.resnet.task': [
          '--gin_file=gin/resnet_quickstart.gin',
          '--gin_param=import models.resnet_task'],
  }
  for i, (message, args) in enumerate(cases.items()):
    model_dir = tmp_path / str(i)
    done = run([helpers.PYTHON, 'train.py', f'--model_dir={model_dir}', *args])
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr, done.stderr[-2000:]
    assert 'Traceback' not in done.stderr
    assert not model_dir.exists() or not os.listdir(model_dir)


def final_weights(model_dir):
  return {k: v for k, v in helpers.checkpoint_tensors(model_dir).items()
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


# 60 steps (warm-up 45 of them): most of a run is its start-up.
RESUME_PARAMS = ['--gin.DETERMINISTIC=True', '--gin.TRAIN_STEPS=60',
                 '--gin.training.schedules.PolynomialWarmup.warmup_epochs=1',
                 '--gin.STEPS_PER_LOOP=2',
                 '--gin.EVAL_EVERY_STEPS=20',
                 '--gin.CHECKPOINT_EVERY_STEPS=10',
                 '--gin.STOP_AT_TARGET=False',
                 '--gin.GLOBAL_BATCH_SIZE=32']


@pytest.fixture(scope='module')
def uninterrupted(quickstart_data, tmp_path_factory):
  """Final weights of the run the interrupted ones must reproduce."""
  straight = str(tmp_path_factory.mktemp('straight'))
  done = run(train_cmd(quickstart_data, straight, *RESUME_PARAMS))
  assert done.returncode in (0, 1), done.stderr[-3000:]
  return final_weights(straight)


def assert_same_weights(a, b):
  assert a.keys() == b.keys() and len(a) > 50  # ResNet-10: 62 tensors.
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_killed_or_damaged_runs_resume_to_the_same_weights(quickstart_data, tmp_path,
                                                uninterrupted):
  params = RESUME_PARAMS
  killed = str(tmp_path / 'killed')
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
  assert 20 <= killed_at < 60, 'the run was not killed mid-way'

  resumed = run(train_cmd(quickstart_data, killed, *params))
  assert f'resumed from {latest} at step {killed_at}' in resumed.stdout
  assert_same_weights(uninterrupted, final_weights(killed))

  # The final checkpoint's data file truncated: the next run names it, sets
  # it aside, resumes from the one before and trains to the same weights.
  folder = os.path.join(killed, 'checkpoints')
  data = os.path.join(folder, 'ckpt-60.data-00000-of-00001')
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)
  again = run(train_cmd(quickstart_data, killed, *params))
  assert again.returncode in (0, 1), again.stderr[-3000:]
  assert (f'skipped checkpoint {folder}/ckpt-60: cannot be read '
          '(IndexError: Read less bytes than requested)') in again.stdout
  assert f'resumed from {folder}/ckpt-50 at step 50' in again.stdout
  assert os.listdir(os.path.join(folder, 'damaged')) == ['ckpt-60']
  assert_same_weights(uninterrupted, final_weights(killed))


# SIGINT takes the same path as SIGTERM once caught: its run is not resumed.
@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_preempted_run_saves_where_it_stopped_and_resumes_exactly(
    quickstart_data, tmp_path, uninterrupted, signum):
  from training import preemption
  preempted = str(tmp_path / 'preempted')
  # Periodic checkpoints only every 100 steps: the one at the stop is the
  # preemption's own.
  params = [*RESUME_PARAMS, '--gin.CHECKPOINT_EVERY_STEPS=100']
  proc = subprocess.Popen(train_cmd(quickstart_data, preempted, *params),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=ENV, cwd=helpers.ROOT, text=True)
  output = []
  for line in proc.stdout:  # Signal once training is under way.
    output.append(line)
    if line.startswith('step 10/'):
      proc.send_signal(signum)
      break
  output += proc.stdout.readlines()
  proc.wait(timeout=helpers.HANG_SECONDS)
  text = ''.join(output)
  assert proc.returncode == preemption.EXIT_PREEMPTED, text[-3000:]
  steps = [int(m) for m in re.findall(r'^step (\d+)/', text, re.M)]
  reached = steps[-1]
  assert 10 <= reached < 60, text[-3000:]
  assert f'preempted at step {reached}' in text
  assert tf.train.latest_checkpoint(os.path.join(
      preempted, 'checkpoints')).endswith(f'ckpt-{reached}')
  run_stops = [l for l in open(os.path.join(preempted, 'mlperf.log'))
               if '"key": "run_stop"' in l]
  assert len(run_stops) == 1 and '"status": "aborted"' in run_stops[0]
  if signum != signal.SIGTERM:
    return

  resumed = run(train_cmd(quickstart_data, preempted, *params))
  assert resumed.returncode in (0, 1), resumed.stderr[-3000:]
  assert f'at step {reached}' in resumed.stdout
  assert_same_weights(uninterrupted, final_weights(preempted))
  # Each attempt has its own log; the checker finds no key twice in either.
  assert 'the earlier mlperf.log is now' in resumed.stdout
  for name in ('mlperf.log.1', 'mlperf.log'):
    checked = helpers.run_checker(os.path.join(preempted, name), '0.7.0',
                                  str(tmp_path))
    assert 'EXACTLY_ONE' not in checked.stdout + checked.stderr, name
  assert 'resumed_from_checkpoint' in open(
      os.path.join(preempted, 'mlperf.log')).read()


def test_a_signal_during_an_eval_stops_at_its_end_not_a_loop_later(
    quickstart_data, tmp_path):
  from training import preemption
  model_dir = str(tmp_path / 'run')
  # An eval of 45 device calls (batch 8, one step a call) for the signal to
  # land in; checkpoints every 100 steps, so the stop's save is its own.
  params = [*RESUME_PARAMS, '--gin.CHECKPOINT_EVERY_STEPS=100',
            '--gin.EVAL_BATCH_SIZE=8',
            '--gin.training.run_options.RunOptions.eval_steps_per_loop=1']
  proc = subprocess.Popen(train_cmd(quickstart_data, model_dir, *params),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=ENV, cwd=helpers.ROOT, text=True)
  output = []
  for line in proc.stdout:
    output.append(line)
    if line.startswith('evaluating at step 20'):
      proc.send_signal(signal.SIGTERM)
      break
  output += proc.stdout.readlines()
  proc.wait(timeout=helpers.HANG_SECONDS)
  text = ''.join(output)
  assert proc.returncode == preemption.EXIT_PREEMPTED, text[-3000:]
  assert 'preempted at step 20, after an evaluation: saved' in text, text[-3000:]
  assert 'step 22/' not in text  # No training loop after the signal.
  assert re.search(r'^eval at step 20: quality', text, re.M)
  assert tf.train.latest_checkpoint(os.path.join(
      model_dir, 'checkpoints')).endswith('ckpt-20')


def test_a_second_signal_exits_at_once_keeping_the_last_checkpoint(
    quickstart_data, tmp_path):
  model_dir = str(tmp_path / 'run')
  # Loops of 200 steps: the second signal lands while one is running.
  params = [*RESUME_PARAMS, '--gin.STEPS_PER_LOOP=200',
            '--gin.CHECKPOINT_EVERY_STEPS=200', '--gin.TRAIN_STEPS=100000',
            '--gin.EVAL_EVERY_STEPS=100000']
  proc = subprocess.Popen(train_cmd(quickstart_data, model_dir, *params),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=ENV, cwd=helpers.ROOT, text=True)
  output = []
  for line in proc.stdout:
    output.append(line)
    if line.startswith('step 600/'):  # ckpt-400 was saved a loop ago.
      proc.send_signal(signal.SIGTERM)
    if line.startswith('signal 15:'):  # The first one was handled.
      proc.send_signal(signal.SIGTERM)
      break
  output += proc.stdout.readlines()
  proc.wait(timeout=helpers.HANG_SECONDS)
  text = ''.join(output)
  assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
  assert 'second signal' in text and 'preempted at step' not in text
  latest = tf.train.latest_checkpoint(os.path.join(model_dir, 'checkpoints'))
  assert int(latest.rsplit('-', 1)[1]) >= 400


def test_a_second_run_into_a_live_model_dir_is_refused(quickstart_data,
                                                      tmp_path):
  model_dir = str(tmp_path / 'run')
  params = [*RESUME_PARAMS, '--gin.TRAIN_STEPS=100000',
            '--gin.EVAL_EVERY_STEPS=100000', '--gin.CHECKPOINT_EVERY_STEPS=0']
  first = subprocess.Popen(train_cmd(quickstart_data, model_dir, *params),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=ENV, cwd=helpers.ROOT, text=True)
  try:
    for line in first.stdout:
      if line.startswith('step '):  # Under way: config and log written.
        break
    config = open(os.path.join(model_dir, 'config.gin')).read()
    second = run(train_cmd(quickstart_data, model_dir, *params,
                           '--gin.SEED=7'))
    assert second.returncode == 2, second.stderr[-3000:]
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(f'error: --model_dir={model_dir} is in use by '
                           f'another run (host ') and (
                               f'pid {first.pid}, started ' in last), last
    assert open(os.path.join(model_dir, 'config.gin')).read() == config
    assert sorted(os.listdir(model_dir)) == [
        'RUN_LOCK', 'config.gin', 'eval', 'mlperf.log', 'source.json', 'train']
    log = open(os.path.join(model_dir, 'mlperf.log')).read()
    assert log.count('"key": "init_start"') == 1
  finally:
    first.kill()
    first.wait()
  # Killed, the first run left its lock file but no longer holds the lock:
  # the next run takes it (the kernel dropped the flock with the process).
  from training import run_lock
  assert 'RUN_LOCK' in os.listdir(model_dir)
  lock = run_lock.for_model_dir(model_dir)
  lock.acquire()
  assert f'"pid": {os.getpid()}' in open(lock.path).read()
  lock.release()
  assert 'RUN_LOCK' not in os.listdir(model_dir)


def test_workers_stop_together_when_one_is_preempted(quickstart_data,
                                                     tmp_path):
  model_dir = str(tmp_path / 'run')
  procs = helpers.start_worker_processes(
      ['tests.multi_worker_main', quickstart_data, model_dir,
       'gin/resnet_quickstart.gin', 'TRAIN_STEPS=3000', 'EVAL_EVERY_STEPS=3000',
       'CHECKPOINT_EVERY_STEPS=1000'], tmp_path)
  chief_output = []
  for line in procs[0].stdout:
    chief_output.append(line)
    if line.startswith('step 20/'):
      procs[1].send_signal(signal.SIGTERM)  # Only the non-chief worker.
      break
  chief_output += procs[0].stdout.readlines()
  other_output = procs[1].communicate(timeout=helpers.HANG_SECONDS)[0]
  for p in procs:
    p.wait(timeout=helpers.HANG_SECONDS)
  assert procs[0].returncode == procs[1].returncode == 0, (
      ''.join(chief_output)[-2000:] + other_output[-2000:])
  chief, other = (json.load(open(tmp_path / f'w{i}.npz.json'))
                  for i in range(2))
  assert chief['preempted'] and other['preempted']
  assert chief['step'] == other['step'] and 20 <= chief['step'] < 3000
  latest = tf.train.latest_checkpoint(os.path.join(model_dir, 'checkpoints'))
  assert latest.endswith(f'ckpt-{chief["step"]}')


def test_user_errors_are_one_line_and_exit_2(tmp_path):
  missing = run(train_cmd(str(tmp_path / 'nowhere'), str(tmp_path / 'a')))
  assert missing.returncode == 2
  assert 'Traceback' not in missing.stderr
  last = missing.stderr.strip().splitlines()[-1]
  assert last.startswith("error: No input files match '") and 'DATA_DIR' in last
  # A failed start writes no config.gin, no mlperf.log, and leaves no lock.
  assert os.listdir(tmp_path / 'a') == []
  verbose = run(train_cmd(str(tmp_path / 'nowhere'), str(tmp_path / 'b'),
                          '--verbose'))
  assert verbose.returncode != 0 and 'Traceback' in verbose.stderr
  no_experiment = run([helpers.PYTHON, 'train.py',
                       f'--model_dir={tmp_path / "c"}'])
  assert no_experiment.returncode == 2
  assert 'gin/resnet_quickstart.gin' in no_experiment.stderr


# Slow (about 30 s: two workers compile, then the coordination service's
# heartbeat timeout): the one run of a lost peer through train.py.
@pytest.mark.slow
def test_a_stopped_worker_is_a_named_peer_loss_not_a_crash(quickstart_data,
                                                           tmp_path):
  """SIGSTOP one of two MultiWorkerMirrored workers: the other stops in one
  line naming the lost task, with exit code PEER_LOST (the launcher reruns
  it), and no traceback."""
  workers = [f'127.0.0.1:{helpers.free_port()}' for _ in range(2)]
  procs = []
  for i in range(2):
    env = helpers.worker_env(workers, i)
    procs.append(subprocess.Popen(
        train_cmd(quickstart_data, str(tmp_path / 'run'),
                  '--gin_file=gin/hardware/multi_worker.gin',
                  '--gin.TRAIN_STEPS=3000', '--gin.EVAL_EVERY_STEPS=3000',
                  '--gin.STEPS_PER_LOOP=2', '--gin.CHECKPOINT_EVERY_STEPS=0'),
        cwd=helpers.ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True))
  try:
    for line in procs[1].stdout:  # Past the compile: training steps.
      if line.startswith('step 10/'):
        break
    procs[1].send_signal(signal.SIGSTOP)
    _, err = procs[0].communicate(timeout=helpers.HANG_SECONDS)
  finally:
    procs[1].send_signal(signal.SIGCONT)
    procs[1].kill()
    procs[1].communicate()
  assert procs[0].returncode == exit_codes.PEER_LOST, err[-3000:]
  assert 'Traceback' not in err
  assert err.strip().splitlines()[-1].startswith(
      'error: a peer was lost: /job:worker/replica:0/task:1 stopped sending '
      'heartbeats')
  # It says what a rerun resumes from (here: no checkpoint yet).
  assert err.strip().splitlines()[-1].endswith(
      'Rerun the job: it starts over (no checkpoint was written yet) '
      '(exit 69).')
