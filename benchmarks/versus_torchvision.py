"""Benchmark: our SSD300-ResNet34 training step vs torchvision's, and MFU.

  make torch_venv   # once: .venv-torch with requirements-torch.txt
  python -m benchmarks.versus_torchvision [--batch=8] [--rounds=3]

TF Model Garden has no SSD-ResNet34; torchvision's `SSD` with a ResNet-34
backbone built as the MLCommons reference builds it is what users pick
instead (benchmarks/torchvision_ssd_worker.py, its own venv and
process, torch CPU). Same image size (300x300), classes (81), batch,
precision, optimizer (momentum SGD, weight decay 5e-4), synthetic images
and boxes. Interleaved round by round: each round times `--steps` of ours,
then the worker's. torchvision's step includes its box matching (done on
the host in our pipeline); ours starts from encoded targets. MFU: 3 x the
forward convolutions' FLOPs x batch / our step time, against a chain of
4096x4096 matmuls of the same dtype timed in the same rounds.
"""

import os
import statistics

from absl import app
from absl import flags

from benchmarks import common
from benchmarks.common import matmul_peak
from benchmarks.common import StepWorker
from benchmarks.common import timed
from benchmarks import ssd_step
from core import entry_point

FLAGS = flags.FLAGS
ROOT = common.ROOT


def main(argv):
  del argv
  rows = []
  for dtype in FLAGS.dtypes:
    worker = StepWorker(
        FLAGS.torch_python,
        [os.path.join(ROOT, 'benchmarks', 'torchvision_ssd_worker.py'),
         f'--dtype={dtype}', f'--batch={FLAGS.batch}', f'--steps={FLAGS.steps}'],
        setup='make torch_venv')
    try:
      run, model = ssd_step.ours(dtype, FLAGS.batch, FLAGS.steps)
      run()  # Compile.
      peak, peak_flops = matmul_peak(dtype)
      peak()
      times = {'ours': [], 'torchvision': [], 'matmul': []}
      for _ in range(FLAGS.rounds):
        times['ours'].append(timed(run) / FLAGS.steps)
        times['torchvision'].append(worker.run() / FLAGS.steps)
        times['matmul'].append(timed(peak))
    finally:
      worker.close()
    step = {k: statistics.median(v) for k, v in times.items()}
    flops = 3 * ssd_step.forward_flops(model, FLAGS.batch)
    print(f'--- SSD300-ResNet34, {dtype}, batch {FLAGS.batch}, '
          f'{FLAGS.rounds} interleaved rounds (medians)', flush=True)
    print(f'  ours         {step["ours"]:.3f} s/step', flush=True)
    print(f'  torchvision  {step["torchvision"]:.3f} s/step', flush=True)
    print(f'  speed-up over torchvision: '
          f'{step["torchvision"] / step["ours"]:.2f}x', flush=True)
    achieved = flops / step['ours']
    roof = peak_flops / step['matmul']
    print(f'  MFU {achieved / roof:.2f} ({achieved / 1e9:.0f} of '
          f'{roof / 1e9:.0f} GFLOP/s, 3 x {flops / 3e9:.1f} GFLOP forward)',
          flush=True)
    rows.append(common.step_row(
        'SSD300-ResNet34', dtype, FLAGS.batch, step['ours'], 'torchvision',
        step['torchvision'], target='>= 1.0', digits=2))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 8, 'Global batch size.')
  flags.DEFINE_integer('steps', 1, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_multi_string('dtypes', ['float32', 'bfloat16'], 'Precisions.')
  flags.DEFINE_string('torch_python',
                      os.path.join(ROOT, '.venv-torch', 'bin', 'python'),
                      "torch's Python (make torch_venv).")
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
