"""TF Model Garden's ResNet-50, BERT-base, Transformer-base, DLRM or Mask
R-CNN training step, timed on request.

Runs in Model Garden's own environment (requirements-garden.txt: TF 2.20,
tf-models-official 2.20.0, legacy Keras), never in ours; it imports nothing
from this repository. benchmarks/versus_garden.py starts it:

  python benchmarks/garden_worker.py --model=resnet50 --dtype=float32 \
      --batch=8 --steps=3 [--xla]

Builds Model Garden's experiment with its task, model, optimizer and
metrics, and runs `task.train_step` in a tf.function loop over a synthetic
dataset, as its trainer does:
- resnet50: `resnet_imagenet` (ResNet-50, SGD momentum, L2 weight decay in
  the loss), 224x224 images;
- bert_base: `bert/pretraining` (BERT-base encoder with masked-LM and
  next-sentence heads), sequence 128, 20 predictions, dropout 0.1, with
  LAMB (weight decay 0.01 except LayerNorm and biases) as ours.
- dlrm: `official.recommendation.ranking`'s RankingTask (tfrs's Ranking
  model: its TPUEmbedding layer, which on CPU looks up plain tables, dot
  interactions, MLPs), SGD for the tables and the dense layers, tables of
  DLRM_VOCAB's sizes with the first `--rows` rows, width 16, MLPs 64-16
  and 64-32-1 (benchmarks/dlrm_step.py's).
- maskrcnn: `maskrcnn_resnetfpn_coco` (ResNet-50 FPN Mask R-CNN, its
  backbone and batch norms trained, 128 mask RoIs an image), 91 classes, at
  MASKRCNN_SIZE (benchmarks/maskrcnn_step.py's), no initial checkpoint;
  each image of the batch made by Model Garden's own training parser
  (maskrcnn_input.Parser) from MASKRCNN_OBJECTS random boxes whose masks
  fill them.
`--xla` compiles the loop with XLA (Model Garden's BERT experiments turn
XLA on). Prints `ready` once compiled; then each line `run` on stdin runs
`--steps` steps and prints the seconds they took; EOF ends it.
"""

import argparse
import os

import worker_protocol  # A sibling module: this runs as a script.


MASKRCNN_SIZE = (384, 640)
MASKRCNN_OBJECTS = 4


def _maskrcnn(batch: int):
  """(Model Garden's Mask R-CNN config, one batch from its own parser)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import exp_factory  # pylint: disable=g-import-not-at-top
  from official.vision import registry_imports  # pylint: disable=g-import-not-at-top,unused-import
  from official.vision.dataloaders import maskrcnn_input  # pylint: disable=g-import-not-at-top

  height, width = MASKRCNN_SIZE
  config = exp_factory.get_exp_config('maskrcnn_resnetfpn_coco')
  config.task.init_checkpoint = None
  config.task.model.input_size = [height, width, 3]
  config.task.model.num_classes = 91
  model = config.task.model
  parser = maskrcnn_input.Parser(
      output_size=[height, width], min_level=model.min_level,
      max_level=model.max_level, num_scales=model.anchor.num_scales,
      aspect_ratios=model.anchor.aspect_ratios,
      anchor_size=model.anchor.anchor_size, include_mask=True)
  rng = np.random.default_rng(0)
  examples = []
  for i in range(batch):
    corners = np.sort(rng.uniform(size=(MASKRCNN_OBJECTS, 2, 2)), axis=1)
    boxes = np.stack([corners[:, 0, 0], corners[:, 0, 1], corners[:, 1, 0],
                      corners[:, 1, 1]], axis=1).astype(np.float32)
    masks = np.zeros((MASKRCNN_OBJECTS, height, width), np.float32)
    for k, (y0, x0, y1, x1) in enumerate(boxes):
      masks[k, int(y0 * height):int(y1 * height) + 1,
            int(x0 * width):int(x1 * width) + 1] = 1
    examples.append(parser._parse_train_data({  # pylint: disable=protected-access
        'image': tf.constant(rng.integers(0, 256, (height, width, 3)),
                             tf.uint8),
        'groundtruth_boxes': tf.constant(boxes),
        'groundtruth_classes': tf.constant(
            rng.integers(1, 91, MASKRCNN_OBJECTS), tf.int64),
        'groundtruth_is_crowd': tf.zeros([MASKRCNN_OBJECTS], tf.bool),
        'groundtruth_instance_masks': tf.constant(masks),
        'source_id': tf.constant(str(i)), 'height': height,
        'width': width}))
  return config, tf.nest.map_structure(lambda *x: tf.stack(x), *examples)


def _experiment(model_name: str, batch: int):
  """(Model Garden's config, one synthetic batch) for the model."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import exp_factory  # pylint: disable=g-import-not-at-top
  from official.nlp.configs import pretraining_experiments  # pylint: disable=g-import-not-at-top,unused-import
  from official.vision import registry_imports  # pylint: disable=g-import-not-at-top,unused-import

  if model_name == 'maskrcnn':
    return _maskrcnn(batch)
  if model_name == 'resnet50':
    config = exp_factory.get_exp_config('resnet_imagenet')
    config.task.model.input_size = [224, 224, 3]
    return config, (tf.random.uniform([batch, 224, 224, 3]),
                    tf.random.uniform([batch], 0, 1000, tf.int32))
  config = exp_factory.get_exp_config('bert/pretraining')
  config.trainer.optimizer_config.optimizer.type = 'lamb'
  config.trainer.optimizer_config.optimizer.lamb.weight_decay_rate = 0.01
  config.trainer.optimizer_config.optimizer.lamb.exclude_from_weight_decay = [
      'LayerNorm', 'layer_norm', 'bias']
  # The experiment leaves the schedule's lengths to the user.
  config.trainer.optimizer_config.learning_rate.polynomial.decay_steps = 10**6
  config.trainer.optimizer_config.warmup.polynomial.warmup_steps = 10**4
  seq, predictions = 128, 20
  ids = lambda shape, top: tf.random.uniform(shape, 0, top, tf.int32)
  return config, {
      'input_word_ids': ids([batch, seq], 30522),
      'input_mask': tf.ones([batch, seq], tf.int32),
      'input_type_ids': ids([batch, seq], 2),
      'masked_lm_positions': ids([batch, predictions], seq),
      'masked_lm_ids': ids([batch, predictions], 30522),
      'masked_lm_weights': tf.ones([batch, predictions]),
      'next_sentence_labels': ids([batch, 1], 2)}


def _translation(batch: int, dtype: str):
  """Model Garden's translation task, model and optimizer, one batch."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import base_task  # pylint: disable=g-import-not-at-top
  from official.core import exp_factory  # pylint: disable=g-import-not-at-top
  from official.modeling import optimization  # pylint: disable=g-import-not-at-top
  from official.modeling import performance  # pylint: disable=g-import-not-at-top
  from official.nlp.configs import wmt_transformer_experiments  # pylint: disable=g-import-not-at-top,unused-import
  from official.nlp.tasks import translation  # pylint: disable=g-import-not-at-top

  class Task(translation.TranslationTask):
    def __init__(self, params):  # pylint: disable=super-init-not-called
      base_task.Task.__init__(self, params)
      self._vocab_size, self._eos_id = 33708, 1
      self._sentencepiece_model_path = ''

  config = exp_factory.get_exp_config('wmt_transformer/large')
  config.task.model = translation.ModelConfig()  # Transformer-base.
  config.runtime.mixed_precision_dtype = dtype
  performance.set_mixed_precision_policy(dtype)
  task = Task(config.task)
  model = task.build_model()
  factory = optimization.OptimizerFactory(config.trainer.optimizer_config)
  optimizer = factory.build_optimizer(factory.build_learning_rate())
  ids = lambda: tf.random.uniform([batch, 64], 3, 33708, tf.int32)
  return task, model, optimizer, {'inputs': ids(), 'targets': ids()}


DLRM_VOCAB = (1642, 943, 795, 21, 19, 17, 9, 7)  # After the first table.


def _dlrm(batch: int, rows: int):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import exp_factory  # pylint: disable=g-import-not-at-top
  from official.recommendation.ranking import task as ranking  # pylint: disable=g-import-not-at-top
  config = exp_factory.get_exp_config('dlrm_criteo')
  model = config.task.model
  model.vocab_sizes = [rows, *DLRM_VOCAB]
  model.num_dense_features = 3
  model.embedding_dim, model.bottom_mlp, model.top_mlp = 16, [64, 16], [
      64, 32, 1]
  model.use_partial_tpu_embedding = False
  config.trainer.optimizer_config.dense_optimizer = 'SGD'
  task = ranking.RankingTask(params=config.task, trainer_config=config.trainer)
  keras_model = task.build_model()
  sparse = {str(i): tf.random.uniform([batch], 0, v, tf.int32)
            for i, v in enumerate(model.vocab_sizes)}
  labels = tf.cast(tf.random.uniform([batch], 0, 2, tf.int32), tf.float32)
  element = ({'dense_features': tf.random.uniform([batch, 3]),
              'sparse_features': sparse}, labels)
  return task, keras_model, element


def build(model_name: str, dtype: str, batch: int, xla: bool,
          rows: int = 10000):
  """Model Garden's train loop over a synthetic dataset."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import task_factory  # pylint: disable=g-import-not-at-top
  from official.modeling import optimization  # pylint: disable=g-import-not-at-top
  from official.modeling import performance  # pylint: disable=g-import-not-at-top

  if model_name == 'transformer_base':
    task, model, optimizer, element = _translation(batch, dtype)
    metrics = None
  elif model_name == 'dlrm':
    task, model, element = _dlrm(batch, rows)
    optimizer, metrics = model.optimizer, model.metrics
  else:
    config, element = _experiment(model_name, batch)
    config.task.train_data.global_batch_size = batch
    config.runtime.mixed_precision_dtype = dtype
    performance.set_mixed_precision_policy(dtype)
    task = task_factory.get_task(config.task)
    model = task.build_model()
    factory = optimization.OptimizerFactory(config.trainer.optimizer_config)
    optimizer = factory.build_optimizer(factory.build_learning_rate())
    metrics = task.build_metrics(training=True)
  iterator = iter(tf.data.Dataset.from_tensors(element).repeat())

  # With XLA, the step is compiled and the loop around it is not (the
  # iterator cannot be), as Model Garden's trainer does it.
  @tf.function(jit_compile=xla)
  def step(inputs):
    task.train_step(inputs, model, optimizer, metrics)

  @tf.function
  def loop(num_steps):
    for _ in tf.range(num_steps):
      step(next(iterator))

  return loop


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--model', default='resnet50',
                      choices=('resnet50', 'bert_base', 'transformer_base',
                               'dlrm', 'maskrcnn'))
  parser.add_argument('--rows', type=int, default=10000,
                      help='dlrm: rows of the first table.')
  parser.add_argument('--xla', action='store_true')
  parser.add_argument('--dtype', default='float32')
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--steps', type=int, default=3)
  args = parser.parse_args()
  # Model Garden 2.20 is written for Keras 2 (tf_keras); before TF loads.
  os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  loop = build(args.model, args.dtype, args.batch, args.xla, args.rows)
  steps = tf.constant(args.steps)
  loop(steps)  # Compile (and warm up).
  worker_protocol.serve(lambda: loop(steps))


if __name__ == '__main__':
  main()
