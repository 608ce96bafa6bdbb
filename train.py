"""Trains an MLPerf model as configured by gin.

  python train.py --gin_file=gin/resnet_quickstart.gin --model_dir=runs/qs
  python train.py --gin_file=gin/resnet50_pod.gin --tpu=my-pod \
      --gin_param="DATA_DIR='gs://bucket/imagenet'" --model_dir=gs://bucket/run1

`train()` below is the one gin root: every other configurable object reaches it
through its keyword arguments, most of them small config objects that gin
builds (training.controller.RunSchedule, distribution.plan.PlanOptions,
training.run_options.RunOptions, training.mlperf_log.Submission).
Library code does not import gin; gin files register what they configure with
`from __gin__ import dynamic_registration`.

A run, top to bottom: `train` makes the parallelism plan
(distribution/plan.py: the one object asked how the work is spread over
devices), locks model_dir and opens the MLPerf log; `_train` then checks
the inputs (`_check_inputs`: no compute yet), builds the model, the
optimizer's slots and the checkpointer in the plan (`_build_state`) and the
evaluation (`_build_evaluation`), lists the actions (`_run_actions`), and
hands the device loops to the Controller, which restores, compiles, loops,
evaluates and saves (docs/architecture.md traces it file by file).
"""

import dataclasses
import os
import sys
import time
import traceback
import uuid
from typing import Callable, Sequence

from absl import app
from absl import flags
import gin

from core import config as gin_config
from core import entry_point
from core import startup


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_bool('verbose', False, 'Show the traceback of an error.')
  flags.DEFINE_multi_string('gin_file', [], 'Gin config files, in order: a '
                            'path, or a name found on the search path '
                            '(bert_pod.gin, hardware/tpu.gin).')
  flags.DEFINE_list('gin_search_paths', [], gin_config.SEARCH_PATHS_HELP)
  flags.DEFINE_multi_string('gin_param', [],
                            'Gin bindings, e.g. "DATA_DIR=\'gs://b/d\'".')
  flags.DEFINE_string('model_dir', None, 'Where the run writes everything '
                      '(local or gs://); default: runs/<experiment>_<time> '
                      'in the working directory.')
  flags.DEFINE_string('tpu', '', 'TPU name, grpc address or "local".')


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags,
                                gin_config.split_gin_sugar(sys.argv)[0])

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from core import exit_codes
from core import extras
from core import source as source_lib
from core import staged_files
from core import storage as storage_lib
from distribution import plan as plan_lib
from distribution import strategy as strategies
from distribution import tpu as tpu_lib
from training import actions as actions_lib
from training import checkpoints
from training import controller as controller_lib
from training import device_inference
from training import evaluator as evaluator_lib
from training import events
from training import faults
from training import generations as generations_lib
from training import mlperf_log
from training import preemption
from training import run_lock
from training import run_options
from training import step as step_lib
from training import task as task_lib
from training import uploads as uploads_lib
from training import watchdog as watchdog_lib
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
          plan: plan_lib.PlanOptions = plan_lib.PlanOptions(),
          options: run_options.RunOptions = run_options.RunOptions(),
          submission: mlperf_log.Submission = mlperf_log.Submission(),
          storage: storage_lib.StorageOptions = storage_lib.StorageOptions(),
          actions: Sequence[Callable] = ()) -> controller_lib.Result:
  """Trains `task` with `optimizer` until its quality target or the budget.

  Args:
    task: ties model, inputs, loss and eval metric (training/task.py; e.g.
      models.resnet.task.ResNetTask). Gin: the TASK macro.
    optimizer: a training/optimizers.py optimizer.
    learning_rate: a training/schedules.py schedule class with its
      hyper-parameters bound; called with steps_per_epoch and total_steps.
    model_dir: where checkpoints, logs and summaries go (local or gs://).
    schedule: steps, batch sizes, eval and checkpoint intervals, target stop.
    plan: how the steps are spread over devices: the strategy, a mesh,
      weight-update sharding, spatial partitions, the gradients' sum
      (distribution/plan.py).
    options: determinism, asynchronous evaluation, preemption, restart,
      profiling (training/run_options.py).
    submission: MLPerf submission_* values.
    storage: how long storage may stay unreachable, TensorFlow's GCS
      timeouts, where a remote model_dir's files are staged
      (core/storage.py).
    actions: extra actions: factories called with `context=RunContext`
      (training/actions.py, e.g. KeepBestCheckpoint, ExportSavedModel).

  Returns:
    The run's Result (status, steps, final quality, time to train).
  """
  check_writable(model_dir)
  placement = plan.make(task=task, deterministic=options.deterministic)
  if plan.distribution.kind == 'tpu':  # The log names the slice it ran on.
    submission = dataclasses.replace(submission,
                                     platform=plan.distribution.platform)
  lock = lock_model_dir(model_dir, placement.chief, placement.worker_sum)
  writes = uploads_lib.RemoteWrites(model_dir, storage,
                                    options.stall_warning_seconds)
  try:
    mlperf = mlperf_log.MlperfLog(
        path=(os.path.join(model_dir, 'mlperf.log') if placement.chief
              else None),
        benchmark=task.mlperf_benchmark, submission=submission,
        epoch_num=lambda step: task.mlperf_epoch_num(
            step, schedule.global_batch_size),
        target=getattr(task, 'mlperf_quality_target', task.target_quality),
        uploads=writes.uploads,
        accuracy=getattr(task, 'mlperf_eval_accuracy', None))
    events.notify([mlperf], events.InitStart())
    try:
      result = _train(task=task, optimizer=optimizer,
                      learning_rate=learning_rate, model_dir=model_dir,
                      schedule=schedule, plan=placement, options=options,
                      mlperf=mlperf, extra_actions=actions, lock=lock,
                      writes=writes)
    finally:
      mlperf.close()
    writes.finish()
    return result
  except BaseException:
    writes.finish(failed=True)
    raise
  finally:
    if lock:
      lock.release()


def _both(first, second):
  """One before-save call of two (either may be None)."""
  if not (first and second):
    return first or second
  return lambda: (first(), second())


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


def _train(*, task, optimizer, learning_rate, model_dir, schedule,
           plan: plan_lib.Plan, options: run_options.RunOptions, mlperf,
           extra_actions, lock, writes: uploads_lib.RemoteWrites):
  """The run once the plan, lock and log exist: check, build, run."""
  profiler = None  # Made first: bad PROFILE_STEPS fail before any compute.
  if options.profile_steps:
    profiler = actions_lib.Profiler(logdir=model_dir,
                                    first_step=options.profile_steps[0],
                                    last_step=options.profile_steps[1])
  steps_per_epoch, total_steps = _check_inputs(task, schedule, plan)
  lr = learning_rate(steps_per_epoch=steps_per_epoch, total_steps=total_steps)
  model, step, checkpointer = _build_state(
      task=task, optimizer=optimizer, plan=plan, model_dir=model_dir,
      schedule=schedule, options=options, writes=writes)
  evaluator, num_eval_examples = _build_evaluation(
      task=task, model=model, plan=plan, schedule=schedule, options=options)
  mlperf.hyperparameters = mlperf_log.hyperparameters(
      task=task, optimizer=optimizer, learning_rate=lr,
      global_batch_size=schedule.global_batch_size,
      num_replicas=plan.replicas,
      num_eval_examples=num_eval_examples, total_steps=total_steps,
      seed=options.seed)
  generations = _generation_runner(task, model, plan, model_dir)
  context = actions_lib.RunContext(model_dir=model_dir, model=model,
                                   task=task, chief=plan.chief,
                                   worker_id=plan.worker_id,
                                   uploads=writes.uploads,
                                   staging=writes.staging)
  run_actions = _run_actions(
      task=task, schedule=schedule, plan=plan, options=options,
      model_dir=model_dir, mlperf=mlperf, lock=lock, writes=writes,
      checkpointer=checkpointer, steps_per_epoch=steps_per_epoch,
      extra=[make(context=context) for make in extra_actions])
  if profiler:
    run_actions.append(profiler)
  controller = controller_lib.Controller(
      train_loop=plan.on_devices(step_lib.make_train_loop(
          strategy=plan.strategy, model=model, optimizer=optimizer,
          learning_rate=lr, task=task, step=step,
          **plan.train_loop_options())),
      make_train_iterator=_train_iterators(task, schedule, plan),
      evaluator=evaluator, step=step, schedule=schedule,
      total_steps=total_steps, steps_per_epoch=steps_per_epoch,
      checkpointer=checkpointer, actions=run_actions, learning_rate=lr,
      explain_input_error=task.explain_input_error,
      check_start=_same_start_everywhere(plan, checkpointer),
      watchdog=watchdog_lib.Watchdog(
          warn_after=options.stall_warning_seconds),
      generations=generations)
  try:
    result = controller.run()  # Restores, compiles, loops, evaluates, saves.
  except Exception as e:
    # A lost peer or unreachable storage names what a rerun resumes from.
    faults.note_last_checkpoint(e, checkpointer.latest())
    raise
  result.model = model
  return result


def _check_inputs(task, schedule, plan: plan_lib.Plan) -> tuple[int, int]:
  """Batch sizes that divide by the replicas, the data, the step budget and
  the schedule's consistency, before anything is built. Returns
  (steps_per_epoch, total_steps)."""
  strategies.per_replica_batch_size(schedule.global_batch_size,
                                    plan.train_batch_replicas())
  strategies.per_replica_batch_size(schedule.eval_batch, plan.replicas,
                                    'eval_batch_size')
  task.data.check()
  steps_per_epoch = task.data.steps_per_epoch(schedule.global_batch_size)
  total_steps = schedule.total_steps(steps_per_epoch)
  schedule.validate(total_steps)
  return steps_per_epoch, total_steps


def _build_state(*, task, optimizer, plan: plan_lib.Plan, model_dir,
                 schedule, options: run_options.RunOptions,
                 writes: uploads_lib.RemoteWrites):
  """The model, the global step and the optimizer's slots, made in the
  plan's scope, and the Checkpointer of the plan's view of them. Returns
  (model, step, checkpointer)."""
  with plan.scope():
    model = task.build_model()
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    optimizer.build(model.trainable_variables, make_slot=plan.make_slot())
  plan.built(model=model, optimizer=optimizer)
  slots, before_save = plan.checkpoint_optimizer(
      optimizer, list(model.trainable_variables))
  saved_model, before_model_save = plan.checkpoint_model(model)
  checkpointer = checkpoints.Checkpointer(
      model_dir=model_dir, chief=plan.chief, worker_id=plan.worker_id,
      max_to_keep=schedule.max_checkpoints, restart=options.restart,
      before_save=_both(before_save, before_model_save),
      collective_save=plan.collective_save,
      watchdog=watchdog_lib.Watchdog(
          warn_after=options.stall_warning_seconds),
      uploads=writes.uploads,
      staging=(os.path.join(writes.staging, 'checkpoints') if writes.staging
               else None),
      model=saved_model, optimizer=slots, step=step)
  return model, step, checkpointer


def _same_start_everywhere(plan: plan_lib.Plan, checkpointer):
  """The Controller's check that every worker restored the chief's step."""
  def check_start(start_step):
    # A read error on one worker only would leave the workers at different
    # steps with different weights: stop instead.
    chief_step = plan.worker_sum(start_step, first_replica_only=True)
    if plan.worker_sum((start_step - chief_step) ** 2):
      raise RuntimeError(
          f'Worker {plan.worker_id} restored step {start_step}, the chief '
          f'step {chief_step:.0f}: the workers read different checkpoints '
          f'from {checkpointer.directory}. Rerun; if it repeats, check that '
          'every worker sees the same files.')
  return check_start


def _train_iterators(task, schedule, plan: plan_lib.Plan):
  """start_step -> the devices' training input, positioned at that step."""
  def make_train_iterator(start_step):
    def dataset_fn(ctx):
      return task.data.train_dataset(
          ctx, global_batch_size=schedule.global_batch_size,
          start_step=start_step)
    return iter(plan.distribute(dataset_fn, schedule.global_batch_size,
                                training=True))
  return make_train_iterator


def _build_evaluation(*, task, model, plan: plan_lib.Plan, schedule,
                      options: run_options.RunOptions):
  """The evaluator: the task's own (MiniGo's games) or eval batches on the
  devices with the task's sums and host metric. Returns (evaluator, the
  number of eval examples)."""
  if callable(getattr(task, 'make_evaluator', None)):
    num_eval_examples = task.data.num_eval_examples()
    return task.make_evaluator(model, chief=plan.chief,
                               worker_sum=plan.worker_sum), num_eval_examples
  eval_steps = []  # Filled by eval_fn, which sees the real pipeline count.

  def eval_fn(ctx):
    steps = task.data.eval_steps(num_pipelines=ctx.num_input_pipelines,
                                 global_batch_size=schedule.eval_batch)
    eval_steps.append(steps)
    return task.data.eval_dataset(ctx, global_batch_size=schedule.eval_batch,
                                  steps=steps)

  eval_dataset = plan.distribute(eval_fn, schedule.eval_batch,
                                 training=False)
  if len(set(eval_steps)) != 1:
    raise RuntimeError(
        f'Input pipelines disagree on eval steps: {eval_steps}')
  num_eval_examples = task.data.num_eval_examples()
  host_metric = task.host_metric()
  # A per-host metric scores each host's own examples where the plan keeps
  # each host's outputs on it.
  per_host = task_lib.is_per_host(host_metric) and plan.per_host_outputs
  evaluator = evaluator_lib.Evaluator(
      worker_sum=plan.worker_sum,
      eval_loop=plan.on_devices(step_lib.make_eval_loop(
          strategy=plan.strategy, model=model, task=task,
          local_outputs=per_host)),
      make_iterator=lambda: iter(eval_dataset), steps=eval_steps[0],
      task=task, chief=plan.chief, expected_count=num_eval_examples,
      steps_per_loop=options.eval_steps_per_loop,
      asynchronous=options.asynchronous_eval,
      host_timeout_seconds=options.host_metric_timeout_seconds,
      host_metric=host_metric, per_host=per_host, worker_id=plan.worker_id)
  return evaluator, num_eval_examples


def _generation_runner(task, model, plan: plan_lib.Plan, model_dir):
  """For a task whose data is made between generations (MiniGo's
  self-play), what makes it with the model on the devices; else None."""
  if not callable(getattr(task.data, 'produce', None)):
    return None
  return generations_lib.GenerationRunner(
      data=task.data,
      variables=[*model.trainable_variables, *model.state.values()],
      worker_id=plan.worker_id, worker_sum=plan.worker_sum,
      directory=os.path.join(model_dir, 'generations'),
      infer=device_inference.DeviceInference(
          strategy=plan.strategy, fn=task.serving_fn(model)))


def _run_actions(*, task, schedule, plan: plan_lib.Plan,
                 options: run_options.RunOptions, model_dir, mlperf, lock,
                 writes: uploads_lib.RemoteWrites, checkpointer,
                 steps_per_epoch, extra) -> list:
  """The actions the Controller notifies, in order (docs/architecture.md,
  "One run, file by file"), the user's (`extra`) last."""
  chief, worker_sum = plan.chief, plan.worker_sum
  config_text = gin_config.readable(gin.config_str())
  return [
      actions_lib.LockGuard(lock=lock, worker_sum=worker_sum,
                            on_lost=mlperf.close),
      actions_lib.ConfigFile(
          path=os.path.join(model_dir, 'config.gin') if chief else None,
          text=config_text, uploads=writes.uploads),
      # The code the run used (tools.package archives it).
      actions_lib.ConfigFile(
          path=(os.path.join(model_dir, source_lib.SOURCE_FILE) if chief
                else None),
          text=source_lib.record_text(), uploads=writes.uploads),
      actions_lib.StorageGuard(uploads=writes.uploads, worker_sum=worker_sum),
      actions_lib.NanGuard(checkpointer),
      actions_lib.ProgressLine(global_batch_size=schedule.global_batch_size,
                               target=task.target_quality,
                               quality_name=task.quality_name,
                               stop_at_target=schedule.stop_at_target,
                               detail=getattr(task, 'quality_detail', None)),
      actions_lib.Summaries(model_dir=model_dir, chief=chief,
                            config_text=config_text,
                            quality_tag=task.quality_tag,
                            global_batch_size=schedule.global_batch_size,
                            steps_per_epoch=steps_per_epoch,
                            uploads=writes.uploads, staging=writes.staging),
      actions_lib.TargetTest(target=task.target_quality,
                             higher_is_better=task.higher_is_better,
                             first_eval_step=schedule.first_eval_step,
                             stop_at_target=schedule.stop_at_target),
      mlperf,
      actions_lib.TimeToAccuracyPlot(
          log_path=os.path.join(model_dir, 'mlperf.log') if chief else None,
          png_path=os.path.join(model_dir, 'time_to_accuracy.png'),
          uploads=writes.uploads),
      actions_lib.CheckpointSaver(checkpointer,
                                  schedule.checkpoint_every_steps),
      preemption.PreemptionGuard(checkpointer=checkpointer,
                                 worker_sum=worker_sum,
                                 grace_seconds=(
                                     options.preemption_grace_seconds)),
      *extra,
  ]


# -- Command line ---------------------------------------------------------------


def restart_for_storage_options() -> None:
  """TensorFlow reads its GCS retry and timeout settings once, as it loads:
  when gin binds other core.storage.StorageOptions than the defaults
  this process started with, train.py (run as the program) runs itself
  again with them in its environment, before any work."""
  options = gin.get_configurable(storage_lib.StorageOptions)()
  main_file = getattr(sys.modules['__main__'], '__file__', None)
  if not options.restart_environment() or not main_file or (
      os.path.abspath(main_file) != os.path.abspath(__file__)):
    return
  changes = options.set_for_restart()
  print('restarting once with TensorFlow\'s storage settings from gin: ' +
        ', '.join(f'{k}={v}' for k, v in sorted(changes.items())), flush=True)
  argv = sys.argv[1:]
  if not any(a.startswith('--model_dir') for a in argv):  # The one chosen.
    argv.append(f'--model_dir={flags.FLAGS.model_dir}')
  os.execv(sys.executable, [sys.executable, main_file, *argv])


# Errors whose message says what to do: printed as one line, exit code 2
# (4 for an unreachable TPU); a lost peer or unreachable storage is one line
# and its own code (training/faults.py). Anything else is a crash:
# traceback, exit 3.
# The table of exit codes is core/exit_codes.py.
USER_ERRORS = (ValueError, FileNotFoundError, PermissionError,
               FloatingPointError, run_lock.ModelDirInUse)
EXIT_USER_ERROR = exit_codes.USER_ERROR


def experiment_files() -> list[str]:
  folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'gin')
  return sorted(f'gin/{name}' for name in os.listdir(folder)
                if name.endswith('.gin') and name != 'run.gin')


def main(argv, sugar_bindings):
  """The command line: a user error (or a module of an optional
  requirements file not installed: core/extras.py) is one line on
  stderr and exit code 2, an unreachable TPU one line and 4 (--verbose
  shows their traceback); any
  other error is a crash: its traceback and exit code 3, never 1 (which
  means "budget used, target not reached")."""
  try:
    return run_command(argv, sugar_bindings)
  except USER_ERRORS as e:
    if flags.FLAGS.verbose:
      raise
    _remove_made_empty_model_dir()
    lines = str(e).strip().splitlines() or [type(e).__name__]
    print(f'error: {lines[0]}', file=sys.stderr, flush=True)
    return (exit_codes.NO_TPU if isinstance(e, tpu_lib.TpuUnavailable)
            else EXIT_USER_ERROR)
  except Exception as e:  # pylint: disable=broad-except
    missing = extras.explain(e) if isinstance(e, ImportError) else None
    if missing and not flags.FLAGS.verbose:  # An optional requirement.
      print(f'error: {missing}', file=sys.stderr, flush=True)
      return EXIT_USER_ERROR
    fault = faults.classify(e)
    if fault and not flags.FLAGS.verbose:  # A peer or storage, not the run.
      print(f'error: {fault.line}', file=sys.stderr, flush=True)
      return fault.code
    traceback.print_exc()
    print(f'crashed (exit {exit_codes.CRASH}): the traceback above is the '
          'cause; this run is not a result.', file=sys.stderr, flush=True)
    return exit_codes.CRASH


_MADE_MODEL_DIR = []  # A default model_dir this process created.


def default_model_dir(gin_files: list[str]) -> str:
  """runs/<experiment>_<time> for a command without --model_dir."""
  name = os.path.splitext(os.path.basename(gin_files[0]))[0]
  return os.path.join('runs', f'{name}_{time.strftime("%Y%m%d_%H%M%S")}')


def _remove_made_empty_model_dir() -> None:
  """A run stopped by bad input or no TPU leaves no empty default folder
  behind."""
  for model_dir in _MADE_MODEL_DIR:
    if os.path.isdir(model_dir) and not os.listdir(model_dir):
      os.rmdir(model_dir)


def run_experiment(gin_files: list[str], bindings: list[str], *,
                   model_dir: str, tpu: str = '') -> controller_lib.Result:
  """One run as the command line makes it (its main and the notebooks call
  this): the gin files and bindings parsed and checked on a clear config,
  the TPU present if the strategy wants one, every %gin.REQUIRED macro set,
  then train(); operative_config.gin written after it."""
  import train as this_module  # The module gin files configure, not __main__.
  gin.clear_config()
  gin_config.parse(
      gin_files, list(bindings) + [f'train.train.model_dir = {model_dir!r}'] +
      ([f'distribution.strategy.StrategyConfig.tpu = {tpu!r}'] if tpu else []))
  # The TPU first: the literal `python train.py --gin_file=bert_pod.gin` on
  # a machine without one says so (exit 4) before asking for DATA_DIR.
  gin.get_configurable(strategies.StrategyConfig)().check_tpu_present()
  gin_config.finalize_config()  # Now every %gin.REQUIRED macro must be set.
  restart_for_storage_options()
  result = gin.get_configurable(this_module.train)()
  staged_files.write_text(os.path.join(model_dir, 'operative_config.gin'),
                          gin_config.readable(gin.operative_config_str()))
  return result


def run_command(argv, sugar_bindings):
  del argv
  flag_values = flags.FLAGS
  if not flag_values.gin_file:
    raise ValueError('Pass an experiment with --gin_file, one of: ' +
                     ', '.join(experiment_files()) + '.')
  gin_files = gin_config.resolve_gin_files(flag_values.gin_file,
                                           flag_values.gin_search_paths)
  if not flag_values.model_dir:
    flag_values.model_dir = default_model_dir(gin_files)
    if not os.path.exists(flag_values.model_dir):
      _MADE_MODEL_DIR.append(flag_values.model_dir)
    print(f'model_dir: {flag_values.model_dir} (--model_dir sets it)',
          flush=True)
  result = run_experiment(
      gin_files, list(flag_values.gin_param) + sugar_bindings,
      model_dir=flag_values.model_dir, tpu=flag_values.tpu)
  if result.preempted:
    return exit_codes.PREEMPTED
  return (exit_codes.TARGET_REACHED if result.status == 'success' else
          exit_codes.BUDGET_USED)


if __name__ == '__main__':
  remaining, sugar = gin_config.split_gin_sugar(sys.argv)
  try:
    app.run(lambda argv: main(argv, sugar), argv=remaining)
  except SystemExit as end:
    uploads_lib.end_process_if_stuck(end.code)
    raise
