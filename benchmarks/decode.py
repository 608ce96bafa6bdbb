"""Benchmark: the Transformer eval's beam search over the real eval set, in
its two forms (fixed shapes, dynamic) and by sentence order.

  python -m benchmarks.decode --gin_file=gin/transformer_quickstart.gin \
      --checkpoint_dir=runs/mt [--batch=256] [--rounds=3]

Restores the newest checkpoint of a training --model_dir, then decodes every
eval source (the eval pipeline's batches as one replica reads them, padding
rows included, as the eval step does) with each variant, interleaved round
by round in one process:
  fixed          the TPU form: every sentence of a batch searched until the
                 last one stops, each step attending to and reordering a
                 cache of source length + 50 positions;
  dynamic        the CPU/GPU default: a sentence leaves the search when its
                 own stop test holds, the cache grows a position a step;
  dynamic_sorted the same, with the sources sorted by length first.
Prints each variant's median wall time, generated tokens per second (tokens
up to and including EOS, padding rows not counted) and its speed-up over
`fixed`, and fails unless every variant gave every sentence the same ids.
"""

import os

from absl import app
from absl import flags
import numpy as np

from benchmarks import common
from core import entry_point

from core import startup

FLAGS = flags.FLAGS


def sources(task, batch: int) -> tuple[np.ndarray, np.ndarray]:
  """(every eval row's source ids [n, length], its index; -1 padding) in the
  eval pipeline's order for one replica."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  steps = task.data.eval_steps(num_pipelines=1, global_batch_size=batch)
  ds = task.data.eval_dataset(tf.distribute.InputContext(),
                              global_batch_size=batch, steps=steps,
                              cache=False)
  rows = [(b['inputs'].numpy(), b['index'].numpy()) for b in ds]
  return (np.concatenate([r[0] for r in rows]),
          np.concatenate([r[1] for r in rows]))


def generated_tokens(ids: np.ndarray, index: np.ndarray, eos: int) -> int:
  ended = ids == eos
  lengths = np.where(ended.any(1), ended.argmax(1) + 1, ids.shape[1])
  return int(lengths[index >= 0].sum())


def main(argv):
  del argv
  startup.import_tensorflow()
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from benchmarks.common import interleaved_medians  # pylint: disable=import-outside-toplevel
  from core import config as gin_config  # pylint: disable=import-outside-toplevel
  from input_pipeline import subwords  # pylint: disable=import-outside-toplevel

  gin_config.parse(FLAGS.gin_file, FLAGS.gin_param, unread_macros='known')
  task = gin_config.configured_task()
  path = tf.train.latest_checkpoint(os.path.join(FLAGS.checkpoint_dir,
                                                 'checkpoints'))
  if path is None:
    raise app.UsageError(f'No checkpoint under {FLAGS.checkpoint_dir}/'
                         'checkpoints: train first.')
  model = task.build_model()
  tf.train.Checkpoint(model=model).read(path).expect_partial()
  inputs, index = sources(task, FLAGS.batch)
  by_length = np.argsort((inputs > 0).sum(1), kind='stable')
  orders = {'file': np.arange(len(inputs)), 'sorted': by_length}
  translators = {}
  for cache in ('fixed', 'dynamic'):
    task.decode_shapes = cache  # Read when traced, just below.
    translators[cache] = tf.function(
        lambda x: task.translate(model, x)).get_concrete_function(
            tf.TensorSpec([FLAGS.batch, inputs.shape[1]], tf.int32))
  variants = {'fixed': ('fixed', 'file'), 'dynamic': ('dynamic', 'file'),
              'dynamic_sorted': ('dynamic', 'sorted')}
  results = {}

  def runner(name, cache, order):
    def run():
      rows = inputs[orders[order]]
      out = np.concatenate([
          translators[cache](tf.constant(rows[i:i + FLAGS.batch])).numpy()
          for i in range(0, len(rows), FLAGS.batch)])
      back = np.empty_like(out)
      back[orders[order]] = out
      results[name] = back
    return run

  med = interleaved_medians(
      {name: runner(name, *v) for name, v in variants.items()}, FLAGS.rounds)
  tokens = generated_tokens(results['fixed'], index, subwords.EOS_ID)
  print(f'--- {path}: {int((index >= 0).sum())} eval sentences of up to '
        f'{inputs.shape[1]} ids, batch {FLAGS.batch}, beam '
        f'{task.beam_size}, {FLAGS.rounds} interleaved rounds (medians)')
  for name in variants:
    same = np.array_equal(results[name][index >= 0],
                          results['fixed'][index >= 0])
    print(f'  {name:15s} {med[name]:7.2f} s  {tokens / med[name]:7.0f} '
          f'tokens/s  {med["fixed"] / med[name]:5.2f}x  same ids as fixed: '
          f'{same}')
    if not same:
      raise SystemExit(f'{name} decoded other ids than fixed.')
  print(common.page_rows([
      (f'decoding, beam {task.beam_size}, {int((index >= 0).sum())} '
       f'sentences, {name}', f'{med[name]:.2f} s',
       f'fixed shapes {med["fixed"]:.2f} s',
       f'**{med["fixed"] / med[name]:.2f}x**, the same ids')
      for name in variants if name != 'fixed']))


if __name__ == '__main__':
  flags.DEFINE_multi_string('gin_file', ['gin/transformer_quickstart.gin'],
                            'The training run\'s gin files.')
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_string('checkpoint_dir', None, 'A training --model_dir.')
  flags.DEFINE_integer('batch', 256, 'Sentences a decoding call.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.mark_flags_as_required(['checkpoint_dir'])
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
