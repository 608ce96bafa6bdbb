"""Benchmark: our ResNet-50, BERT-base and Transformer-base training steps vs
TF Model Garden's.

  make garden_venv   # once: .venv-garden with requirements-garden.txt
  python -m benchmarks.versus_garden [--rounds=5] [--steps=2]

Model Garden (tf-models-official 2.20.0 on TF 2.20, legacy Keras) is the
strongest public TensorFlow reference for these models; it runs in its own
environment and processes (benchmarks/garden_worker.py: one without
and one with XLA, the faster is the reference), ours in this one,
interleaved round by round: each round times `--steps` steps of ours, then
asks each worker to time as many of its own. Same model, batch, precision
and optimizer; synthetic inputs from a tf.data iterator on all sides:
- ResNet-50 v1.5, 224x224, 1000 classes, SGD momentum with L2 weight decay
  in the loss;
- BERT-base (12 x 768, seq 128, 20 predictions, dropout 0.1) with LAMB;
- Transformer-base (6 + 6 x 512, 8 heads, 2048, vocabulary 33,708, 64
  source and 64 target ids, dropout and label smoothing 0.1) with Adam
  (Model Garden's `official.nlp.tasks.translation` task and model);
- Mask R-CNN ResNet-50 FPN at 384x640, 91 classes, momentum SGD
  (`--models=maskrcnn`; Model Garden's `maskrcnn_resnetfpn_coco`, whose
  backbone and batch norms train, against ours with Google's freezing).
Prints the medians and our speed-up over the faster Model Garden variant.
"""

import os
import statistics
import time

from absl import app
from absl import flags

from benchmarks import common
from benchmarks.common import StepWorker
from core import entry_point
from core import startup

FLAGS = flags.FLAGS
ROOT = common.ROOT


def garden(python: str, model: str, dtype: str, batch: int, steps: int,
           xla: bool) -> StepWorker:
  """Model Garden's step in its own process (garden_worker.py)."""
  return StepWorker(
      python, [os.path.join(ROOT, 'benchmarks', 'garden_worker.py'),
               f'--model={model}', f'--dtype={dtype}', f'--batch={batch}',
               f'--steps={steps}', *(['--xla'] if xla else [])],
      setup='make garden_venv', env={'TF_USE_LEGACY_KERAS': '1',
                                     'TF_CPP_MIN_LOG_LEVEL': '2'})


def ours(model: str, dtype: str, batch: int, steps: int):
  """A callable running `steps` steps of our train loop, compiled: SGD
  momentum for ResNet-50 (Model Garden's `resnet_imagenet` optimizer), LAMB
  for BERT, Adam for the Transformer."""
  # Imported here, after main has loaded TensorFlow quietly (core/startup).
  from benchmarks import bert_step  # pylint: disable=import-outside-toplevel
  from benchmarks import resnet_step  # pylint: disable=import-outside-toplevel
  from benchmarks import transformer_step  # pylint: disable=import-outside-toplevel
  from training import optimizers  # pylint: disable=import-outside-toplevel
  if model == 'resnet50':
    run, _ = resnet_step.ours(dtype, batch, steps,
                              optimizer=optimizers.SgdMomentum)
  elif model == 'maskrcnn':
    from benchmarks import maskrcnn_step  # pylint: disable=import-outside-toplevel
    run, _ = maskrcnn_step.ours(dtype, batch, steps,
                                maskrcnn_step.BENCHMARK_SIZE)
  elif model == 'transformer_base':
    run, _ = transformer_step.ours(dtype, batch, steps)
  else:
    run, _ = bert_step.ours(dtype, batch, steps)
  run()  # Compile.
  return run


NAMES = {'resnet50': 'ResNet-50', 'bert_base': 'BERT-base',
         'transformer_base': 'Transformer-base',
         'maskrcnn': 'Mask R-CNN ResNet-50 FPN, 384x640'}


def main(argv):
  del argv
  startup.import_tensorflow()
  rows = []
  for model in FLAGS.models:
    for dtype in FLAGS.dtypes:
      gardens = {}
      try:
        for label, xla in (('model garden', False),
                           ('model garden xla', True)):
          gardens[label] = garden(FLAGS.garden_python, model, dtype,
                                  FLAGS.batch, FLAGS.steps, xla)
        our_run = ours(model, dtype, FLAGS.batch, FLAGS.steps)
        times = {'ours': [], **{label: [] for label in gardens}}
        for _ in range(FLAGS.rounds):
          start = time.perf_counter()
          our_run()
          times['ours'].append(time.perf_counter() - start)
          for label, worker in gardens.items():
            times[label].append(worker.run())
      finally:
        for worker in gardens.values():
          worker.close()
      step = {k: statistics.median(v) / FLAGS.steps for k, v in times.items()}
      print(f'--- {model}, {dtype}, batch {FLAGS.batch}, {FLAGS.rounds} '
            f'interleaved rounds of {FLAGS.steps} steps (medians)',
            flush=True)
      for k, v in step.items():
        print(f'  {k:18s} {v:.3f} s/step', flush=True)
      best = min(step[label] for label in gardens)
      print(f'  speed-up over the faster Model Garden: '
            f'{best / step["ours"]:.2f}x', flush=True)
      rows.append(common.step_row(
          NAMES.get(model, model), dtype, FLAGS.batch, step['ours'],
          'Model Garden', best, target='>= 1.2'))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 8, 'Global batch size.')
  flags.DEFINE_integer('steps', 2, 'Steps per timed call.')
  flags.DEFINE_multi_string('models', ['resnet50', 'bert_base'], 'Models.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_multi_string('dtypes', ['float32', 'bfloat16'], 'Precisions.')
  flags.DEFINE_string('garden_python',
                      os.path.join(ROOT, '.venv-garden', 'bin', 'python'),
                      "Model Garden's Python (make garden_venv).")
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
