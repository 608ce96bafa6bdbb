"""Helpers to run train() through gin, as train.py does, inside a test."""

import os
import subprocess
import sys

import gin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


def quick_bindings(data_dir: str, model_dir: str, **overrides) -> list[str]:
  """Bindings for a short deterministic quickstart run."""
  bindings = {
      'DATA_DIR': repr(data_dir),
      'train.train.model_dir': repr(model_dir),
      'DETERMINISTIC': True,
      'train.train.steps_per_loop': 2,
      'train.train.eval_every_steps': 4,
      'train.train.train_steps': 4,
      'train.train.checkpoint_every_steps': 0,
      'train.train.global_batch_size': 24,
      'train.train.eval_batch_size': 48,
      'training.optimizers.Lars.warmup_epochs': 0.05,  # 3 steps of 60.
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
      'train.train.global_batch_size': 32,
      'train.train.eval_batch_size': 30,
      'train.train.train_steps': 600, 'train.train.steps_per_loop': 20,
      'train.train.eval_every_steps': 40, 'train.train.first_eval_step': 80,
      'train.train.checkpoint_every_steps': 0,
      'training.optimizers.Lamb.base_learning_rate': 0.01,
      'training.optimizers.Lamb.warmup_steps': 20,
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
      cwd=ROOT, timeout=300,
      env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2'))


def run_checker(log_path: str, ruleset: str, cwd: str):
  return subprocess.run(
      [PYTHON, '-m', 'mlperf_logging.compliance_checker', '--usage',
       'training', '--ruleset', ruleset, '--log_output',
       os.path.join(cwd, f'checker_{ruleset}.log'), log_path],
      capture_output=True, text=True, cwd=cwd, timeout=120)
