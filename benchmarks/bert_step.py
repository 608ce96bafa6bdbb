"""Benchmark: a BERT-base-shaped training step vs Keras 3 layers, MFU, and
create_pretraining_data throughput.

  python -m benchmarks.bert_step [--batch=8] [--rounds=5] [--steps=2]

Side by side in one process, interleaved round by round:
  (a) our BERT (12 x 768, 12 heads, seq 128, 20 predictions, dropout 0.1)
      train step through the runtime's loop with LAMB, vs the same shape built
      from Keras 3 `MultiHeadAttention` / `Dense` / `LayerNormalization` /
      `Embedding` layers trained with `model.fit` and `keras.optimizers.Lamb`,
      same batch and precision;
  (b) MFU: 3 x forward matmul FLOPs x batch / step time, against a 4096^2
      matmul of the same dtype timed in the same rounds;
  (c) create_pretraining_data on the Python documentation corpus, in input
      sentences (times dupe_factor) per second.
"""

import os
import tempfile
import time

from absl import app
from absl import flags
import keras
import tensorflow as tf

from benchmarks import common
from benchmarks.common import interleaved_medians
from benchmarks.common import matmul_peak
from core import entry_point
from input_pipeline.bert import BertPretrainingInput
from models.bert.model import Bert
from models.bert.model import exclude_from_weight_decay
from models.bert.task import BertPretrainingTask
from tools import build_bert_quickstart_data
from tools import build_vocab
from tools import create_pretraining_data
from training import optimizers
from training import schedules
from training import step as step_lib

FLAGS = flags.FLAGS
SEQ, PREDICTIONS, VOCAB = 128, 20, 30522


def synthetic(batch):
  return BertPretrainingInput(max_seq_length=SEQ,
                              max_predictions_per_seq=PREDICTIONS,
                              synthetic=True).train_dataset(
                                  tf.distribute.InputContext(),
                                  global_batch_size=batch)


def ours(dtype: str, batch: int, steps: int):
  strategy = tf.distribute.get_strategy()
  data = BertPretrainingInput(max_seq_length=SEQ,
                              max_predictions_per_seq=PREDICTIONS,
                              synthetic=True)
  task = BertPretrainingTask(
      model=lambda: Bert(size='base', vocab_size=VOCAB, compute_dtype=dtype),
      data=data)
  model = task.build_model()
  opt = optimizers.Lamb(exclude=exclude_from_weight_decay)
  opt.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.WarmupPolynomialDecay(base=1e-4,
                                                    total_steps=10**6),
      task=task, step=step)
  iterator = iter(strategy.experimental_distribute_dataset(synthetic(batch)))
  n = tf.constant(steps)
  return (lambda: float(loop(iterator, n))), model


def keras_bert(dtype: str):
  """BERT-base from Keras 3 layers: same shapes, untied output projection."""
  keras.mixed_precision.set_global_policy(
      'mixed_bfloat16' if dtype == 'bfloat16' else 'float32')
  try:
    ids = keras.Input((SEQ,), dtype='int32', name='input_ids')
    segments = keras.Input((SEQ,), dtype='int32', name='segment_ids')
    mask = keras.Input((SEQ,), dtype='int32', name='input_mask')
    positions = keras.Input((PREDICTIONS,), dtype='int32',
                            name='masked_lm_positions')
    x = (keras.layers.Embedding(VOCAB, 768)(ids) +
         keras.layers.Embedding(2, 768)(segments) +
         keras.layers.Embedding(SEQ, 768)(keras.ops.arange(SEQ)[None]))
    x = keras.layers.Dropout(0.1)(keras.layers.LayerNormalization()(x))
    attention_mask = keras.ops.cast(mask[:, None, :], 'bool')
    for _ in range(12):
      a = keras.layers.MultiHeadAttention(12, 64, dropout=0.1)(
          x, x, attention_mask=attention_mask)
      x = keras.layers.LayerNormalization()(x + keras.layers.Dropout(0.1)(a))
      h = keras.layers.Dense(3072, activation='gelu')(x)
      h = keras.layers.Dropout(0.1)(keras.layers.Dense(768)(h))
      x = keras.layers.LayerNormalization()(x + h)
    picked = keras.ops.take_along_axis(
        x, keras.ops.repeat(positions[:, :, None], 768, axis=2), axis=1)
    t = keras.layers.Dense(768, activation='gelu')(picked)
    mlm = keras.layers.Dense(VOCAB, dtype='float32', name='mlm')(
        keras.layers.LayerNormalization()(t))
    pooled = keras.layers.Dense(768, activation='tanh')(x[:, 0])
    nsp = keras.layers.Dense(2, dtype='float32', name='nsp')(pooled)
    model = keras.Model([ids, segments, mask, positions], [mlm, nsp])
    model.compile(optimizer=keras.optimizers.Lamb(1e-4),
                  loss=['sparse_categorical_crossentropy'] * 2,
                  jit_compile=False)
  finally:
    keras.mixed_precision.set_global_policy('float32')
  return model


def keras_fit(dtype: str, batch: int, steps: int):
  model = keras_bert(dtype)
  ds = synthetic(batch).map(lambda b: (
      (b['input_ids'], b['segment_ids'], b['input_mask'],
       b['masked_lm_positions']),
      (b['masked_lm_ids'], b['next_sentence_labels'])))
  return lambda: model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)


def pretraining_data_rate() -> str:
  with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, 'corpus.txt')
    build_bert_quickstart_data.write_corpus(
        build_bert_quickstart_data.python_docs_corpus(), corpus)
    vocab = os.path.join(tmp, 'vocab.txt')
    build_vocab.write_vocab(build_vocab.build_vocab(
        input_files=[corpus], vocab_size=4000), vocab)
    start = time.perf_counter()
    counts = create_pretraining_data.create(
        input_files=[corpus], vocab_file=vocab,
        output_files=[os.path.join(tmp, 'out')], max_seq_length=128,
        max_predictions_per_seq=20, dupe_factor=5)
    elapsed = time.perf_counter() - start
  return (f'{counts["sentences"]} sentences x dupe 5 -> '
          f'{counts["instances"]} instances in {elapsed:.1f} s: '
          f'{counts["sentences"] * 5 / elapsed:.0f} sentences/s, '
          f'{counts["instances"] / elapsed:.0f} instances/s')


def main(argv):
  del argv
  batch, steps, rounds = FLAGS.batch, FLAGS.steps, FLAGS.rounds
  rows = []
  for dtype in FLAGS.dtypes:
    our_run, model = ours(dtype, batch, steps)
    runners = {'ours': our_run,
               'keras 3 layers + fit': keras_fit(dtype, batch, steps)}
    mm, mm_flops = matmul_peak(dtype)
    runners['matmul'] = mm
    med = interleaved_medians(runners, rounds)
    peak = mm_flops / med['matmul']
    flops = 3 * model.forward_flops(SEQ, PREDICTIONS) * batch
    print(f'--- {dtype}, BERT-base shape, seq {SEQ}, batch {batch}, {rounds} '
          f'interleaved rounds of {steps} steps (medians)')
    for k in ('ours', 'keras 3 layers + fit'):
      t = med[k] / steps
      print(f'  {k:22s} {t:.3f} s/step  MFU {flops / t / peak:.3f}')
    print(f'  matmul 4096^2 {dtype}: {peak / 1e9:.0f} GFLOP/s')
    print(f'  speed-up vs Keras: {med["keras 3 layers + fit"] / med["ours"]:.2f}x')
    rows.append(common.step_row(
        'BERT-base', dtype, batch, med['ours'] / steps, 'Keras fit',
        med['keras 3 layers + fit'] / steps,
        mfu=flops / (med['ours'] / steps) / peak))
  print(common.page_rows(rows))
  print('create_pretraining_data:', pretraining_data_rate())


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 8, 'Global batch size.')
  flags.DEFINE_integer('steps', 2, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_multi_string('dtypes', ['float32', 'bfloat16'], 'Precisions.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
