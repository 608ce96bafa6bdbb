"""Every experiment gin file: parses, exposes the common macros, refers only
to files in this repository."""

import glob
import os
import re

import gin
import pytest

from core import config as gin_config
from tests import helpers

EXPERIMENTS = sorted(os.path.relpath(p, helpers.ROOT) for p in glob.glob(
    os.path.join(helpers.ROOT, 'gin', '*.gin')) if not p.endswith('run.gin'))
OVERRIDES = {'TRAIN_STEPS': 100, 'GLOBAL_BATCH_SIZE': 48,
             'STEPS_PER_LOOP': 5, 'EVAL_EVERY_STEPS': 10,
             'CHECKPOINT_EVERY_STEPS': 20, 'STOP_AT_TARGET': False,
             'SEED': 7, 'DETERMINISTIC': True}


def test_there_are_experiments_for_both_models():
  assert {'gin/resnet_quickstart.gin', 'gin/resnet50_pod.gin',
          'gin/bert_quickstart.gin', 'gin/bert_pod.gin'} <= set(EXPERIMENTS)


@pytest.mark.parametrize('experiment', EXPERIMENTS)
def test_common_overrides_are_macros_on_every_experiment(experiment):
  bindings = [f'{k} = {v!r}' for k, v in OVERRIDES.items()] + [
      "DATA_DIR = '/nowhere'"] + helpers.required_checkpoints(experiment)
  gin.clear_config()
  try:
    gin_config.parse([experiment], bindings)
    schedule = gin.query_parameter(
        'train.train.schedule').scoped_configurable_fn()
    assert (schedule.train_steps, schedule.global_batch_size,
            schedule.steps_per_loop, schedule.eval_every_steps,
            schedule.checkpoint_every_steps, schedule.stop_at_target) == (
                100, 48, 5, 10, 20, False)
    assert gin.query_parameter(
        'training.run_options.RunOptions.deterministic') is not None
    macros = gin.config_str()
    for name in ('SEED = 7', 'DETERMINISTIC = True', "DATA_DIR = '/nowhere'"):
      assert name in macros, name
    assert gin.query_parameter('%TASK') is not None
  finally:
    gin.clear_config()


@pytest.mark.parametrize('path', sorted(glob.glob(
    os.path.join(helpers.ROOT, 'gin', '**', '*.gin'), recursive=True)))
def test_gin_files_refer_only_to_files_in_the_repository(path):
  text = open(path).read()
  outside = re.search(r'(^|[\s(])\.\./', text)
  assert not outside, f'{path} refers outside the repository'
  for name in re.findall(r"(?:include '|\b)((?:gin|tools|tests|docs)/"
                         r"[\w./]+\.(?:gin|py|md))", text):
    assert os.path.exists(os.path.join(helpers.ROOT, name)), (path, name)
