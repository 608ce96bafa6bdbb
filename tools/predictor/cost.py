"""What one replica's train step and eval step cost, as XLA counts them.

The program is the suite's own: the task, model and optimizer a gin config
builds, the runtime's replica step (training/step.py: forward, loss,
gradients, optimizer update; the eval step likewise) at a per-replica batch,
compiled alone with `jit_compile=True` under the default strategy, so that
its all-reduces are identities (the collectives are modelled on the slice's
torus instead: tools/predictor/collectives.py). TensorFlow writes the HLO module;
XLA's HloCostAnalysis counts it in a process of its own
(tools/predictor/xla_cost.py). The module is the one XLA gets before its
target-specific passes, the same for a TPU as here.

XLA's CPU compiler also fuses the module, and the kernels its entry
computation then launches are counted (tools/predictor/xla_cost.py): a step's
cost that does not grow with its batch (tools/predictor/model.py).

A step's FLOPs are linear in the batch plus the optimizer's update, which is
not: `ProgramCost` holds counts at two or more batches and interpolates
(tests/tools/test_predict.py checks a third against XLA).

The input is synthetic (each pipeline's `synthetic` mode: the shapes and
dtypes of the real batches, no files), so a config is costed without its
data.

XLA counts a loop's body once (and a conditional's larger branch). A
train step whose graph is one of several static shapes (GNMT's length
buckets, each a branch of a switch) says so by implementing `ShapedTrain`:
each shape is counted alone and the counts are weighted by the shapes'
shares of the steps (the model is linear in them: tools/predictor/model.py);
its time loops are written out for the count (COUNTED_PROGRAM). An eval that runs a search loop (the
Transformer's beam search) says so by implementing `SearchingEval`: its
loop's step is counted on its own and added for every further iteration
the loop may run (an upper bound: a TPU's fixed-shape search stops when
every sentence of the batch has). Loops of a few cheap iterations (SSD's
NMS) are left counted once.
"""

import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
from typing import Protocol, runtime_checkable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Placeholders for the macros a pod config requires that do not change the
# program (its data and checkpoints); a --gin_param of the user's wins.
PLACEHOLDERS = ("DATA_DIR = 'synthetic'", "INIT_CHECKPOINT = ''",
                "BACKBONE_CHECKPOINT = ''")
# What the count binds over a config, before the user's --gin_params: - the
# program a TPU runs where a config leaves the choice to the device
# (models/transformer/beam_search.needs_fixed_shapes picks fixed shapes on a
# TPU, and so does Mask R-CNN's ROI_SHAPES 'auto'); - DLRM's tables as the
# synthetic data's vocabularies (Criteo's, capped: input_pipeline/clicks.py says
# why the count is the same) instead of a pod config's 188 million rows, which
# do not fit this host; - whole images on one replica: spatial partitions divide
# a replica's count in the model (tools/predictor/configs.py model_ways), as a
# mesh's model axis; - GNMT's time loops written out (XLA counts a while
# loop's body once; models/gnmt/lstm.py).
COUNTED_PROGRAM = ("DECODE_SHAPES = 'fixed'", "ROI_SHAPES = 'fixed'",
                   'TABLE_SIZES = ()', 'SPATIAL_PARTITIONS = 1',
                   "TIME_LOOPS = 'unrolled'")


@runtime_checkable
class SearchingEval(Protocol):
  """A task whose eval step runs a search loop."""

  def eval_search_step(self, model, batch) -> tuple:
    """(step function, its arguments, the loop's most iterations) at the
    shapes of this eval batch."""


@runtime_checkable
class ShapedTrain(Protocol):
  """Task data whose train steps each run one of several static shapes."""

  def train_shares(self) -> list[float]:
    """Each shape's share of the training steps."""

  def shape_only(self, index: int) -> None:
    """Synthetic batches of shape `index` alone from now on, and the task's
    step traced for it alone."""


@dataclasses.dataclass(frozen=True)
class StepCost:
  """XLA's count of one replica's step at one per-replica batch."""
  batch: int
  flops: float
  bytes_accessed: float
  transcendentals: float
  # Launched once fused; 0 where not counted (before kernels were, or at
  # a batch below the largest: ProgramCost reads the largest batch's).
  kernels: float = 0.0


@dataclasses.dataclass
class ProgramCost:
  """A config's train and eval steps, at two or more batches each.

  Attributes:
    config: the gin files and bindings, as given.
    train: XLA's counts of the train step, by batch.
    eval: the eval step's.
    parameters: trainable parameters of the program counted (DLRM's with
      its tables capped: input_pipeline/clicks.py).
    dense_parameters: of those, the ones whose gradients are all-reduced
      (the embedding tables EMBEDDING_SHARDING splits excluded).
    bn_layers: batch norms that train on their batch's statistics (a
      trained gamma beside a moving mean): each sums its statistics over
      the config's group of replicas (`layer_counts`).
    window_convs: convolutions whose window spans more than one row,
      trained or frozen: each exchanges a halo with its neighbours when an image
      is split over cores (models/common/spatial.py), forward and (an upper
      bound: not below the first trained layer) backward.
  """
  config: dict
  train: list
  eval: list
  parameters: int
  dense_parameters: int
  bn_layers: int
  window_convs: int

  @staticmethod
  def _at(points: list, batch: float, field: str) -> float:
    pts = sorted(points, key=lambda p: p.batch)
    if len(pts) == 1:
      return getattr(pts[0], field) * batch / pts[0].batch
    # The line through the nearest two points (extended beyond them).
    lo, hi = (pts[0], pts[1]) if batch <= pts[1].batch else (pts[-2], pts[-1])
    slope = (getattr(hi, field) - getattr(lo, field)) / (hi.batch - lo.batch)
    return getattr(lo, field) + slope * (batch - lo.batch)

  def train_flops(self, batch: float) -> float:
    return self._at(self.train, batch, 'flops')

  def train_bytes(self, batch: float) -> float:
    return self._at(self.train, batch, 'bytes_accessed')

  def eval_flops(self, batch: float) -> float:
    return self._at(self.eval, batch, 'flops')

  @staticmethod
  def _kernels(points: list) -> float:
    # Nearly the same at any batch (BERT's step: 5,474 at 1, 5,482 at 2):
    # the largest batch's.
    return max(points, key=lambda p: p.batch).kernels

  def train_kernels(self) -> float:
    return self._kernels(self.train)

  def eval_kernels(self) -> float:
    return self._kernels(self.eval)

  def to_json(self) -> dict:
    out = dataclasses.asdict(self)
    return out

  @classmethod
  def from_json(cls, data: dict) -> 'ProgramCost':
    return cls(config=data['config'],
               train=[StepCost(**p) for p in data['train']],
               eval=[StepCost(**p) for p in data['eval']],
               parameters=data['parameters'],
               dense_parameters=data['dense_parameters'],
               bn_layers=data['bn_layers'],
               window_convs=data['window_convs'])


# The CPU compile that counts the kernels, without LLVM's optimizations
# (the HLO passes that fuse are the same, so is the count: GNMT's 18-id
# step 4,260 kernels either way, compiled in 59 s instead of 144 s).
UNOPTIMIZED_BACKEND = '--xla_backend_optimization_level=0'


def xla_cost(hlo_text: str, kernels: bool = True) -> dict:
  """XLA's HloCostAnalysis of a module (in a process of its own), and the
  kernels its compile launches (`kernels`: the compile is most of the
  time)."""
  with tempfile.NamedTemporaryFile('w', suffix='.hlo', delete=False) as f:
    f.write(hlo_text)
    path = f.name
  try:
    result = subprocess.run(
        [sys.executable, '-m', 'tools.predictor.xla_cost',
         *([] if kernels else ['--flops_only']), path], cwd=ROOT,
        capture_output=True, text=True, check=False, timeout=1800,
        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2',
                 XLA_FLAGS=' '.join(filter(None, (
                     os.environ.get('XLA_FLAGS'), UNOPTIMIZED_BACKEND)))))
  finally:
    os.unlink(path)
  lines = [l for l in result.stdout.splitlines() if l.startswith('{')]
  if result.returncode or not lines:
    message = (result.stderr.strip().splitlines() or ['no output'])[-1]
    raise RuntimeError(f'XLA\'s cost analysis failed: {message}')
  return json.loads(lines[-1])


def hlo_text(fn, args: tuple) -> str:
  """The HLO module TensorFlow hands XLA for `fn(*args)` (jit_compile)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tensorflow.python.framework import config  # pylint: disable=import-outside-toplevel
  # Op determinism (a deterministic run earlier in this process) refuses
  # XLA lowerings it has no deterministic kernel for (MaxPoolGrad) and
  # unseeded graphs; the count is the same either way.
  deterministic = config.is_op_determinism_enabled()
  config.disable_op_determinism()
  try:
    return tf.function(fn, jit_compile=True).experimental_get_compiler_ir(
        *args)(stage='hlo')
  finally:
    if deterministic:
      config.enable_op_determinism()


def _step_cost(fn, args: tuple, batch: int, kernels: bool = True) -> StepCost:
  hlo = hlo_text(fn, args)
  gc.collect()  # The traced graph (GNMT's unrolled ones: gigabytes).
  cost = xla_cost(hlo, kernels)
  return StepCost(batch=batch, flops=cost['flops'],
                  bytes_accessed=cost['bytes accessed'],
                  transcendentals=cost['transcendentals'],
                  kernels=cost.get('kernels', 0.0))


def all_reduced(variables, options) -> list:
  """The variables whose gradients the config's plan all-reduces: all but
  the embedding tables EMBEDDING_SHARDING splits (each shard is updated by
  its owner from its own gradient: distribution/embedding_tables.py)."""
  from distribution import embedding_tables  # pylint: disable=import-outside-toplevel
  if options.embedding_sharding == 'none':
    return list(variables)
  tables = {embedding_tables.table_index(v.name): v for v in variables}
  tables.pop(None, None)
  order = sorted(tables)
  split = {id(tables[order[i]]) for i in embedding_tables.sharded_indices(
      [int(tables[t].shape[0]) for t in order], options.sharded_tables)}
  return [v for v in variables if id(v) not in split]


def layer_counts(model) -> dict:
  """{'bn_layers': ..., 'window_convs': ...} of a built model (ProgramCost
  says what they count), from its variables' names and shapes: a batch
  norm is `<name>/moving_mean` with a trainable `<name>/gamma`, a
  convolution a 4-D kernel [rows, columns, in, out]."""
  trainable = {v.name.split(':')[0] for v in model.trainable_variables}
  norms = [v.name.split(':')[0].removesuffix('/moving_mean')
           for v in model.variables
           if v.name.split(':')[0].endswith('/moving_mean')]
  return {'bn_layers': sum(f'{n}/gamma' in trainable for n in norms),
          'window_convs': sum(len(v.shape) == 4 and v.shape[0] > 1
                              for v in model.variables)}


def _eval_cost(task, model, replica_eval, element, batch: int,
               kernels: bool) -> StepCost:
  """The eval step's count, its search loop's every iteration counted."""
  whole = _step_cost(replica_eval, (element,), batch, kernels)
  if not isinstance(task, SearchingEval):
    return whole
  step_fn, args, iterations = task.eval_search_step(model, element)
  step = _step_cost(step_fn, args, batch, kernels)
  more = iterations - 1
  return StepCost(batch=batch, flops=whole.flops + more * step.flops,
                  bytes_accessed=whole.bytes_accessed +
                  more * step.bytes_accessed,
                  transcendentals=whole.transcendentals +
                  more * step.transcendentals,
                  kernels=whole.kernels + more * step.kernels)


def _weighted(costs: list[StepCost], shares: list[float]) -> StepCost:
  """The mean step of `costs` taken in proportions `shares`."""
  fields = ('flops', 'bytes_accessed', 'transcendentals', 'kernels')
  return StepCost(batch=costs[0].batch, **{
      f: sum(w * getattr(c, f) for c, w in zip(costs, shares))
      for f in fields})


def _train_cost(data, replica_step, context, batch: int, kernels: bool,
                progress) -> StepCost:
  """The train step's count at `batch`, each of a ShapedTrain's shapes
  counted alone and weighted by its share."""
  def once(shape=''):
    element = next(iter(data.train_dataset(context, global_batch_size=batch)))
    cost = _step_cost(replica_step, (element,), batch, kernels)
    progress(f'train step{shape} at batch {batch}: {cost.flops / 1e9:,.1f} '
             f'GFLOP' + (f', {cost.kernels:,.0f} kernels' if kernels else ''))
    return cost

  if not isinstance(data, ShapedTrain):
    return once()
  shares = data.train_shares()
  costs, weights = [], []
  for index, share in enumerate(shares):
    if share > 0:
      data.shape_only(index)
      costs.append(once(f' of shape {index + 1}/{len(shares)}'))
      weights.append(share / sum(shares))
  return _weighted(costs, weights)


def _synthetic(data):
  if not hasattr(data, 'synthetic'):
    raise ValueError(
        f'{type(data).__name__} has no synthetic mode: the time-to-train '
        'model costs a config from synthetic batches of its shapes (add one '
        'to the pipeline, as input_pipeline/imagenet.py has).')
  data.synthetic = True


def measure(gin_files: list[str], bindings: list[str],
            batches: tuple[int, ...], progress=None) -> ProgramCost:
  """XLA's counts of a config's train and eval steps at `batches`
  (per-replica batch sizes); `progress(line)` after each step counted
  (GNMT's take minutes each)."""
  from core import startup  # pylint: disable=import-outside-toplevel
  startup.import_tensorflow()
  import gin  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  from core import config as gin_config  # pylint: disable=import-outside-toplevel
  from distribution import plan  # pylint: disable=import-outside-toplevel
  from training import step as step_lib  # pylint: disable=import-outside-toplevel

  gin.clear_config()
  gin_config.parse(list(gin_files),
                   list(PLACEHOLDERS + COUNTED_PROGRAM) + list(bindings),
                   unread_macros='known')
  try:
    task = gin_config.configured_task()
    _synthetic(task.data)
    optimizer = gin.query_parameter(
        'train.train.optimizer').scoped_configurable_fn()
    schedule_cls = gin.query_parameter(
        'train.train.learning_rate').scoped_configurable_fn
    model = task.build_model()
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    lr = schedule_cls(steps_per_epoch=100, total_steps=10000)
    strategy = tf.distribute.get_strategy()
    options = gin.get_configurable(plan.PlanOptions)()
    # The config's clipping and all-reduce precision are in the program
    # (the sums themselves are identities here).
    train_loop = step_lib.make_train_loop(
        strategy=strategy, model=model, optimizer=optimizer,
        learning_rate=lr, task=task, step=step, gradients=options.gradients)
    eval_loop = step_lib.make_eval_loop(strategy=strategy, model=model,
                                        task=task, local_outputs=True)
    context = tf.distribute.InputContext()
    train, evals = [], []
    progress = progress or (lambda line: None)
    for batch in batches:
      # Kernels at the largest batch only (ProgramCost reads no other).
      kernels = batch == max(batches)
      train.append(_train_cost(task.data, train_loop.replica_step, context,
                               batch, kernels, progress))
      element = next(iter(task.data.eval_dataset(
          context, global_batch_size=batch, steps=1, cache=False)))
      evals.append(_eval_cost(task, model, eval_loop.replica_eval, element,
                              batch, kernels))
      progress(f'eval step at batch {batch}: '
               f'{evals[-1].flops / 1e9:,.1f} GFLOP')
    parameters = sum(int(v.shape.num_elements())
                     for v in model.trainable_variables)
    dense = sum(int(v.shape.num_elements())
                for v in all_reduced(model.trainable_variables, options))
    return ProgramCost(config={'gin_files': list(gin_files),
                               'bindings': list(bindings)},
                       train=train, eval=evals, parameters=parameters,
                       dense_parameters=dense, **layer_counts(model))
  finally:
    gin.clear_config()
