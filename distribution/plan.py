"""How a run spreads its steps over devices: one object the runtime asks.

A run holds one `Plan` and asks it everything that depends on how the work
is spread: the scope variables are made in, the data-parallel replica count
(what the batch is split by and what the MLPerf log counts), how a dataset
function becomes the devices' input, how a device loop runs, the worker's
id, whether it is the chief, the sum over workers, the optimizer's slot
factory, the checkpoint's view of the optimizer and who writes the files,
and whether eval outputs stay on their host. train.py never asks which
plan it holds (T5X's `Partitioner` draws the same line).

The plans:
- `DataParallel`: a tf.distribute strategy's replicas (any kind: one
  device, mirrored, multi-worker, TPU), each with the whole model and its
  share of the batch. Two compositions on top, each optional and checked
  in the constructor: weight-update sharding (each replica keeps and
  updates 1/N of the optimizer state: distribution/weight_update_sharding.py)
  and spatial partitioning (groups of consecutive replicas split each
  training image along its height: input_pipeline/spatial.py; a group is
  one data-parallel replica).
- `Mesh`: one DTensor program over a `batch x model` device mesh with
  sharding rules for tensor model parallelism (distribution/mesh.py); the
  strategy's replica options are refused there, with the reason.

`PlanOptions` (what gin builds: `train.train.plan`) makes the one a run's
options describe: MESH_SHAPE chooses the mesh; SPATIAL_PARTITIONS and
weight-update sharding compose with data parallelism. A new way of
spreading a step (sharded embedding tables next) is one more class with
these answers: docs/architecture.md, "Adding a parallelism plan".
"""

import contextlib
import dataclasses
import math
from typing import Callable, ContextManager, Protocol

import tensorflow as tf

from distribution import embedding_tables
from distribution import gradients as gradients_lib
from distribution import mesh as mesh_lib
from distribution import strategy as strategies
from distribution import tpu as tpu_lib
from distribution import tpu_slices
from distribution import weight_update_sharding as wus
from input_pipeline import spatial as spatial_input


class Plan(Protocol):
  """What the runtime asks about the way a run is spread over devices."""

  strategy: tf.distribute.Strategy  # The device loops run under it.
  chief: bool  # Writes logs and summaries, keeps the checkpoints' books.
  worker_id: int
  worker_sum: strategies.WorkerSum
  replicas: int  # Data-parallel replicas: the eval batch's split, MLPerf's.
  collective_save: bool  # Every worker writes each checkpoint with the rest.
  per_host_outputs: bool  # Eval outputs may stay on the host that made them.

  def scope(self) -> ContextManager:
    """Variables (model, step, optimizer slots) are made inside it."""

  def train_batch_replicas(self) -> int:
    """How many ways a training batch is split."""

  def make_slot(self) -> Callable | None:
    """`Optimizer.build(make_slot=...)`, or None for full slots."""

  def built(self, *, model, optimizer) -> None:
    """Called once the variables exist (checks that need them)."""

  def distribute(self, dataset_fn: Callable, global_batch_size: int, *,
                 training: bool):
    """The devices' input from `dataset_fn(input_context)`."""

  def on_devices(self, loop: Callable) -> Callable:
    """`loop(iterator, num_steps)` as the run calls it."""

  def train_loop_options(self) -> dict:
    """training.step.make_train_loop's keyword arguments for this plan."""

  def checkpoint_optimizer(self, optimizer, variables):
    """(What a checkpoint saves for the optimizer's slots, the call to make
    before each save or None)."""

  def checkpoint_model(self, model):
    """(What a checkpoint saves for the model: its unsharded layout, the
    call to make before each save or None)."""


class DataParallel:
  """A tf.distribute strategy's replicas; optionally weight-update sharded
  and spatially partitioned."""

  def __init__(self, *, distribution: strategies.StrategyConfig,
               gradients: gradients_lib.GradientOptions = (
                   gradients_lib.GradientOptions()),
               deterministic: bool = False,
               weight_update_sharding: bool = False,
               spatial_partitions: int = 1,
               spatial_feature: str | None = None,
               spatial_row_multiple: int | None = None,
               embedding_sharding: str = 'none', sharded_tables: int = 0):
    """Makes the strategy.

    Args:
      distribution: which strategy.
      gradients: how the replicas' gradients are clipped and summed.
      deterministic: reproducible ops (before the strategy exists).
      weight_update_sharding: each replica keeps 1/N of the optimizer state
        and updates 1/N of every weight.
      spatial_partitions: consecutive replicas that split each training
        image along its height (1: none).
      spatial_feature, spatial_row_multiple: the task's image feature and
        the multiple its slices' rows must be (input_pipeline/spatial.py).
      embedding_sharding: 'none', or 'mod' / 'div': the largest embedding
        tables' rows split over the replicas (distribution/
        embedding_tables.py).
      sharded_tables: how many of the largest tables ('0': all).

    Raises:
      ValueError: the replicas do not fit the slice or the partitions.
    """
    if deterministic:
      tf.config.experimental.enable_op_determinism()
    self.strategy = distribution.make()
    distribution.check_replicas(self.strategy.num_replicas_in_sync)
    self.chief = strategies.is_chief(self.strategy)
    self.worker_id = strategies.worker_id(self.strategy)
    self.worker_sum = strategies.make_worker_sum(self.strategy, tf.float64)
    self.replicas = self.strategy.num_replicas_in_sync
    self.collective_save = False
    self.per_host_outputs = True
    self.gradients = gradients
    self.weight_update_sharding = weight_update_sharding
    self.spatial_partitions = spatial_partitions
    self._spatial = (spatial_feature, spatial_row_multiple)
    self.tables = None
    if embedding_sharding != 'none':
      if weight_update_sharding:
        raise ValueError(
            'EMBEDDING_SHARDING and WEIGHT_UPDATE_SHARDING together are not '
            'supported yet: the sharded tables are updated on their owners, '
            'the rest by every replica. Set one of them.')
      self.tables = embedding_tables.ShardedTables(
          strategy=self.strategy, partition=embedding_sharding,
          sharded=sharded_tables)
    if spatial_partitions != 1:
      check_spatial_options(
          spatial_feature=spatial_feature,
          spatial_partitions=spatial_partitions, replicas=self.replicas,
          local_replicas=len(self.strategy.extended.worker_devices),
          deterministic=deterministic)

  @contextlib.contextmanager
  def scope(self):
    with self.strategy.scope():
      if self.tables is None:
        yield
      else:
        with embedding_tables.tables_scope(self.tables):
          yield

  def train_batch_replicas(self) -> int:
    # Each group of spatial partitions is one data-parallel replica.
    return self.replicas // self.spatial_partitions

  def make_slot(self):
    return (wus.make_slot_factory(self.replicas)
            if self.weight_update_sharding else None)

  def built(self, *, model, optimizer) -> None:
    del model
    if self.tables is None:
      return
    if not self.tables.rows:
      raise ValueError(
          'EMBEDDING_SHARDING is set, but the model made no embedding '
          'tables through the plan (distribution/embedding_tables.py): '
          'leave it \'none\' for this task.')
    if getattr(optimizer, 'slot_names', ()):
      raise ValueError(
          f'EMBEDDING_SHARDING updates a table\'s rows on their owner, with '
          f'no slots there yet; {type(optimizer).__name__} keeps '
          f'{optimizer.slot_names}. Use training.optimizers.Sgd (Google\'s '
          'v0.7 DLRM optimizer) or leave the tables whole.')
    self.tables.initialize()

  def distribute(self, dataset_fn, global_batch_size, *, training: bool):
    del global_batch_size  # The strategy's InputContext carries it.
    if training and self.spatial_partitions > 1:
      feature, row_multiple = self._spatial
      dataset_fn = spatial_input.partitioned_dataset_fn(
          dataset_fn, partitions=self.spatial_partitions, feature=feature,
          row_multiple=row_multiple)
    return self.strategy.distribute_datasets_from_function(dataset_fn)

  def on_devices(self, loop):
    return loop

  def train_loop_options(self) -> dict:
    return {'gradients': self.gradients,
            'weight_update_sharding': self.weight_update_sharding,
            'replicas_in_batch': 1,
            'local_variables': (self.tables.local_variables() if self.tables
                                else ())}

  def checkpoint_optimizer(self, optimizer, variables):
    if not self.weight_update_sharding:
      return optimizer.slots, None
    sharded = wus.ShardedSlots.for_optimizer(
        strategy=self.strategy, optimizer=optimizer, variables=variables)
    return sharded.views, sharded.gather

  def checkpoint_model(self, model):
    if self.tables is None:
      return model, None
    params, gather = self.tables.checkpoint_view(model.params)
    view = tf.Module()  # The model's tracked attributes, tables whole.
    view.params, view.state = params, model.state
    return view, gather


class Mesh:
  """One DTensor program over a `batch x model` mesh (no strategy
  replicas: the loops run under the default strategy)."""

  def __init__(self, *, mesh: mesh_lib.MeshConfig,
               distribution: strategies.StrategyConfig,
               gradients: gradients_lib.GradientOptions = (
                   gradients_lib.GradientOptions()),
               deterministic: bool = False, **replica_options):
    """Connects the mesh (over processes or a TPU slice: before any
    TensorFlow op).

    Args:
      mesh: shape, axis names and sharding rules.
      distribution: 'default' (one process), 'multi_worker' (TF_CONFIG's
        processes) or 'tpu' (one client a host, --tpu=local).
      gradients: clipping of the summed gradients (their sum is DTensor's:
        the all-reduce tuning options are refused).
      deterministic: must be True (every device reads its own copy of the
        input pipeline, in one order).
      **replica_options: the data-parallel options a mesh refuses
        (`check_mesh_options`: weight_update_sharding, spatial_partitions),
        checked here with their reasons.

    Raises:
      ValueError: an option the mesh cannot honour, named.
    """
    check_mesh_options(mesh_shape=tuple(mesh.shape),
                       distribution=distribution, gradients=gradients,
                       deterministic=deterministic, **replica_options)
    self.gradients = gradients
    if distribution.kind == 'tpu':
      tpu_lib.apply_flags(tuple(distribution.tpu_flags))
    self.partitioner = mesh.make(
        multi_client=distribution.kind == 'multi_worker',
        tpu=distribution.tpu if distribution.kind == 'tpu' else '')
    if deterministic:
      tf.config.experimental.enable_op_determinism()
    self.strategy = tf.distribute.get_strategy()
    self.chief = self.partitioner.chief
    self.worker_id = self.partitioner.client_id
    self.worker_sum = self.partitioner.worker_sum
    self.replicas = self.partitioner.data_replicas
    # DTensor's save is collective: every process names the same files.
    self.collective_save = self.partitioner.num_clients > 1
    # The mesh's processes' outputs are not split by host.
    self.per_host_outputs = False

  def scope(self):
    return self.partitioner.scope()

  def train_batch_replicas(self) -> int:
    return self.replicas

  def make_slot(self):
    return None  # A slot takes its variable's layout.

  def built(self, *, model, optimizer) -> None:
    del model, optimizer
    self.partitioner.check_rules_used()

  def distribute(self, dataset_fn, global_batch_size, *, training: bool):
    del training
    return self.partitioner.distribute_datasets_from_function(
        dataset_fn, global_batch_size)

  def on_devices(self, loop):
    return self.partitioner.wrap_loop(loop)

  def train_loop_options(self) -> dict:
    # One program replica holds every batch shard: each is normalised as
    # its own data-parallel replica.
    return {'gradients': self.gradients, 'weight_update_sharding': False,
            'replicas_in_batch': self.replicas}

  def checkpoint_optimizer(self, optimizer, variables):
    del variables
    return optimizer.slots, None

  def checkpoint_model(self, model):
    return model, None


@dataclasses.dataclass(frozen=True)
class PlanOptions:
  """How a run spreads its steps (gin: `train.train.plan`; macros
  MESH_SHAPE and SPATIAL_PARTITIONS in gin/run.gin).

  Attributes:
    distribution: which tf.distribute strategy (the hardware gin files).
    mesh: a `batch x model` mesh with sharding rules (a shape selects the
      `Mesh` plan; it replaces the strategy's replicas).
    gradients: how gradients are clipped and summed over the replicas.
    weight_update_sharding: each replica keeps 1/N of the optimizer state
      and updates 1/N of every weight; checkpoints keep the unsharded
      layout either way.
    spatial_partitions: split each training image along its height over
      this many consecutive replicas (the task's `spatial_feature`; the
      model must be built for it). Evaluation stays on whole images.
    embedding_sharding: 'mod' or 'div': each of the largest embedding
      tables' rows split over the replicas, looked up on their owners and
      updated there (distribution/embedding_tables.py); 'none': whole
      tables on every replica. Checkpoints keep the tables whole.
    sharded_tables: how many of the largest tables are sharded (0: all;
      Google's v0.7 DLRM: 13 of 26).
  """
  distribution: strategies.StrategyConfig = strategies.StrategyConfig()
  mesh: mesh_lib.MeshConfig = mesh_lib.MeshConfig()
  gradients: gradients_lib.GradientOptions = gradients_lib.GradientOptions()
  weight_update_sharding: bool = False
  spatial_partitions: int = 1
  embedding_sharding: str = 'none'
  sharded_tables: int = 0

  def make(self, *, task, deterministic: bool) -> Plan:
    """The plan these options describe: a mesh when it has a shape (its
    refusals name the data-parallel options set beside it), else data
    parallelism with its compositions. Connects to the devices."""
    if self.mesh.shape:
      return Mesh(mesh=self.mesh, distribution=self.distribution,
                  deterministic=deterministic, gradients=self.gradients,
                  weight_update_sharding=self.weight_update_sharding,
                  spatial_partitions=self.spatial_partitions,
                  embedding_sharding=self.embedding_sharding)
    return DataParallel(
        distribution=self.distribution, gradients=self.gradients,
        deterministic=deterministic,
        weight_update_sharding=self.weight_update_sharding,
        spatial_partitions=self.spatial_partitions,
        spatial_feature=getattr(task, 'spatial_feature', None),
        spatial_row_multiple=getattr(task, 'spatial_row_multiple', None),
        embedding_sharding=self.embedding_sharding,
        sharded_tables=self.sharded_tables)


def check_mesh_options(*, distribution, gradients, weight_update_sharding,
                       deterministic, spatial_partitions, mesh_shape=(),
                       embedding_sharding='none'):
  """A mesh replaces the strategy's replicas: options for replicas are
  errors, named before anything runs."""
  if distribution.kind == 'tpu' and distribution.accelerator and mesh_shape:
    want = tpu_slices.parse(distribution.accelerator, public=False).replicas
    if math.prod(mesh_shape) != want:
      raise ValueError(
          f'MESH_SHAPE {tuple(mesh_shape)} has {math.prod(mesh_shape)} '
          f'devices; the {distribution.accelerator} slice the experiment is '
          f'for has {want} (a TPU mesh uses every device): change one.')
  if not deterministic:
    # DTensorDataset runs one copy of the input pipeline per device; the
    # devices that split one model must read the same examples.
    raise ValueError(
        'MESH_SHAPE needs DETERMINISTIC = True: every device of the mesh '
        'reads its own copy of the input pipeline, and the copies must read '
        'the examples in one order.')
  if distribution.kind == 'tpu' and distribution.tpu != 'local':
    raise ValueError(
        f'MESH_SHAPE on a TPU runs one DTensor client on each host of the '
        f'slice, each with --tpu=local (python -m tools.launch starts them '
        f'on every worker), not --tpu={distribution.tpu or "(none)"}.')
  if distribution.kind not in ('default', 'multi_worker', 'tpu'):
    raise ValueError(
        f'MESH_SHAPE runs one program over the mesh, but the distribution '
        f'kind is {distribution.kind!r}: use gin/hardware/cpu.gin (kind '
        "'default', one process), gin/hardware/multi_worker.gin (the "
        'processes of TF_CONFIG) or a TPU hardware file with a mesh.')
  if spatial_partitions > 1:
    raise ValueError(
        f'SPATIAL_PARTITIONS ({spatial_partitions}) splits images over a '
        "strategy's replicas; under MESH_SHAPE there are none. Set one or "
        'the other.')
  if embedding_sharding != 'none':
    raise ValueError(
        f'EMBEDDING_SHARDING ({embedding_sharding!r}) splits tables over a '
        "strategy's replicas; under MESH_SHAPE there are none (a mesh "
        'shards a table by its sharding rules). Set one or the other.')
  if weight_update_sharding:
    raise ValueError(
        'weight_update_sharding shards over a strategy\'s replicas; under '
        'MESH_SHAPE the optimizer slots already take their variables\' '
        'layouts. Set one or the other.')
  if gradients.clip_norm and gradients.clip_before_allreduce:
    raise ValueError(
        'GradientOptions.clip_before_allreduce clips each replica\'s own '
        'gradients; under MESH_SHAPE the program holds only their sum. Set '
        'it False (clip the summed gradients).')
  if gradients.two_level_group_size or gradients.bytes_per_pack:
    raise ValueError(
        'GradientOptions.two_level_group_size and bytes_per_pack tune a '
        'strategy\'s all-reduce; under MESH_SHAPE DTensor places the '
        'collectives. Leave them 0.')


def check_spatial_options(*, spatial_feature, spatial_partitions, replicas,
                          local_replicas, deterministic):
  """Spatial partitioning needs whole groups of replicas and, for groups
  spanning hosts, one image order on every host: named before compute."""
  if spatial_partitions < 1 or replicas % spatial_partitions or not (
      spatial_feature):
    raise ValueError(
        f'SPATIAL_PARTITIONS ({spatial_partitions}) needs a task with a '
        f'spatial_feature and a replica count ({replicas}) it divides.')
  if spatial_partitions > local_replicas and not deterministic:
    raise ValueError(
        f'SPATIAL_PARTITIONS ({spatial_partitions}) spans hosts of '
        f'{local_replicas} replicas each: set DETERMINISTIC = True, so that '
        'the hosts of a group read the same images.')
