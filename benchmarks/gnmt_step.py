"""Benchmark: our GNMT training step against the MLPerf reference's GNMT in
PyTorch at the same shapes.

  make torch_venv   # once: .venv-torch with requirements-torch.txt
  python -m benchmarks.gnmt_step [--batch=64] [--length=24]
      [--units=128,256] [--vocab=8192] [--rounds=5]

TF Model Garden has no GNMT; the MLCommons reference's PyTorch GNMT
(`torch.nn.LSTM` layers: benchmarks/torch_gnmt_worker.py, its own venv and
process, torch CPU) is what users pick instead. Ours: models/gnmt/model.GNMT
through the runtime's train loop (GnmtTask's bucket switch with one bucket
of `--length`, the summed label-smoothed loss, clip to norm 5, Adam), float32,
one replica. Same batch, sentence length (every sentence full, no padding),
units, vocabulary, dropout 0.2. Interleaved round by round: each round
times `--steps` of ours, then the worker's; medians.

Not the same work: the reference's decoder attention layer has no input
feeding (one LSTM call over all steps, then attention for all steps at
once); Google's, and ours, feeds each step's context into the next step,
so the attention runs inside the time loop, step by step.
"""

import os
import statistics
import types

from absl import app
from absl import flags
import numpy as np

from benchmarks import common
from benchmarks.common import StepWorker
from benchmarks.common import timed
from core import entry_point

FLAGS = flags.FLAGS


def ours(batch: int, length: int, units: int, vocab: int, steps: int):
  """A callable running `steps` train steps of our GNMT."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from distribution import gradients  # pylint: disable=import-outside-toplevel
  # pylint: disable-next=import-outside-toplevel
  from models.gnmt import model as gnmt
  # pylint: disable-next=import-outside-toplevel
  from models.gnmt import task as gnmt_task
  from training import optimizers  # pylint: disable=import-outside-toplevel
  from training import schedules  # pylint: disable=import-outside-toplevel
  from training import step as step_lib  # pylint: disable=import-outside-toplevel
  strategy = tf.distribute.get_strategy()
  model = gnmt.GNMT(vocab_size=vocab, units=units)
  # The task's loss alone: its data is one bucket of `length`.
  task = gnmt_task.GnmtTask(model=None,
                            data=types.SimpleNamespace(buckets=[(length, 1)]))
  opt = optimizers.Adam()
  opt.build(model.trainable_variables)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.PolynomialWarmup(base=1e-3, total_steps=10**6),
      task=task, step=tf.Variable(0, dtype=tf.int64),
      gradients=gradients.GradientOptions(clip_norm=5.0))
  rng = np.random.default_rng(0)
  ids = lambda: rng.integers(3, vocab, [batch, length]).astype(np.int32)  # noqa: E731
  target = ids()
  data = tf.data.Dataset.from_tensors({
      'source': ids(), 'target_output': target,
      'target_input': np.pad(target[:, :-1], [[0, 0], [1, 0]]),
      'source_length': np.full(batch, length, np.int32),
      'target_length': np.full(batch, length, np.int32),
      'bucket': np.zeros(batch, np.int32)}).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(data))
  n = tf.constant(steps)
  return lambda: float(loop(iterator, n))


def main(argv):
  del argv
  from core import startup  # pylint: disable=import-outside-toplevel
  startup.import_tensorflow()
  rows = []
  for units in map(int, FLAGS.units):
    shape = dict(batch=FLAGS.batch, length=FLAGS.length, units=units,
                 vocab=FLAGS.vocab)
    worker = StepWorker(
        FLAGS.torch_python,
        [os.path.join(common.ROOT, 'benchmarks', 'torch_gnmt_worker.py'),
         *(f'--{k}={v}' for k, v in shape.items()), f'--steps={FLAGS.steps}'],
        setup='make torch_venv')
    try:
      run = ours(**shape, steps=FLAGS.steps)
      run()  # Compile.
      times = {'ours': [], 'torch': []}
      for _ in range(FLAGS.rounds):
        times['ours'].append(timed(run) / FLAGS.steps)
        times['torch'].append(worker.run() / FLAGS.steps)
    finally:
      worker.close()
    step = {k: statistics.median(v) for k, v in times.items()}
    print(f'--- GNMT, {units} units, batch {FLAGS.batch}, length '
          f'{FLAGS.length}, vocabulary {FLAGS.vocab}, {FLAGS.rounds} '
          'interleaved rounds (medians)', flush=True)
    print(f'  ours   {step["ours"]:.3f} s/step', flush=True)
    print(f'  torch  {step["torch"]:.3f} s/step (the MLPerf reference\'s '
          'architecture)', flush=True)
    print(f'  speed-up over torch: {step["torch"] / step["ours"]:.2f}x',
          flush=True)
    rows.append(common.step_row(
        f'GNMT {units} units', 'float32', FLAGS.batch, step['ours'],
        'torch (MLPerf reference GNMT)', step['torch'], target='>= 1.0',
        digits=2))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 64, 'Sentences a step.')
  flags.DEFINE_integer('length', 24, 'Source and target length.')
  flags.DEFINE_list('units', ['128', '256'], 'Widths to compare.')
  flags.DEFINE_integer('vocab', 8192, 'Vocabulary size.')
  flags.DEFINE_integer('steps', 2, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_string('torch_python',
                      os.path.join(common.ROOT, '.venv-torch', 'bin',
                                   'python'),
                      "torch's Python (make torch_venv).")
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
