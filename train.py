"""Trains an MLPerf model as configured by gin.

  python train.py --gin_file=gin/resnet_quickstart.gin --model_dir=runs/qs
  python train.py --gin_file=gin/resnet50_pod.gin --tpu=my-pod \
      --gin_param="DATA_DIR='gs://bucket/imagenet'" --model_dir=gs://bucket/run1

`train()` below is the one gin root: every other configurable object reaches it
through its keyword arguments. Library code does not import gin; gin files
register what they configure with `from __gin__ import dynamic_registration`.
"""

import math
import os
import sys

from absl import app
from absl import flags
from absl import logging
import gin
from mlperf_logging.mllog import constants as mlc
import tensorflow as tf

from distribution import strategy as strategies
from training import checkpoints
from training import controller as controller_lib
from training import mlperf_log
from training import step as step_lib
from training.task import Task


def check_writable(model_dir: str) -> None:
  """Fails before any compute if model_dir cannot be written."""
  probe = os.path.join(model_dir, '.write_probe')
  try:
    tf.io.gfile.makedirs(model_dir)
    with tf.io.gfile.GFile(probe, 'w') as f:
      f.write('ok')
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    raise PermissionError(
        f'Cannot write to --model_dir={model_dir} ({e}). Choose a folder you '
        'can write to.') from e


def write_text(path: str, text: str) -> None:
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write(text)


def train(*, task: Task, optimizer, model_dir: str, global_batch_size: int,
          steps_per_loop: int, eval_every_steps: int, train_epochs: float = 0,
          train_steps: int = 0, first_eval_step: int = 0,
          eval_batch_size: int = 0, gradient_clip_norm: float = 0.0,
          clip_before_allreduce: bool = False,
          allreduce_dtype: str = 'float32', checkpoint_every_steps: int = 0,
          max_checkpoints: int = 3, stop_at_target: bool = True,
          strategy: str = 'default', tpu: str = '', num_cpu_devices: int = 0,
          collective: str = 'auto', deterministic: bool = False,
          submission_org: str = 'reference',
          submission_platform: str = 'cpu',
          submission_division: str = 'closed',
          submission_status: str = 'research') -> controller_lib.Result:
  """Trains `task` with `optimizer` until its quality target or the budget.

  Args:
    task: ties model, inputs, loss and eval metric (training/task.py; e.g.
      models.resnet_task.ResNetTask).
    optimizer: a training/optimizers.py optimizer.
    model_dir: where checkpoints, logs and summaries go (local or gs://).
    global_batch_size: training examples per step over all replicas.
    train_epochs: step budget in epochs of `task.num_train_examples`.
    train_steps: step budget in steps; overrides `train_epochs` when > 0.
    steps_per_loop: steps per device call (one host round trip).
    eval_every_steps: steps between evaluations (multiple of steps_per_loop).
    first_eval_step: no evaluation before this step (MLPerf BERT: the step of
      3M samples), except at the end of the budget.
    eval_batch_size: eval examples per step over all replicas (0: the
      training batch).
    gradient_clip_norm: clip gradients to this global norm (0: no clipping).
    clip_before_allreduce: clip each replica's gradients before the
      all-reduce (MLPerf BERT v0.7) instead of the reduced ones (later rules).
    allreduce_dtype: 'float32' or 'bfloat16' gradients in the all-reduce.
    checkpoint_every_steps: steps between checkpoints (0: only at the end).
    max_checkpoints: checkpoints kept.
    stop_at_target: stop at the first eval reaching the target.
    strategy: 'tpu', 'multi_worker', 'mirrored', 'one_device' or 'default'.
    tpu: TPU name, grpc address or 'local' (strategy 'tpu').
    num_cpu_devices: logical CPU devices for a CPU 'mirrored' run.
    collective: multi_worker all-reduce: 'auto', 'ring' or 'nccl'.
    deterministic: reproducible ops (the data side is the input's own flag).
    submission_org: MLPerf submission_org.
    submission_platform: MLPerf submission_platform.
    submission_division: 'closed' or 'open'.
    submission_status: 'cloud', 'onprem', 'preview' or 'research'.

  Returns:
    The run's Result (status, steps, final quality, time to train).
  """
  check_writable(model_dir)
  if deterministic:
    tf.config.experimental.enable_op_determinism()
  dist = strategies.make_strategy(kind=strategy, tpu=tpu or None,
                                  num_cpu_devices=num_cpu_devices,
                                  collective=collective)
  chief = strategies.is_chief(dist)
  mlperf = mlperf_log.MlperfLogger(
      path=os.path.join(model_dir, 'mlperf.log') if chief else None)
  try:
    return _train(task=task, optimizer=optimizer, model_dir=model_dir,
                  dist=dist, chief=chief, mlperf=mlperf,
                  global_batch_size=global_batch_size,
                  eval_batch_size=eval_batch_size or global_batch_size,
                  train_epochs=train_epochs, train_steps=train_steps,
                  first_eval_step=first_eval_step,
                  steps_per_loop=steps_per_loop,
                  gradient_options=dict(
                      clip_norm=gradient_clip_norm,
                      clip_before_allreduce=clip_before_allreduce,
                      allreduce_dtype=allreduce_dtype),
                  eval_every_steps=eval_every_steps,
                  checkpoint_every_steps=checkpoint_every_steps,
                  max_checkpoints=max_checkpoints,
                  stop_at_target=stop_at_target,
                  submission=dict(org=submission_org,
                                  platform=submission_platform,
                                  division=submission_division,
                                  status=submission_status))
  finally:
    mlperf.close()


def _train(*, task, optimizer, model_dir, dist, chief, mlperf,
           global_batch_size, eval_batch_size, train_epochs, train_steps,
           first_eval_step, gradient_options, steps_per_loop,
           eval_every_steps, checkpoint_every_steps, max_checkpoints,
           stop_at_target, submission):
  mlperf.submission_info(benchmark=task.mlperf_benchmark, **submission)
  mlperf.event(mlc.CACHE_CLEAR, True)
  mlperf.start(mlc.INIT_START)

  replicas = dist.num_replicas_in_sync
  per_replica = strategies.per_replica_batch_size(global_batch_size, replicas)
  strategies.per_replica_batch_size(eval_batch_size, replicas,
                                    'eval_batch_size')
  task.data.check()
  if not train_steps and not (train_epochs and task.num_train_examples):
    raise ValueError('Set `train_steps`, or `train_epochs` for a task that '
                     'knows its epoch size (num_train_examples).')
  steps_per_epoch = task.num_train_examples / global_batch_size
  schedule = controller_lib.Schedule(
      total_steps=train_steps or max(1, math.ceil(train_epochs *
                                                  steps_per_epoch)),
      steps_per_loop=steps_per_loop, eval_every_steps=eval_every_steps,
      checkpoint_every_steps=checkpoint_every_steps,
      steps_per_epoch_num=task.samples_per_epoch_num / global_batch_size,
      first_eval_step=first_eval_step)
  schedule.validate()

  with dist.scope():
    model = task.build_model()
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    optimizer.build(model.trainable_variables, steps_per_epoch=steps_per_epoch,
                    total_steps=schedule.total_steps)
  resolver = getattr(dist, 'cluster_resolver', None)
  checkpointer = checkpoints.Checkpointer(
      model_dir=model_dir, chief=chief,
      worker_id=getattr(resolver, 'task_id', 0) or 0,
      max_to_keep=max_checkpoints, model=model, optimizer=optimizer.slots,
      step=step)
  restored = checkpointer.restore_latest()
  start_step = int(step.numpy())
  if restored:
    print(f'resumed from {restored} at step {start_step}', flush=True)

  train_dataset = dist.distribute_datasets_from_function(
      lambda ctx: task.data.train_dataset(
          ctx, global_batch_size=global_batch_size, start_step=start_step))
  eval_steps = []  # Filled by eval_fn, which sees the real pipeline count.

  def eval_fn(ctx):
    steps = task.data.eval_steps(num_pipelines=ctx.num_input_pipelines,
                                 global_batch_size=eval_batch_size)
    eval_steps.append(steps)
    return task.data.eval_dataset(ctx, global_batch_size=eval_batch_size,
                                  steps=steps)

  eval_dataset = dist.distribute_datasets_from_function(eval_fn)
  if len(set(eval_steps)) != 1:
    raise RuntimeError(f'Input pipelines disagree on eval steps: {eval_steps}')
  eval_steps = eval_steps[0]
  num_eval_examples = task.data.num_eval_examples()

  writers = ((tf.summary.create_file_writer(os.path.join(model_dir, 'train')),
              tf.summary.create_file_writer(os.path.join(model_dir, 'eval')))
             if chief else (tf.summary.create_noop_writer(),) * 2)
  with writers[0].as_default(step=start_step):
    tf.summary.text('gin/config', '    ' + gin.config_str().replace(
        '\n', '\n    '))

  controller = controller_lib.Controller(
      train_loop=step_lib.make_train_loop(
          strategy=dist, model=model, optimizer=optimizer, task=task,
          global_batch_size=global_batch_size, step=step, **gradient_options),
      eval_loop=step_lib.make_eval_loop(strategy=dist, model=model, task=task),
      train_iterator=iter(train_dataset),
      make_eval_iterator=lambda: iter(eval_dataset), eval_steps=eval_steps,
      step=step, schedule=schedule, global_batch_size=global_batch_size,
      learning_rate=optimizer.schedule, quality=task.quality,
      target=task.target_quality, stop_at_target=stop_at_target,
      checkpointer=checkpointer, mlperf=mlperf, summary_writers=writers,
      explain_input_error=task.explain_input_error,
      expected_eval_count=num_eval_examples)
  controller.compile()

  mlperf.event(mlc.GLOBAL_BATCH_SIZE, global_batch_size)
  mlperf.event(mlc.GRADIENT_ACCUMULATION_STEPS, 1)
  mlperf.event(mlc.TRAIN_SAMPLES, task.num_train_examples)
  mlperf.event(mlc.EVAL_SAMPLES, num_eval_examples)
  decay_steps = optimizer.schedule.decay_steps
  for key, value in {**optimizer.mlperf_params(decay_steps=decay_steps),
                     **task.mlperf_params(per_replica_batch_size=per_replica,
                                          num_replicas=replicas)}.items():
    mlperf.event(key, value)
  mlperf.end(mlc.INIT_STOP)

  result = controller.run()
  result.model = model
  print(f'run {result.status}: {task.quality_name} '
        f'{result.quality if result.quality is not None else float("nan"):.4f} '
        f'at step {result.step}; time to train {result.time_to_train:.1f} s',
        flush=True)
  return result


# -- Command line ---------------------------------------------------------------

GIN_SUGAR = '--gin.'


def split_gin_sugar(argv: list[str]) -> tuple[list[str], list[str]]:
  """Turns `--gin.NAME=VALUE` arguments into gin bindings `NAME=VALUE`."""
  rest, bindings = [], []
  for arg in argv:
    if arg.startswith(GIN_SUGAR):
      name, sep, value = arg[len(GIN_SUGAR):].partition('=')
      if not sep:
        raise app.UsageError(f'{arg} needs a value: --gin.NAME=VALUE')
      bindings.append(f'{name} = {value}')
    else:
      rest.append(arg)
  return rest, bindings


def define_flags():
  flags.DEFINE_multi_string('gin_file', [], 'Gin config files, in order.')
  flags.DEFINE_multi_string('gin_param', [],
                            'Gin bindings, e.g. "DATA_DIR=\'gs://b/d\'".')
  flags.DEFINE_string('model_dir', None, 'Where the run writes everything.')
  flags.DEFINE_string('tpu', '', 'TPU name, grpc address or "local".')
  flags.mark_flag_as_required('model_dir')


def main(argv, sugar_bindings):
  del argv
  import train as this_module  # The module gin files configure, not __main__.
  flag_values = flags.FLAGS
  gin.add_config_file_search_path(os.path.dirname(os.path.abspath(__file__)))
  gin.parse_config_files_and_bindings(
      flag_values.gin_file,
      list(flag_values.gin_param) + sugar_bindings + [
          f'train.train.model_dir = {flag_values.model_dir!r}'] +
      ([f'train.train.tpu = {flag_values.tpu!r}'] if flag_values.tpu else []),
      finalize_config=True)
  model_dir = flag_values.model_dir
  check_writable(model_dir)
  write_text(os.path.join(model_dir, 'config.gin'), gin.config_str())
  result = gin.get_configurable(this_module.train)()
  write_text(os.path.join(model_dir, 'operative_config.gin'),
             gin.operative_config_str())
  return 0 if result.status == 'success' else 1


if __name__ == '__main__':
  define_flags()
  remaining, sugar = split_gin_sugar(sys.argv)
  app.run(lambda argv: main(argv, sugar), argv=remaining)
