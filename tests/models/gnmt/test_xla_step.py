"""GNMT's train step as a TPU compiles it: the pod config's program
(bfloat16, the bucket switch, Google's clip and Adam) through XLA, with
the time loops as they run and as tools.predict counts them."""

import gin
import pytest
import tensorflow as tf

from core import config as gin_config
from distribution import plan
from tools.predictor import cost
from training import step as step_lib


@pytest.mark.parametrize('time_loops', ['while', 'unrolled'])
def test_the_pod_configs_step_compiles_for_xla(time_loops):
  """The embedding lookups sit in the bucket switch's branches, whose
  gradients hand their dense shape out as a tensor XLA cannot fold; the
  clip densifies them, so the step gives them the tables' shapes
  (training/step.static_row_shapes; without it the compile stops on an
  UnsortedSegmentSum's size, as a TPU's would)."""
  gin.clear_config()
  try:
    gin_config.parse(['gin/gnmt_pod.gin'], [
        "DATA_DIR = 'synthetic'", 'UNITS = 64',
        f"TIME_LOOPS = '{time_loops}'",
        'input_pipeline.length_buckets.LengthBucketInput.synthetic = True'])
    task = gin_config.configured_task()
    optimizer = gin.query_parameter(
        'train.train.optimizer').scoped_configurable_fn()
    options = gin.get_configurable(plan.PlanOptions)()
    model = task.build_model()
  finally:
    gin.clear_config()
  assert model.dtype == tf.bfloat16
  optimizer.build(model.trainable_variables)
  task.data.shape_only(0)  # The 18-id bucket: the quickest to compile.
  loop = step_lib.make_train_loop(
      strategy=tf.distribute.get_strategy(), model=model, optimizer=optimizer,
      learning_rate=lambda s: 1e-3, task=task,
      step=tf.Variable(0, dtype=tf.int64), gradients=options.gradients)
  batch = next(iter(task.data.train_dataset(tf.distribute.InputContext(),
                                            global_batch_size=2)))
  assert batch['source'].shape == (2, 48) and int(batch['bucket'][0]) == 0
  # Op determinism off around the compile, as the count's (a deterministic
  # test earlier in the worker leaves it on).
  hlo = cost.hlo_text(loop.replica_step, (batch,))
  assert ('while' in hlo) == (time_loops == 'while')
