"""What the runtime calls: the written contracts of task, data, model, optimizer.

The runtime (train.py, training/) calls only the members below; each model
provides one Task (models/resnet/task.py, models/bert/task.py) and the runtime
knows nothing else about it. training/ does not import models/.
"""

from typing import Callable, Mapping, Protocol, Sequence

import numpy as np
import tensorflow as tf

from training.losses import LossShare


class TaskData(Protocol):
  """A model's input pipeline, built per host from a tf.distribute.InputContext."""

  num_train_examples: int  # One epoch of training data (MLPerf train_samples).

  def check(self) -> None:
    """Fails fast, naming the cause, on missing files or a wrong schema."""

  def steps_per_epoch(self, global_batch_size: int) -> float:
    """Training steps that make one epoch (0 when the data cannot say)."""

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int,
                    start_step: int = 0) -> tf.data.Dataset:
    """Per-replica training batches, positioned at training step start_step.

    How long positioning takes must not grow with start_step: a run resumed
    late must not re-read everything read before the checkpoint.
    """

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    """Eval steps that cover every host's examples once."""

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int,
                   cache: bool = True) -> tf.data.Dataset:
    """Exactly `steps` per-replica eval batches each, padding with `mask` 0,
    in file order. `cache`: may keep the batches in memory for the next
    evaluation (in-loop eval repeats; the inference library reads once)."""

  def num_eval_examples(self) -> int:
    """Real (unpadded) eval examples over all hosts."""


class Generations(Protocol):
  """Optional, on a task's `data`: training examples the model itself makes
  (MiniGo's self-play). Training runs in generations of
  `steps_per_generation` steps; model g + 1 is trained on examples that
  include model g's. Before the run trains model g + 1 (g = 0 for a new
  run: the initial weights', played during init as Google's bootstrap was
  played before their clock), it hands model g's weights to `produce`;
  then it reads `train_dataset` anew from that generation's first step.
  After each generation the run saves a checkpoint: a killed run resumes
  at its last whole generation.
  """

  steps_per_generation: int
  directory: str | None  # Where generations go; None: the runtime sets
  # model_dir/generations.

  def produce(self, generation: int, weights: Mapping[str, np.ndarray], *,
              worker: int, workers: int,
              infer: Callable[[np.ndarray], dict] | None) -> dict:
    """Makes model `generation`'s examples with `weights` (the model's
    variables by name), this worker's share of them, and saves the weights
    as that generation's model. `infer` runs the task's `serving_fn` with
    the same weights on this worker's devices (a NumPy batch in, NumPy
    outputs by name: training/device_inference.py), for data making that
    evaluates the model there (None if the task serves nothing). Returns MLPerf keys whose mean over the
    run's generations is logged at its end (Google's
    actual_selfplay_games_per_generation). Idempotent: what a killed run
    left complete is kept, what it left half-made is made again."""


class Evaluation(Protocol):
  """How the runtime evaluates (training/evaluator.Evaluator is the device
  one). `results` is a collective: every worker calls it at the same
  points and gets the same results."""

  asynchronous: bool  # Results may come at a later loop end.

  def compile(self) -> None:
    """Readies the evaluation (compiles; no state changes)."""

  def start(self, step: int) -> None:
    """Evaluates the current weights (those of `step`)."""

  def results(self, *, wait: bool) -> list:
    """training.evaluator.EvalResult of the evaluations whose quality is
    known now, oldest first (with `wait`: every one started)."""

  def cancel(self) -> list[int]:
    """Drops the evaluations in flight; returns their steps."""


class OwnEvaluation(Protocol):
  """Optional, on a task whose quality is not made of eval batches on the
  devices (MiniGo: games against a target, in host processes): the runtime
  builds no eval pipeline and evaluates with this."""

  def make_evaluator(self, model, *, chief: bool, worker_sum) -> Evaluation:
    """The evaluation of `model`'s weights (worker_sum: distribution.
    strategy.WorkerSum, to agree on results across workers)."""


class HostMetric(Protocol):
  """A quality computed on the host from per-example eval outputs.

  For metrics that are not sums over examples (ROC AUC, BLEU, COCO mAP). The
  runtime gathers the task's `eval_outputs` from every replica and host,
  drops the padding, and calls `update` on the chief only, in eval order.
  """

  def reset(self) -> None:
    """Forgets the previous evaluation."""

  def update(self, outputs: Mapping[str, np.ndarray]) -> None:
    """Adds a chunk of real (unpadded) examples: each array's first axis."""

  def result(self) -> dict[str, float]:
    """The metric values over everything added since `reset`."""


class PerHostMetric(HostMetric, Protocol):
  """A HostMetric whose examples stay on their host: each host reduces its
  own examples to statistics (BLEU's n-gram counts, a histogram, COCO's
  per-image matches), and only those travel between hosts.

  The runtime feeds every worker's metric with its own replicas' examples
  (not gathered across hosts), gathers every worker's `statistics()` to
  every worker (in worker order) and calls `result_from` with them on each.
  With one worker, result_from([statistics()]) must equal result().
  """

  def statistics(self) -> np.ndarray:
    """This host's statistics: a 1-D float64 array (any length; integer
    values below 2^53 travel exactly)."""

  def result_from(self, parts: Sequence[np.ndarray]) -> dict[str, float]:
    """The metric values of every host's statistics; raises if they show
    examples missing or repeated."""


def is_per_host(metric: HostMetric | None) -> bool:
  """Whether `metric` implements PerHostMetric."""
  return callable(getattr(metric, 'statistics', None)) and callable(
      getattr(metric, 'result_from', None))


class Model(Protocol):
  """What the runtime needs of a model: a tf.Module with weights and state."""

  trainable_variables: Sequence[tf.Variable]
  # Non-trainable variables the train step replaces each step (batch-norm
  # moving statistics), by name; the step all-reduces their new values.
  state: Mapping[str, tf.Variable]


class LearningRateSchedule(Protocol):
  """The learning rate as a function of the global step.

  Gin binds the class with its hyper-parameters; the runtime calls it with the
  run's lengths: `schedule(steps_per_epoch=..., total_steps=...)`.
  """

  def __call__(self, step) -> tf.Tensor:
    """The learning rate at `step` (a scalar, float32)."""

  def describe(self) -> dict:
    """Hyper-parameters by generic name (base_learning_rate, decay_steps,
    warmup_steps, ...) for the optimizer's MLPerf keys."""


class Optimizer(Protocol):
  """A per-variable update rule with its slot variables."""

  slots: dict  # name -> slot tf.Variable; checkpointed with the model.

  def build(self, variables: Sequence[tf.Variable], *,
            make_slot=None) -> None:
    """Creates the slots (called under the strategy scope); `make_slot`
    (variable, name) -> slot variable overrides how (sharded slots)."""

  def slots_for(self, variables) -> list[tuple]:
    """Each variable's slots, in a fixed order."""

  def takes_decay(self, variable) -> bool:
    """Whether weight decay (and layer-wise scaling) applies to `variable`."""

  def apply(self, var, grad, slots, lr, step, *, decay: bool,
            norm=tf.norm) -> tuple:
    """The rule on values: (new weight, new slot values). Elementwise
    except through `norm` (tensor -> its L2 norm), so it runs on a shard of
    every tensor when `norm` sums over the shards. The tensors it takes
    norms of may not depend on a norm's value: weight-update sharding runs
    the rule once to collect them and sums all norms in one all-reduce."""

  def update(self, var, grad, slots, lr, step, *, decay: bool) -> list:
    """Applies one update to one device copy; returns the assign ops."""

  def update_sparse(self, var, grad: tf.IndexedSlices, slots, lr, step, *,
                    decay: bool) -> list:
    """`update` for a sparse gradient: an embedding lookup's, the rows the
    batch touched (`grad.indices`, repeats allowed: their values add up)
    and their values, summed over the replicas by the train step (an
    all-gather of indices and values, never a table-sized tensor). A rule
    that changes only those rows (and only their slots) scatters into
    them; one whose every row moves anyway may densify the gradient."""

  def loss_weight_decay(self) -> float:
    """An L2 coefficient the runtime adds to the loss (0 if decoupled)."""

  def mlperf_params(self, schedule: LearningRateSchedule) -> dict:
    """The optimizer's MLPerf hyper-parameter keys."""


class Task(Protocol):
  """Ties model, data, loss, eval metric and quality target.

  `loss_share`, `eval_sums`, `eval_outputs` and the model they call are
  traced without AutoGraph (training/step.py), as are the input pipelines'
  functions: branch on tensors with tf.cond and loop with tf.while_loop
  (a Python `if` on a tensor fails to trace, naming AutoGraph).
  """

  mlperf_benchmark: str  # submission_benchmark, e.g. 'resnet'.
  quality_name: str  # Printed with the final quality, e.g. 'top-1 accuracy'.
  quality_tag: str  # Its TensorBoard tag, e.g. 'top1_accuracy'.
  eval_sum_names: tuple[str, ...]  # Keys of eval_sums(); 'examples' among them.
  # Per-example eval outputs for a host metric, by name with their dtypes
  # (empty: sums only). Each has a fixed shape with the replica batch first;
  # 'mask' (1 real, 0 padding) is among them.
  eval_output_dtypes: Mapping[str, tf.DType]
  target_quality: float
  higher_is_better: bool  # False for error rates and losses.
  data: TaskData
  # Optional: the image feature SPATIAL_PARTITIONS splits along its height
  # (input_pipeline/spatial.py); tasks without one cannot be partitioned.
  # spatial_feature: str
  # Optional, once build_model has run: slices padded to a multiple of this
  # many rows (uneven partitioning; a model that masks the padding rows,
  # models/common/spatial.py). Absent or None: the height must divide.
  # spatial_row_multiple: int | None
  # Optional, for a benchmark judged on several figures at once (Mask
  # R-CNN: box and mask AP, both to reach their targets): `quality` is then
  # one number that reaches `target_quality` when every figure reaches its
  # own, and
  #   mlperf_quality_target: dict  -- the figures' targets, logged;
  #   def mlperf_eval_accuracy(self, metrics) -> dict  -- the figures, as
  #     MLPerf's eval_accuracy holds them ({"BBOX": .., "SEGM": ..});
  #   def quality_detail(self, metrics) -> str  -- the figures in words,
  #     printed with each evaluation.

  def build_model(self) -> Model:
    """The model; called under the strategy scope."""

  def loss_share(self, model, batch) -> tuple[LossShare, dict]:
    """This replica's share of the loss (training/losses.py helpers) and the
    model's new non-trainable state. The runtime sums the shares' gradients
    over replicas."""

  def eval_sums(self, model, batch) -> dict:
    """Metric sums over one replica's batch, including 'examples' (real,
    unpadded examples) by which the runtime checks eval coverage, and
    'loss' (the per-example loss summed) where the task has an eval loss:
    TensorBoard shows loss / examples."""

  def eval_outputs(self, model, batch) -> dict:
    """Per-example outputs named in eval_output_dtypes (with 'mask')."""

  def host_metric(self) -> HostMetric | None:
    """The host-side metric fed with eval_outputs, or None."""

  def quality(self, metrics: dict) -> float:
    """The quality figure from the eval sums (reduced over all replicas and
    steps) and the host metric's result, merged in one dict."""

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    """Task-specific MLPerf hyper-parameter keys."""

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    """MLPerf's epoch_num at a step, in the task's units (epochs for ResNet;
    steps or samples for BERT, by ruleset)."""

  def explain_input_error(self, error: Exception) -> str | None:
    """A message naming the bad input behind `error`, or None."""

  def serving_fn(self, model):
    """A tf.function with a dynamic-batch input signature for export."""

  # Inference (inference/): the model's name in user.conf lines (MLPerf
  # Inference's: resnet50, bert); which serving output answers a query, as
  # (name, numpy dtype); which eval fields the quality is judged against;
  # MLPerf Inference's performance sample count (the samples LoadGen holds
  # in memory at once); the serving inputs of an eval batch; the quality of
  # the responses (index -> array) against the eval references; and, by
  # scenario, TestSettings attributes of the model's benchmark that
  # LoadGen's built-in mlperf.conf lacks (empty where it has them).
  inference_model: str
  inference_output: tuple[str, str]
  inference_references: tuple[str, ...]
  inference_performance_samples: int
  inference_settings: Mapping[str, Mapping[str, float]]

  def inference_inputs(self, batch: dict) -> dict:
    """Serving-signature inputs from an eval-pipeline batch."""

  def inference_quality(self, responses: dict, references: dict) -> float:
    """The task's quality over LoadGen's responses."""


class QuantizedServing(Protocol):
  """Optional members of a task whose serving ends in float post-processing
  that INT8 should not touch (SSD's box decoding and NMS): the export adds
  `network_fn`'s signature (`network`), tools/quantize_tflite.py quantizes
  that one, and the TFLite backend applies `postprocess` to its outputs,
  so serving_fn(model)(x) == postprocess(network_fn(model)(x)).

  Attributes:
    float_outputs: `network` outputs whose last layers (back to and with
      the convolutions that make them) stay float in the INT8 model: an
      output one int8 scale cannot resolve (SSD's class logits).
  """

  float_outputs: tuple = ()

  def network_fn(self, model):
    """A tf.function from the serving inputs to the network's outputs."""

  def postprocess(self, outputs: dict) -> dict:
    """The serving outputs from `network_fn`'s (float, on the host)."""


class SumsOnly:
  """The eval-output members of Task for a quality made of sums alone (no
  host metric): ResNet top-1, BERT masked-LM accuracy."""

  eval_output_dtypes: Mapping[str, tf.DType] = {}

  def eval_outputs(self, model, batch) -> dict:
    del model, batch
    return {}

  def host_metric(self) -> None:
    return None


def reaches(quality: float, target: float, higher_is_better: bool) -> bool:
  """Whether `quality` meets `target` in the task's direction."""
  return quality >= target if higher_is_better else quality <= target
