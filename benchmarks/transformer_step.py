"""Benchmark: a Transformer-base training step's MFU, and beam-search
decoding speed.

  python -m benchmarks.transformer_step [--batch=16] [--rounds=5]

Side by side in one process, interleaved round by round:
  (a) our Transformer-base (6 + 6 layers, d 512, 8 heads, 2048, vocabulary
      33,708, dropout 0.1) train step through the runtime's loop with Adam,
      on rows of 64 source and 64 target ids; MFU = 3 x forward matmul FLOPs
      x batch / step time against a 4096^2 matmul of the same dtype timed in
      the same rounds;
  (b) beam search (beam 4, alpha 0.6) and greedy decoding of `--batch`
      sentences of 24 source ids, up to 24 + 50 steps, in generated tokens
      per second (tokens up to and including EOS).
The step against TF Model Garden's Transformer is in
benchmarks/versus_garden.py (`--models=transformer_base`).
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks import common
from benchmarks.common import interleaved_medians
from benchmarks.common import matmul_peak
from core import entry_point
from input_pipeline import subwords
from models.transformer.model import Transformer
from models.transformer import task as transformer_task
from training import optimizers
from training import schedules
from training import step as step_lib

FLAGS = flags.FLAGS
LENGTH, VOCAB = 64, 33708


def synthetic(batch: int, seed: int = 0) -> tf.data.Dataset:
  """Rows of one pair each: 64 source and 64 target ids, no padding."""
  rng = np.random.default_rng(seed)
  ids = lambda: tf.constant(rng.integers(3, VOCAB, [batch, LENGTH]), tf.int32)
  positions = tf.broadcast_to(tf.range(LENGTH), [batch, LENGTH])
  ones = tf.ones([batch, LENGTH], tf.int32)
  return tf.data.Dataset.from_tensors({
      'inputs': ids(), 'targets': ids(), 'inputs_segmentation': ones,
      'targets_segmentation': ones, 'inputs_position': positions,
      'targets_position': positions}).repeat()


def ours(dtype: str, batch: int, steps: int, size: str = 'base'):
  """(A callable running `steps` train steps, the model.) Adam as Model
  Garden's `wmt_transformer/large` (beta2 0.997, epsilon 1e-9)."""
  strategy = tf.distribute.get_strategy()
  model = Transformer(size=size, vocab_size=VOCAB, compute_dtype=dtype)
  task = transformer_task.TransformerTask(model=None, data=None)
  opt = optimizers.Adam(beta_2=0.997, epsilon=1e-9)
  opt.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.TransformerMlperf(
          base=2.0, model_dim=model.model_dim, warmup_steps=16000),
      task=task, step=step)
  iterator = iter(strategy.experimental_distribute_dataset(synthetic(batch)))
  n = tf.constant(steps)
  return (lambda: float(loop(iterator, n))), model


def decoder(model, decoder_name: str, batch: int):
  """(A callable decoding one batch, returning generated tokens.)"""
  task = transformer_task.TransformerTask(model=None, data=None,
                                          decoder=decoder_name)
  rng = np.random.default_rng(1)
  sources = np.zeros([batch, 24], np.int32)
  sources[:, :23] = rng.integers(3, VOCAB, [batch, 23])
  sources[:, 23] = subwords.EOS_ID
  translate = tf.function(lambda x: task.translate(model, x))
  inputs = tf.constant(sources)

  def run():
    ids = translate(inputs).numpy()
    ended = ids == subwords.EOS_ID
    lengths = np.where(ended.any(1), ended.argmax(1) + 1, ids.shape[1])
    return int(lengths.sum())

  run()  # Compile.
  return run


def main(argv):
  del argv
  batch, steps, rounds = FLAGS.batch, FLAGS.steps, FLAGS.rounds
  rows = []
  for dtype in FLAGS.dtypes:
    our_run, model = ours(dtype, batch, steps)
    our_run()  # Compile.
    mm, mm_flops = matmul_peak(dtype)
    med = interleaved_medians({'ours': our_run, 'matmul': mm}, rounds)
    peak = mm_flops / med['matmul']
    flops = 3 * model.forward_flops(LENGTH, LENGTH) * batch
    t = med['ours'] / steps
    print(f'--- {dtype}, Transformer-base, {LENGTH} + {LENGTH} ids, batch '
          f'{batch}, {rounds} interleaved rounds of {steps} steps (medians)')
    print(f'  ours {t:.3f} s/step  MFU {flops / t / peak:.3f}  '
          f'({flops / t / 1e9:.0f} GFLOP/s of {peak / 1e9:.0f})')
    rows.append((f'MFU, {dtype}, batch {batch}',
                 f'{flops / t / peak:.2f} ({t:.3f} s a step)',
                 f'a 4096^2 matmul of the same dtype, '
                 f'{peak / 1e9:.0f} GFLOP/s', '(>= 0.7)'))
    tokens = {}
    runners = {}
    for name in ('beam', 'greedy'):
      run = decoder(model, name, batch)
      runners[name] = (lambda run=run, name=name:
                       tokens.__setitem__(name, run()))
    med = interleaved_medians(runners, rounds)
    for name in ('beam', 'greedy'):
      print(f'  {name:6s} decode: {tokens[name]} tokens in {med[name]:.2f} s'
            f' = {tokens[name] / med[name]:.0f} tokens/s ({batch} sentences'
            f'{", 4 hypotheses each" if name == "beam" else ""})')
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 16, 'Global batch size.')
  flags.DEFINE_integer('steps', 2, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_multi_string('dtypes', ['float32', 'bfloat16'], 'Precisions.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
