"""Benchmark: our Mask R-CNN training step vs torchvision's
`maskrcnn_resnet50_fpn`.

  make torch_venv   # once: .venv-torch with requirements-torch.txt
  python -m benchmarks.versus_torchvision_maskrcnn [--batch=2] [--rounds=3]

What users pick for Mask R-CNN outside TensorFlow: torchvision's
(benchmarks/torchvision_maskrcnn_worker.py, its own venv and process, torch
CPU), set to Google's v0.7 recipe where it has the knob. Same image size
(`--height` x `--width`, landscape, already at the network's size),
classes (91), batch, precision, optimizer (momentum SGD, weight decay 1e-4),
objects an image. Interleaved round by round: each round times `--steps` of
ours, then the worker's. torchvision's step includes its anchor matching and
mask cropping (done on the host in our pipeline, Google's); ours starts
from the host's targets.
"""

import os
import statistics

from absl import app
from absl import flags

from benchmarks import common
from benchmarks.common import StepWorker
from benchmarks.common import timed
from benchmarks import maskrcnn_step
from core import entry_point

FLAGS = flags.FLAGS
ROOT = common.ROOT


def main(argv):
  del argv
  rows = []
  for dtype in FLAGS.dtypes:
    worker = StepWorker(
        FLAGS.torch_python,
        [os.path.join(ROOT, 'benchmarks', 'torchvision_maskrcnn_worker.py'),
         f'--dtype={dtype}', f'--batch={FLAGS.batch}', f'--steps={FLAGS.steps}',
         f'--height={FLAGS.height}', f'--width={FLAGS.width}'],
        setup='make torch_venv')
    try:
      run, _ = maskrcnn_step.ours(dtype, FLAGS.batch, FLAGS.steps,
                                  (FLAGS.height, FLAGS.width))
      run()  # Compile.
      times = {'ours': [], 'torchvision': []}
      for _ in range(FLAGS.rounds):
        times['ours'].append(timed(run) / FLAGS.steps)
        times['torchvision'].append(worker.run() / FLAGS.steps)
    finally:
      worker.close()
    step = {k: statistics.median(v) for k, v in times.items()}
    print(f'--- Mask R-CNN ResNet-50 FPN, {dtype}, batch {FLAGS.batch}, '
          f'{FLAGS.height}x{FLAGS.width}, {FLAGS.rounds} interleaved rounds '
          '(medians)', flush=True)
    print(f'  ours         {step["ours"]:.3f} s/step', flush=True)
    print(f'  torchvision  {step["torchvision"]:.3f} s/step', flush=True)
    print(f'  speed-up over torchvision: '
          f'{step["torchvision"] / step["ours"]:.2f}x', flush=True)
    rows.append(common.step_row(
        f'Mask R-CNN, {FLAGS.height}x{FLAGS.width}', dtype, FLAGS.batch,
        step['ours'], 'torchvision', step['torchvision'], target='>= 1.0',
        digits=2))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 2, 'Global batch size.')
  flags.DEFINE_integer('steps', 1, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_integer('height', 384, 'Image height (a multiple of 64).')
  flags.DEFINE_integer('width', 640, 'Image width (a multiple of 64).')
  flags.DEFINE_multi_string('dtypes', ['float32'], 'Precisions.')
  flags.DEFINE_string('torch_python',
                      os.path.join(ROOT, '.venv-torch', 'bin', 'python'),
                      "torch's Python (make torch_venv).")
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
