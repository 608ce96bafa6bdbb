"""What a gin config asks of the machine, for the time-to-train model."""

import math

from tools.predictor import cost as cost_lib
from tools.predictor import minigo
from tools.predictor import model

# Eval set sizes (eval_samples in Google's v0.7 logs, the MLPerf eval sets).
EVAL_SAMPLES = {'resnet': 50000, 'bert': 10000, 'transformer': 3003,
                'ssd': 5000, 'maskrcnn': 5000, 'dlrm': 89137318,
                'gnmt': 3003}


class SelfPlayConfig(ValueError):
  """A config that trains on data its own model makes between generations
  (MiniGo): the step model cannot price it; tools/predictor/minigo.py
  prices it from measured rates with `macros`, the config's values."""

  def __init__(self, message: str, macros: dict):
    super().__init__(message)
    self.macros = macros


def read(gin_files: list[str], bindings: list[str]):
  """(model.Run, the hardware file's ACCELERATOR or '') of a config."""
  import gin  # pylint: disable=import-outside-toplevel

  from core import config as gin_config  # pylint: disable=import-outside-toplevel
  from distribution import gradients as gradients_lib  # pylint: disable=import-outside-toplevel
  from distribution import mesh  # pylint: disable=import-outside-toplevel
  from distribution import plan  # pylint: disable=import-outside-toplevel
  from distribution import strategy  # pylint: disable=import-outside-toplevel
  from training import controller  # pylint: disable=import-outside-toplevel

  gin.clear_config()
  try:
    gin_config.parse(list(gin_files),
                     list(cost_lib.PLACEHOLDERS) + list(bindings),
                     unread_macros='known')
    task = gin_config.configured_task()
    schedule = gin.get_configurable(controller.RunSchedule)()
    options = gin.get_configurable(plan.PlanOptions)()
    gradients = gin.get_configurable(gradients_lib.GradientOptions)()
    shape = tuple(gin.get_configurable(mesh.MeshConfig)().shape)
    hardware = gin.get_configurable(strategy.StrategyConfig)()
    bn_group = _macro(gin, 'BN_GROUP_SIZE', 1)
    if callable(getattr(task.data, 'produce', None)):
      raise SelfPlayConfig(
          f'{gin_files[0]} trains on data its own model makes between '
          'generations (MiniGo\'s self-play): the time-to-train model costs '
          'training steps on a fixed data set and cannot predict it; '
          'tools.predict prices its generations from measured rates '
          'instead (docs/predict.md).',
          {name: _macro(gin, name, None) for name in minigo.MACROS})
  finally:
    gin.clear_config()
  benchmark = task.mlperf_benchmark
  if benchmark not in EVAL_SAMPLES:
    raise ValueError(f'The time-to-train model has no eval set size for '
                     f'{benchmark!r} (tools/predictor/configs.py).')
  model_ways = math.prod(shape[1:]) if shape else 1
  model_ways *= options.spatial_partitions
  run = model.Run(
      benchmark=benchmark, global_batch=schedule.global_batch_size,
      eval_batch=schedule.eval_batch,
      eval_every_steps=schedule.eval_every_steps,
      eval_samples=EVAL_SAMPLES[benchmark], model_ways=model_ways,
      allreduce_bytes=2 if gradients.allreduce_dtype == 'bfloat16' else 4,
      weight_update_sharding=options.weight_update_sharding,
      spatial_partitions=options.spatial_partitions,
      bn_span=bn_span(bn_group, options.spatial_partitions,
                      schedule.global_batch_size, model_ways,
                      hardware.accelerator))
  return run, hardware.accelerator or ''


def _macro(gin, name: str, default):
  """A gin macro's value, `default` where the config binds none."""
  try:
    return gin.query_parameter(f'%{name}')
  except ValueError:
    return default


def bn_span(group: int, spatial_partitions: int, global_batch: int,
            model_ways: int, accelerator: str | None) -> float:
  """The images a batch norm's statistics span (MLPerf's model_bn_span),
  from BN_GROUP_SIZE (replicas: 0 all, 1 each its own; a multiple of the
  spatial partitions) on the config's own slice: 0 for statistics of each
  replica's batch alone, math.inf for the whole global batch. A slice's
  row keeps it (the group is a hyper-parameter of the recipe: Google's
  v0.7 logs hold model_bn_span at 64 from 16 chips to 4,096)."""
  if group == 0:
    return math.inf
  if group == 1:
    return 0.0
  if not accelerator:
    raise ValueError(
        f'BN_GROUP_SIZE = {group} spans {group} replicas of a slice the '
        'config does not name (no ACCELERATOR): the time-to-train model '
        'cannot tell how many images that is; bind ACCELERATOR.')
  data_replicas = model.machine(accelerator).replicas // model_ways
  return group / spatial_partitions * global_batch / data_replicas
