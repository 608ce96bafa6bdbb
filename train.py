"""Trains an MLPerf model as configured by gin.

  python train.py --gin_file=gin/resnet_quickstart.gin --model_dir=runs/qs
  python train.py --gin_file=gin/resnet50_pod.gin --tpu=my-pod \
      --gin_param="DATA_DIR='gs://bucket/imagenet'" --model_dir=gs://bucket/run1

`train()` below is the one gin root: every other configurable object reaches it
through its keyword arguments, most of them small config objects that gin
builds (training.controller.RunSchedule, training.step.GradientOptions,
distribution.strategy.StrategyConfig, training.mlperf_log.Submission).
Library code does not import gin; gin files register what they configure with
`from __gin__ import dynamic_registration`.

A run, top to bottom: check the inputs and the config (no compute yet), build
the strategy, model, optimizer and schedule, wire the device loops and the
actions, and hand them to the Controller, which restores, compiles, loops,
evaluates and saves (docs/architecture.md traces it file by file).
"""

import dataclasses
import math
import os
import sys
import traceback
import uuid
from typing import Callable, Sequence

from absl import app
from absl import flags
import gin

from training import startup

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from distribution import mesh as mesh_lib
from distribution import strategy as strategies
from distribution import tpu as tpu_lib
from distribution import tpu_slices
from input_pipeline import spatial as spatial_input
from training import config as gin_config
from tools import staged_files
from training import actions as actions_lib
from training import checkpoints
from training import controller as controller_lib
from training import evaluator as evaluator_lib
from training import events
from training import exit_codes
from training import mlperf_log
from training import preemption
from training import run_lock
from training import step as step_lib
from training import task as task_lib
from training import weight_update_sharding as wus
from training.task import Optimizer
from training.task import Task


def check_writable(model_dir: str) -> None:
  """Fails before any compute if model_dir cannot be written."""
  # Named per process: workers of one run probe the same folder at once.
  probe = os.path.join(model_dir, f'.write_probe.{uuid.uuid4().hex}')
  try:
    tf.io.gfile.makedirs(model_dir)
    with tf.io.gfile.GFile(probe, 'w') as f:
      f.write('ok')
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    raise PermissionError(
        f'Cannot write to --model_dir={model_dir} ({e}). Choose a folder you '
        'can write to.') from e


def train(*, task: Task, optimizer: Optimizer, learning_rate: Callable,
          model_dir: str, schedule: controller_lib.RunSchedule,
          gradients: step_lib.GradientOptions = step_lib.GradientOptions(),
          distribution: strategies.StrategyConfig = (
              strategies.StrategyConfig()),
          submission: mlperf_log.Submission = mlperf_log.Submission(),
          actions: Sequence[Callable] = (), deterministic: bool = False,
          eval_steps_per_loop: int = 0,
          asynchronous_eval: bool = False,
          host_metric_timeout_seconds: float = 3600.0,
          preemption_grace_seconds: float = 300.0,
          restart: bool = False,
          profile_steps: Sequence[int] = (),
          weight_update_sharding: bool = False,
          mesh: mesh_lib.MeshConfig = mesh_lib.MeshConfig(),
          spatial_partitions: int = 1) -> controller_lib.Result:
  """Trains `task` with `optimizer` until its quality target or the budget.

  Args:
    task: ties model, inputs, loss and eval metric (training/task.py; e.g.
      models.resnet_task.ResNetTask). Gin: the TASK macro.
    optimizer: a training/optimizers.py optimizer.
    learning_rate: a training/schedules.py schedule class with its
      hyper-parameters bound; called with steps_per_epoch and total_steps.
    model_dir: where checkpoints, logs and summaries go (local or gs://).
    schedule: steps, batch sizes, eval and checkpoint intervals, target stop.
    gradients: clipping and all-reduce precision.
    distribution: which tf.distribute strategy.
    submission: MLPerf submission_* values.
    actions: extra actions: factories called with `context=RunContext`
      (training/actions.py, e.g. KeepBestCheckpoint, ExportSavedModel).
    deterministic: reproducible ops (the data side is the input's own flag).
    eval_steps_per_loop: eval steps per device call (0: all in one call).
    asynchronous_eval: a task's host metric runs in a background thread
      while training goes on (training/evaluator.py; gin macro ASYNC_EVAL):
      the weights of the eval step are kept in a checkpoint until the
      result is known, and the run stops at the loop end where a result
      meeting the target arrives.
    host_metric_timeout_seconds: how long the run waits for a host metric
      before it stops naming the evaluation (0: no limit).
    preemption_grace_seconds: after SIGTERM/SIGINT, the run finishes its
      loop, saves and exits with training.preemption.EXIT_PREEMPTED; if that
      takes longer than this, it exits at once (0: no limit).
    restart: start from step 0 when model_dir holds checkpoints of which
      none restores (they are kept, moved to checkpoints/damaged/). Without
      it such a run stops with an error naming them.
    profile_steps: (first, last): trace the device loops from the first one
      starting at or after step `first` to the one ending at or past `last`,
      for TensorBoard's profile plugin (gin macro PROFILE_STEPS; () for
      none).
    weight_update_sharding: each replica keeps 1/N of the optimizer state
      and updates 1/N of every weight; the shards are all-gathered
      (training/weight_update_sharding.py). Checkpoints keep the unsharded
      layout either way.
    mesh: a `batch x model` device mesh with sharding rules for tensor
      model parallelism (distribution/mesh.py; gin macro MESH_SHAPE and
      the model's rules); replaces the strategy (distribution kind
      'default').
    spatial_partitions: split each training image along its height over
      this many consecutive replicas (the task's `spatial_feature`,
      input_pipeline/spatial.py; the model must be built for it, gin macro
      SPATIAL_PARTITIONS). Evaluation stays on whole images.

  Returns:
    The run's Result (status, steps, final quality, time to train).
  """
  check_writable(model_dir)
  partitioner = None
  if mesh.shape:
    check_mesh_options(mesh_shape=tuple(mesh.shape),
                       distribution=distribution, gradients=gradients,
                       weight_update_sharding=weight_update_sharding,
                       deterministic=deterministic,
                       spatial_partitions=spatial_partitions)
    # Before any TensorFlow op: a mesh over processes sets up the cluster.
    if distribution.kind == 'tpu':
      tpu_lib.apply_flags(tuple(distribution.tpu_flags))
    partitioner = mesh.make(multi_client=distribution.kind == 'multi_worker',
                            tpu=distribution.tpu if distribution.kind == 'tpu'
                            else '')
  if deterministic:
    tf.config.experimental.enable_op_determinism()
  if partitioner:  # One program over the mesh, no strategy replicas.
    dist = tf.distribute.get_strategy()
    chief, worker_sum = partitioner.chief, partitioner.worker_sum
  else:
    dist = distribution.make()
    distribution.check_replicas(dist.num_replicas_in_sync)
    chief = strategies.is_chief(dist)
    worker_sum = strategies.make_worker_sum(dist, tf.float64)
  if distribution.kind == 'tpu':  # The log names the slice it ran on.
    submission = dataclasses.replace(submission,
                                     platform=distribution.platform)
  lock = lock_model_dir(model_dir, chief, worker_sum)
  try:
    mlperf = mlperf_log.MlperfLog(
        path=os.path.join(model_dir, 'mlperf.log') if chief else None,
        benchmark=task.mlperf_benchmark, submission=submission,
        epoch_num=lambda step: task.mlperf_epoch_num(
            step, schedule.global_batch_size),
        target=task.target_quality)
    events.notify([mlperf], events.InitStart())
    try:
      return _train(
          task=task, optimizer=optimizer, learning_rate=learning_rate,
          model_dir=model_dir, schedule=schedule, gradients=gradients,
          dist=dist, chief=chief, mlperf=mlperf, extra_actions=actions,
          eval_steps_per_loop=eval_steps_per_loop,
          asynchronous_eval=asynchronous_eval,
          host_metric_timeout_seconds=host_metric_timeout_seconds,
          preemption_grace_seconds=preemption_grace_seconds, restart=restart,
          worker_sum=worker_sum, lock=lock, profile_steps=profile_steps,
          weight_update_sharding=weight_update_sharding,
          partitioner=partitioner, spatial_partitions=spatial_partitions,
          deterministic=deterministic)
    finally:
      mlperf.close()
  finally:
    if lock:
      lock.release()


def check_mesh_options(*, distribution, gradients, weight_update_sharding,
                       deterministic, spatial_partitions, mesh_shape=()):
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


def check_spatial_options(*, task, spatial_partitions, replicas,
                          local_replicas, deterministic):
  """Spatial partitioning needs whole groups of replicas and, for groups
  spanning hosts, one image order on every host: named before compute."""
  if spatial_partitions < 1 or replicas % spatial_partitions or not getattr(
      task, 'spatial_feature', None):
    raise ValueError(
        f'SPATIAL_PARTITIONS ({spatial_partitions}) needs a task with a '
        f'spatial_feature and a replica count ({replicas}) it divides.')
  if spatial_partitions > local_replicas and not deterministic:
    raise ValueError(
        f'SPATIAL_PARTITIONS ({spatial_partitions}) spans hosts of '
        f'{local_replicas} replicas each: set DETERMINISTIC = True, so that '
        'the hosts of a group read the same images.')


def lock_model_dir(model_dir: str, chief: bool, worker_sum):
  """The chief locks model_dir for the whole job; all workers learn whether
  it could (a refused chief alone would leave the others waiting)."""
  lock, refused = None, None
  if chief:
    lock = run_lock.for_model_dir(model_dir)
    try:
      lock.acquire()
    except run_lock.ModelDirInUse as e:
      refused = e
  if worker_sum(0.0 if refused else 1.0, first_replica_only=True) != 1.0:
    raise refused or run_lock.ModelDirInUse(
        f'The chief could not lock --model_dir={model_dir}: another run '
        'uses it (the chief\'s output names it).')
  return lock


def _train(*, task, optimizer, learning_rate, model_dir, schedule, gradients,
           dist, chief, mlperf, extra_actions, eval_steps_per_loop,
           asynchronous_eval, host_metric_timeout_seconds,
           preemption_grace_seconds, restart, worker_sum, lock,
           profile_steps, weight_update_sharding, partitioner,
           spatial_partitions, deterministic):
  profiler = None
  if profile_steps:
    if len(profile_steps) != 2:
      raise ValueError(f'`profile_steps` must be (first, last), got '
                       f'{tuple(profile_steps)} (gin macro PROFILE_STEPS).')
    profiler = actions_lib.Profiler(logdir=model_dir,
                                    first_step=profile_steps[0],
                                    last_step=profile_steps[1])
  replicas = (partitioner.data_replicas if partitioner
              else dist.num_replicas_in_sync)
  if spatial_partitions != 1:
    check_spatial_options(task=task, spatial_partitions=spatial_partitions,
                          replicas=replicas,
                          local_replicas=len(dist.extended.worker_devices),
                          deterministic=deterministic)
  # Each group of spatial partitions is one data-parallel replica.
  strategies.per_replica_batch_size(schedule.global_batch_size,
                                    replicas // spatial_partitions)
  strategies.per_replica_batch_size(schedule.eval_batch, replicas,
                                    'eval_batch_size')
  task.data.check()
  steps_per_epoch = task.data.steps_per_epoch(schedule.global_batch_size)
  total_steps = schedule.total_steps(steps_per_epoch)
  schedule.validate(total_steps)
  lr = learning_rate(steps_per_epoch=steps_per_epoch, total_steps=total_steps)

  with partitioner.scope() if partitioner else dist.scope():
    model = task.build_model()
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    optimizer.build(model.trainable_variables, make_slot=(
        wus.make_slot_factory(replicas) if weight_update_sharding else None))
  if partitioner:
    partitioner.check_rules_used()
  distribute = (partitioner.distribute_datasets_from_function if partitioner
                else lambda fn, batch: dist.distribute_datasets_from_function(
                    fn))
  on_devices = partitioner.wrap_loop if partitioner else lambda loop: loop
  sharded = (wus.ShardedSlots.for_optimizer(
      strategy=dist, optimizer=optimizer,
      variables=list(model.trainable_variables))
             if weight_update_sharding else None)
  worker_id = (partitioner.client_id if partitioner
               else strategies.worker_id(dist))
  checkpointer = checkpoints.Checkpointer(
      model_dir=model_dir, chief=chief, worker_id=worker_id,
      max_to_keep=schedule.max_checkpoints, restart=restart,
      before_save=sharded.gather if sharded else None,
      collective_save=bool(partitioner and partitioner.num_clients > 1),
      model=model,
      optimizer=sharded.views if sharded else optimizer.slots, step=step)

  def check_start(start_step):
    # A read error on one worker only would leave the workers at different
    # steps with different weights: stop instead.
    chief_step = worker_sum(start_step, first_replica_only=True)
    if worker_sum((start_step - chief_step) ** 2):
      raise RuntimeError(
          f'Worker {worker_id} restored step {start_step}, the chief step '
          f'{chief_step:.0f}: the workers read different checkpoints from '
          f'{checkpointer.directory}. Rerun; if it repeats, check that every '
          'worker sees the same files.')

  def make_train_iterator(start_step):
    def dataset_fn(ctx):
      return task.data.train_dataset(
          ctx, global_batch_size=schedule.global_batch_size,
          start_step=start_step)
    if spatial_partitions > 1:
      dataset_fn = spatial_input.partitioned_dataset_fn(
          dataset_fn, partitions=spatial_partitions,
          feature=task.spatial_feature,
          row_multiple=getattr(task, 'spatial_row_multiple', None))
    return iter(distribute(dataset_fn, schedule.global_batch_size))

  eval_steps = []  # Filled by eval_fn, which sees the real pipeline count.

  def eval_fn(ctx):
    steps = task.data.eval_steps(num_pipelines=ctx.num_input_pipelines,
                                 global_batch_size=schedule.eval_batch)
    eval_steps.append(steps)
    return task.data.eval_dataset(ctx, global_batch_size=schedule.eval_batch,
                                  steps=steps)

  eval_dataset = distribute(eval_fn, schedule.eval_batch)
  if len(set(eval_steps)) != 1:
    raise RuntimeError(f'Input pipelines disagree on eval steps: {eval_steps}')
  num_eval_examples = task.data.num_eval_examples()
  mlperf.hyperparameters = mlperf_log.hyperparameters(
      task=task, optimizer=optimizer, learning_rate=lr,
      global_batch_size=schedule.global_batch_size, num_replicas=replicas,
      num_eval_examples=num_eval_examples, total_steps=total_steps)
  host_metric = task.host_metric()
  # A per-host metric scores each host's own examples (not on a mesh: its
  # processes' outputs are not split by host).
  per_host = task_lib.is_per_host(host_metric) and not partitioner
  evaluator = evaluator_lib.Evaluator(
      worker_sum=worker_sum,
      eval_loop=on_devices(step_lib.make_eval_loop(
          strategy=dist, model=model, task=task, local_outputs=per_host)),
      make_iterator=lambda: iter(eval_dataset), steps=eval_steps[0],
      task=task, chief=chief, expected_count=num_eval_examples,
      steps_per_loop=eval_steps_per_loop, asynchronous=asynchronous_eval,
      host_timeout_seconds=host_metric_timeout_seconds,
      host_metric=host_metric, per_host=per_host, worker_id=worker_id)

  context = actions_lib.RunContext(model_dir=model_dir, model=model,
                                   task=task, chief=chief, worker_id=worker_id)
  run_actions = [
      actions_lib.LockGuard(lock=lock, worker_sum=worker_sum,
                            on_lost=mlperf.close),
      actions_lib.ConfigFile(
          path=os.path.join(model_dir, 'config.gin') if chief else None,
          text=gin.config_str()),
      actions_lib.NanGuard(checkpointer),
      actions_lib.ProgressLine(global_batch_size=schedule.global_batch_size,
                               target=task.target_quality,
                               quality_name=task.quality_name),
      actions_lib.Summaries(model_dir=model_dir, chief=chief,
                            config_text=gin.config_str()),
      actions_lib.TargetTest(target=task.target_quality,
                             higher_is_better=task.higher_is_better,
                             first_eval_step=schedule.first_eval_step,
                             stop_at_target=schedule.stop_at_target),
      mlperf,
      actions_lib.TimeToAccuracyPlot(
          log_path=os.path.join(model_dir, 'mlperf.log') if chief else None,
          png_path=os.path.join(model_dir, 'time_to_accuracy.png')),
      actions_lib.CheckpointSaver(checkpointer,
                                  schedule.checkpoint_every_steps),
      preemption.PreemptionGuard(checkpointer=checkpointer,
                                 worker_sum=worker_sum,
                                 grace_seconds=preemption_grace_seconds),
      *(make(context=context) for make in extra_actions),
  ]
  if profiler:
    run_actions.append(profiler)
  controller = controller_lib.Controller(
      train_loop=on_devices(step_lib.make_train_loop(
          strategy=dist, model=model, optimizer=optimizer, learning_rate=lr,
          task=task, step=step, gradients=gradients,
          weight_update_sharding=weight_update_sharding,
          replicas_in_batch=partitioner.data_replicas if partitioner else 1)),
      make_train_iterator=make_train_iterator, evaluator=evaluator, step=step,
      schedule=schedule, total_steps=total_steps,
      steps_per_epoch=steps_per_epoch, checkpointer=checkpointer,
      actions=run_actions, learning_rate=lr,
      explain_input_error=task.explain_input_error, check_start=check_start)
  result = controller.run()
  result.model = model
  return result


# -- Command line ---------------------------------------------------------------


# Errors whose message says what to do: printed as one line, exit code 2
# (4 for an unreachable TPU). Anything else is a crash: traceback, exit 3.
# The table of exit codes is training/exit_codes.py.
USER_ERRORS = (ValueError, FileNotFoundError, PermissionError,
               FloatingPointError, run_lock.ModelDirInUse)
EXIT_USER_ERROR = exit_codes.USER_ERROR


def experiment_files() -> list[str]:
  folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'gin')
  return sorted(f'gin/{name}' for name in os.listdir(folder)
                if name.endswith('.gin') and name != 'run.gin')


def define_flags():
  flags.DEFINE_bool('verbose', False, 'Show the traceback of an error.')
  flags.DEFINE_multi_string('gin_file', [], 'Gin config files, in order.')
  flags.DEFINE_multi_string('gin_param', [],
                            'Gin bindings, e.g. "DATA_DIR=\'gs://b/d\'".')
  flags.DEFINE_string('model_dir', None, 'Where the run writes everything.')
  flags.DEFINE_string('tpu', '', 'TPU name, grpc address or "local".')
  flags.mark_flag_as_required('model_dir')


def main(argv, sugar_bindings):
  """The command line: a user error is one line on stderr and exit code 2,
  an unreachable TPU one line and 4 (--verbose shows their traceback); any
  other error is a crash: its traceback and exit code 3, never 1 (which
  means "budget used, target not reached")."""
  try:
    return run_command(argv, sugar_bindings)
  except USER_ERRORS as e:
    if flags.FLAGS.verbose:
      raise
    lines = str(e).strip().splitlines() or [type(e).__name__]
    print(f'error: {lines[0]}', file=sys.stderr, flush=True)
    return (exit_codes.NO_TPU if isinstance(e, tpu_lib.TpuUnavailable)
            else EXIT_USER_ERROR)
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()
    print(f'crashed (exit {exit_codes.CRASH}): the traceback above is the '
          'cause; this run is not a result.', file=sys.stderr, flush=True)
    return exit_codes.CRASH


def run_command(argv, sugar_bindings):
  del argv
  import train as this_module  # The module gin files configure, not __main__.
  flag_values = flags.FLAGS
  if not flag_values.gin_file:
    raise ValueError('Pass an experiment with --gin_file, one of: ' +
                     ', '.join(experiment_files()) + '.')
  gin_config.parse(
      flag_values.gin_file,
      list(flag_values.gin_param) + sugar_bindings + [
          f'train.train.model_dir = {flag_values.model_dir!r}'] +
      ([f'distribution.strategy.StrategyConfig.tpu = {flag_values.tpu!r}']
       if flag_values.tpu else []),
      finalize=True)
  model_dir = flag_values.model_dir
  result = gin.get_configurable(this_module.train)()
  staged_files.write_text(os.path.join(model_dir, 'operative_config.gin'),
             gin.operative_config_str())
  if result.preempted:
    return exit_codes.PREEMPTED
  return (exit_codes.TARGET_REACHED if result.status == 'success' else
          exit_codes.BUDGET_USED)


if __name__ == '__main__':
  define_flags()
  remaining, sugar = gin_config.split_gin_sugar(sys.argv)
  app.run(lambda argv: main(argv, sugar), argv=remaining)
