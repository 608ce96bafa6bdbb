"""What the runtime needs from a model's task and its data: the whole contract.

The runtime (train.py, training/) calls only these members; each model
provides one Task (models/resnet_task.py is the first) and the runtime knows
nothing else about it.
"""

from typing import Protocol

import tensorflow as tf


class TaskData(Protocol):
  """A model's input pipeline, built per host from a tf.distribute.InputContext."""

  def check(self) -> None:
    """Fails fast, naming the cause, on missing files or a wrong schema."""

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int,
                    start_step: int = 0) -> tf.data.Dataset:
    """Per-replica training batches, positioned at training step start_step."""

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    """Eval steps that cover every host's examples once."""

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int) -> tf.data.Dataset:
    """Exactly `steps` per-replica eval batches each, padding masked out."""

  def num_eval_examples(self) -> int:
    """Real (unpadded) eval examples over all hosts."""


class Task(Protocol):
  """Ties model, data, loss, eval metric and quality target."""

  mlperf_benchmark: str  # submission_benchmark, e.g. 'resnet'.
  quality_name: str  # Printed with the final quality, e.g. 'top-1 accuracy'.
  eval_sum_names: tuple[str, ...]  # Keys of eval_sums(); 'examples' among them.
  num_train_examples: int  # One epoch (MLPerf train_samples).
  samples_per_epoch_num: int  # MLPerf epoch_num unit: an epoch, or 1 (BERT).
  target_quality: float
  data: TaskData

  def build_model(self) -> tf.Module:
    """The model; called under the strategy scope."""

  def per_example_loss(self, model, batch) -> tuple[tf.Tensor, dict]:
    """Per-example training losses and the model's new non-trainable state."""

  def eval_sums(self, model, batch) -> dict:
    """Metric sums over one replica's batch, including 'examples' (real,
    unpadded examples) by which the runtime checks eval coverage."""

  def quality(self, sums: dict) -> float:
    """The quality figure from sums reduced over all replicas and steps."""

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    """Task-specific MLPerf hyper-parameter keys."""

  def explain_input_error(self, error: Exception) -> str | None:
    """A message naming the bad input behind `error`, or None."""

  def serving_fn(self, model):
    """A tf.function with a dynamic-batch input signature for export."""

  # Inference (inference/): the model's name in user.conf lines (MLPerf
  # Inference's: resnet50, bert); which serving output answers a query, as
  # (name, numpy dtype); the serving inputs of an eval batch; the quality of
  # the responses (index -> array) against the eval references.
  inference_model: str
  inference_output: tuple[str, str]

  def inference_inputs(self, batch: dict) -> dict:
    """Serving-signature inputs from an eval-pipeline batch."""

  def inference_quality(self, responses: dict, references: dict) -> float:
    """The task's quality over LoadGen's responses."""
