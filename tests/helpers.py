"""Helpers to run train() through gin, as train.py does, inside a test."""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import gin
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
# How long a test's child process may take before it counts as hung: a
# guard against hangs, not a judgement of speed. Two-process
# MultiWorkerMirrored runs took over 300 s on a 2-core machine running two
# suites at once (2026-12-03).
HANG_SECONDS = 1200


# The runtime tests' ResNet: the quickstart's at depth 10 (one basic block a
# stage), which traces and compiles in about half the time of depth 18.
SMALL_RESNET_DEPTH = 10
SMALL_RESNET = f'DEPTH={SMALL_RESNET_DEPTH}'


def required_checkpoints(gin_file: str) -> list[str]:
  """Bindings of '' for the checkpoint macros `gin_file` requires (only
  those: a macro nothing reads is refused)."""
  with open(os.path.join(ROOT, gin_file)) as f:
    text = f.read()
  names = re.findall(r'^(\w+_CHECKPOINT) = %gin.REQUIRED', text, re.M)
  bindings = [f"{name} = ''" for name in names]
  for included in re.findall(r"^include '(gin/[\w./]+)'", text, re.M):
    bindings += required_checkpoints(included)
  return bindings


def quick_bindings(data_dir: str, model_dir: str, **overrides) -> list[str]:
  """Bindings for a short deterministic quickstart run (SMALL_RESNET)."""
  bindings = {
      'DATA_DIR': repr(data_dir),
      'DEPTH': SMALL_RESNET_DEPTH,
      'train.train.model_dir': repr(model_dir),
      'DETERMINISTIC': True,
      'STEPS_PER_LOOP': 2,
      'EVAL_EVERY_STEPS': 4,
      'TRAIN_STEPS': 4,
      'CHECKPOINT_EVERY_STEPS': 0,
      'GLOBAL_BATCH_SIZE': 24,
      'EVAL_BATCH_SIZE': 48,
      'training.schedules.PolynomialWarmup.warmup_epochs': 0.05,  # 3 steps of 60.
  }
  bindings.update({k: v if isinstance(v, str) else repr(v)
                   for k, v in overrides.items()})
  return [f'{k} = {v}' for k, v in bindings.items()]


def sums_bindings(data_dir: str, model_dir: str, **overrides) -> list[str]:
  """Bindings for gin/bert_quickstart.gin on the `sums_data` corpus."""
  bindings = {
      'DATA_DIR': repr(data_dir),
      'VOCAB_FILE': repr(os.path.join(data_dir, 'vocab.txt')),
      'MAX_SEQ_LENGTH': 32, 'MAX_PREDICTIONS': 5, 'DROPOUT': 0.0,
      'TARGET_ACCURACY': 0.75, 'NUM_EVAL_SAMPLES': 100,
      'train.train.model_dir': repr(model_dir),
      'GLOBAL_BATCH_SIZE': 32,
      'EVAL_BATCH_SIZE': 30,
      'TRAIN_STEPS': 600, 'STEPS_PER_LOOP': 20,
      'EVAL_EVERY_STEPS': 40, 'FIRST_EVAL_STEP': 80,
      'CHECKPOINT_EVERY_STEPS': 0,
      'training.schedules.WarmupPolynomialDecay.base': 0.01,
      'training.schedules.WarmupPolynomialDecay.warmup_steps': 20,
  }
  bindings.update(overrides)
  return [f'{k} = {v}' for k, v in bindings.items()]


def run_gin(files: list[str], bindings: list[str]):
  """Parses gin afresh and calls the train() root; returns its Result."""
  import train
  gin.clear_config()
  gin.add_config_file_search_path(ROOT)
  gin.parse_config_files_and_bindings(
      [os.path.join(ROOT, f) for f in files], bindings)
  try:
    return gin.get_configurable(train.train)()
  finally:
    gin.clear_config()


def run_quick(data_dir: str, model_dir: str, extra_files=(), **overrides):
  return run_gin(['gin/resnet_quickstart.gin', *extra_files],
                 quick_bindings(data_dir, model_dir, **overrides))


def weights(model) -> dict:
  return {k: v.numpy() for k, v in model.params.items()}


def checkpoint_tensors(model_dir: str) -> dict:
  """Every saved tensor of the run's latest checkpoint, by name (the
  object graph and save counter left out)."""
  import tensorflow as tf
  reader = tf.train.load_checkpoint(os.path.join(model_dir, 'checkpoints'))
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if not k.startswith(('_CHECKPOINTABLE', 'save_counter'))}


def export(gin_file: str, data_dir: str, model_dir: str, export_dir: str,
           params=()) -> str:
  """tools.export_savedmodel of a run of a gin file of the repository;
  gin cleared. Returns export_dir."""
  from tools import export_savedmodel
  try:
    export_savedmodel.export(
        gin_files=[os.path.join(ROOT, gin_file)],
        gin_params=[f'DATA_DIR = {data_dir!r}', *params],
        checkpoint_dir=model_dir, export_dir=export_dir)
  finally:
    gin.clear_config()
  return export_dir


def inference_task(gin_file: str, data_dir: str, params=()):
  """inference.run.load_task for a gin file of the repository; gin cleared."""
  from inference import run as run_lib
  try:
    return run_lib.load_task([os.path.join(ROOT, gin_file)], list(params),
                             data_dir)
  finally:
    gin.clear_config()


def run_inference(*args: str):
  """`python -m inference.run ARGS` from the repository root."""
  return subprocess.run(
      [PYTHON, '-m', 'inference.run', *args], capture_output=True, text=True,
      cwd=ROOT, timeout=HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2'))


def quality_gate(done, percent: int) -> tuple[float, float, float, str]:
  """(served quality, its % of FP32, FP32 quality, verdict) from the
  quality-gate line inference.run prints in accuracy mode with --tflite
  and --saved_model; fails showing the output when the line is missing."""
  gate = re.search(r'quality gate: ([\d.]+) is ([\d.]+)% of the FP32 '
                   rf'SavedModel\'s ([\d.]+) \(gate {percent}%\): (\w+)',
                   done.stdout)
  assert gate, done.stdout[-3000:] + done.stderr[-2000:]
  quality, ratio, reference, verdict = gate.groups()
  return float(quality), float(ratio), float(reference), verdict


def loadgen_effective_settings(report_dir: str) -> dict:
  """The effective_* settings of a LoadGen run's mlperf_log_detail.txt."""
  values = {}
  with open(os.path.join(report_dir, 'mlperf_log_detail.txt')) as f:
    for line in f:
      match = re.search(r'"key": "effective_(\w+)", "value": ([^,]+),', line)
      if match:
        values[match.group(1)] = json.loads(match.group(2))
  return values


def run_checker(log_path: str, ruleset: str, cwd: str):
  return subprocess.run(
      [PYTHON, '-m', 'mlperf_logging.compliance_checker', '--usage',
       'training', '--ruleset', ruleset, '--log_output',
       os.path.join(cwd, f'checker_{ruleset}.log'), log_path],
      capture_output=True, text=True, cwd=cwd, timeout=120)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def worker_env(workers: list[str], index: int) -> dict:
  """The environment of worker `index` of a MultiWorkerMirrored cluster on
  `workers` (addresses): TF_CONFIG, quiet logs, the repository on the
  path."""
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=ROOT,
              TF_CONFIG=json.dumps({'cluster': {'worker': workers},
                                    'task': {'type': 'worker',
                                             'index': index}}))


def start_worker_processes(module_and_args: list[str], out_dir,
                           num_workers: int = 2) -> list:
  """Starts `python -m MODULE <out_dir>/w<i>.npz ARGS...` as `num_workers`
  MultiWorkerMirrored workers on 127.0.0.1 (as modules: run as a script,
  tests/ would come first on the path and tests/training would shadow the
  training package); returns the Popen objects, stdout piped as text."""
  workers = [f'127.0.0.1:{free_port()}' for _ in range(num_workers)]
  module, *args = module_and_args
  procs = []
  for i in range(num_workers):
    env = worker_env(workers, i)
    procs.append(subprocess.Popen(
        [PYTHON, '-m', module, os.path.join(str(out_dir), f'w{i}.npz'), *args],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True))
  return procs


# TensorFlow's words when a worker's port was taken between free_port() and
# the worker's start (any process's outgoing connection may take it).
PORT_TAKEN = 'Could not start gRPC server'
CLUSTER_ATTEMPTS = 3


def wait_workers(procs, ends=(0,)) -> list[str]:
  """Each worker's output once all have ended. When one fails (an exit
  code not in `ends`), the rest (which would wait for it until the hang
  guard) are killed at once."""
  outputs = [[] for _ in procs]
  readers = [threading.Thread(target=out.extend, args=(p.stdout,),
                              daemon=True) for p, out in zip(procs, outputs)]
  for reader in readers:
    reader.start()
  deadline = time.monotonic() + HANG_SECONDS  # A hang guard, not a timing.
  while any(p.poll() is None for p in procs):
    if (any(p.poll() not in (None, *ends) for p in procs) or
        time.monotonic() > deadline):
      for p in procs:
        if p.poll() is None:
          p.kill()
    time.sleep(0.2)
  for reader in readers:
    reader.join()
  return [''.join(out) for out in outputs]


def run_cluster(start, ends=(0,)) -> tuple[list, list[str]]:
  """`start()` launches a cluster's workers on fresh ports and returns
  them (Popen, stdout piped as text); this waits for them (wait_workers,
  `ends`: the exit codes of a run that ended as it may) and starts the
  cluster again, up to CLUSTER_ATTEMPTS times, while a worker could not
  bind its port. Returns (processes, outputs)."""
  for _ in range(CLUSTER_ATTEMPTS):
    procs = start()
    outputs = wait_workers(procs, ends)
    if not any(PORT_TAKEN in out for out in outputs):
      break
  return procs, outputs


def run_worker_processes(module_and_args: list[str], out_dir,
                         num_workers: int = 2) -> None:
  """start_worker_processes, then waits (run_cluster); every worker must
  exit 0."""
  procs, outputs = run_cluster(lambda: start_worker_processes(
      module_and_args, out_dir, num_workers))
  for p, out in zip(procs, outputs):
    assert p.returncode == 0, out[-3000:]


def validation_logits(model, data_dir: str, image_size: int = 32):
  """(logits, labels 0..9) of every validation record, one device, no
  padding: the plain loop that in-loop evaluation is checked against."""
  import tensorflow as tf
  from input_pipeline import image_preprocessing
  from input_pipeline import imagenet
  logits, labels = [], []
  for raw in tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(
      os.path.join(data_dir, 'validation-*')))).batch(1000):
    parsed = tf.io.parse_example(raw, imagenet.FEATURES)
    images = tf.map_fn(
        lambda b: image_preprocessing.eval_image(b, image_size=image_size),
        parsed[imagenet.IMAGE_KEY], fn_output_signature=tf.float32)
    out, _ = model(image_preprocessing.normalize(images), training=False)
    logits.append(out.numpy())
    labels.append(parsed[imagenet.LABEL_KEY].numpy() - 1)
  return np.concatenate(logits), np.concatenate(labels)


def refused_whole(done, dest, *fragments) -> None:
  """A tool's refusal of bad input that writes a package (tools.package):
  exit 2, one `error:` line holding `fragments`, no `dest` and no staging
  folder left beside it."""
  assert done.returncode == 2, done.stdout + done.stderr
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), done.stderr
  for fragment in fragments:
    assert fragment in lines[0], lines[0]
  assert not os.path.exists(dest)
  assert not [p for p in os.listdir(os.path.dirname(dest))
              if p.startswith('.package-')]
