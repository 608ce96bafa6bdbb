"""Benchmark: the LoadGen harness against the model measured directly.

  python -m benchmarks.loadgen --gin_file=gin/resnet_quickstart.gin \
      --dataset=data/quickstart --checkpoint_dir=runs/qs [--rounds=3]

Exports the checkpoint as float32 and bfloat16 SavedModels, then measures
side by side in one process (interleaved rounds, medians):
  (a) LoadGen Offline samples/s vs the backend's own batched throughput on
      the same samples, batch and threads;
  (b) the highest VALID Server target QPS at a p99 bound of
      --server_latency_ms (a peak search of --server_duration_ms runs: the
      verdict needs LoadGen's early stopping, so runs take tens of seconds)
      as a fraction of the better Offline samples/s at --max_batch (1
      worker, or as many as the Server run); one search per --server_workers,
      batches capped at --server_max_batch;
  (c) SingleStream p90 through LoadGen vs the backend's own single-sample
      p90, and the harness's per-query overhead with the no-op backend;
  (d) bfloat16 vs float32 export: Offline samples/s ratio, and accuracy-mode
      quality of each (the rules want bfloat16 >= 99% of float32).
  (e) INT8 (tools/quantize_tflite.py, calibrated on --calibration_dataset)
      vs float32: Offline samples/s through LoadGen of the INT8 TFLite model,
      the float32 TFLite model and the float32 SavedModel, interleaved; and
      accuracy-mode quality of INT8 against the SavedModel's (v0.5: >= 98%
      for MobileNet).
--figures selects which of b, c, d, e to run besides (a), which always runs.
--intra_op_threads applies to every figure (it is process-wide).
"""

import os
import statistics
import tempfile
import time

from absl import app
from absl import flags
import gin
import numpy as np

from benchmarks import common
from core import entry_point
from inference import audit
from inference import backend as backends
from inference import run as run_lib
from inference import sample_library
from tools import export_savedmodel
from tools import quantize_tflite

FLAGS = flags.FLAGS


def direct_rate(backend, library, batch: int) -> float:
  n = library.total
  start = time.perf_counter()
  for i in range(0, n - n % batch, batch):
    backend.predict(library.get(list(range(i, i + batch))))
  return (n - n % batch) / (time.perf_counter() - start)


def direct_p90_ns(backend, library, count: int = 200) -> float:
  times = []
  for i in range(count):
    start = time.perf_counter_ns()
    backend.predict(library.get([i % library.total]))
    times.append(time.perf_counter_ns() - start)
  return float(np.percentile(times, 90))


def main(argv):
  del argv
  backends.set_intra_op_threads(FLAGS.intra_op_threads)
  tmp = tempfile.mkdtemp()
  exports = {}
  for dtype in ('float32', 'bfloat16'):
    gin.clear_config()
    exports[dtype] = os.path.join(tmp, dtype)
    export_savedmodel.export(
        gin_files=FLAGS.gin_file,
        gin_params=[*FLAGS.gin_param, f'DATA_DIR = {FLAGS.dataset!r}',
                    f'COMPUTE_DTYPE = {dtype!r}'],
        checkpoint_dir=FLAGS.checkpoint_dir, export_dir=exports[dtype])
  gin.clear_config()
  task = run_lib.load_task(FLAGS.gin_file, FLAGS.gin_param, FLAGS.dataset)
  be = {d: backends.SavedModelBackend(p) for d, p in exports.items()}
  library = sample_library.EvalSampleLibrary(task=task)
  library.load(range(library.total))
  batch = FLAGS.max_batch

  def lg_run(backend, scenario, mode='performance', **kw):
    kw.setdefault('max_batch', batch)
    return run_lib.run_benchmark(
        task=task, backend=backend, scenario=scenario, mode=mode,
        output_dir=os.path.join(tmp, f'{scenario}_{mode}_{time.time_ns()}'),
        model_name='benchmark', **kw)

  rate = direct_rate(be['float32'], library, batch)
  rates = {k: [] for k in ('direct f32', 'offline f32', 'offline bf16')}
  for _ in range(FLAGS.rounds):
    rates['direct f32'].append(direct_rate(be['float32'], library, batch))
    for d, key in (('float32', 'offline f32'), ('bfloat16', 'offline bf16')):
      rates[key].append(lg_run(be[d], 'Offline',
                               min_duration_ms=FLAGS.offline_duration_ms,
                               offline_expected_qps=rate * 1.2).value)
  med = {k: statistics.median(v) for k, v in rates.items()}
  print(f'(a) Offline {med["offline f32"]:.0f} samples/s vs direct '
        f'{med["direct f32"]:.0f}: {med["offline f32"] / med["direct f32"]:.3f}'
        ' (target >= 0.98)')
  rows = [('Offline through LoadGen', f'{med["offline f32"]:,.0f} samples/s',
           f'the backend directly, batched, {med["direct f32"]:,.0f}',
           f'**{med["offline f32"] / med["direct f32"]:.3f}** (>= 0.98)')]

  for workers in FLAGS.server_workers if 'b' in FLAGS.figures else ():
    # The denominator is the better Offline: 1 worker or this many.
    # (Expecting too few samples would end the run early, INVALID.)
    runs = [lg_run(be['float32'], 'Offline', workers=workers,
                   min_duration_ms=FLAGS.offline_duration_ms,
                   offline_expected_qps=rate * 1.2 * workers)
            for _ in range(FLAGS.rounds)]
    if not all(r.valid for r in runs):
      raise RuntimeError('An Offline run was INVALID, so it is no '
                         'denominator: ' + '; '.join(map(str, runs)))
    offline = max(med['offline f32'],
                  statistics.median(r.value for r in runs))
    best, tried = audit.find_peak_qps(
        lambda qps, w=workers: lg_run(
            be['float32'], 'Server', workers=w, server_target_qps=qps,
            max_batch=FLAGS.server_max_batch or batch,
            server_target_latency_ns=int(FLAGS.server_latency_ms * 1e6),
            min_duration_ms=FLAGS.server_duration_ms, min_query_count=100),
        start_qps=0.6 * offline, growth=1.25, precision=0.03)
    history = ', '.join(f'{q:.1f} {"VALID" if v else "INVALID"}'
                        for q, v in tried)
    print(f'(b) Server, {workers} worker(s), p99 <= {FLAGS.server_latency_ms} '
          f'ms: highest VALID {best or 0:.1f} QPS = {(best or 0) / offline:.3f}'
          f' of Offline {offline:.1f} (target >= 0.7) [{history}]', flush=True)
    rows.append((f'Server peak at p99 <= {FLAGS.server_latency_ms:g} ms, '
                 f'{workers} worker(s)', f'{best or 0:.1f} QPS',
                 f'the best Offline {offline:.1f} samples/s',
                 f'**{(best or 0) / offline:.3f}** (>= 0.7)'))

  if 'c' in FLAGS.figures:
    own, harness, noop = [], [], []
    for _ in range(FLAGS.rounds):
      own.append(direct_p90_ns(be['float32'], library))
      harness.append(lg_run(be['float32'], 'SingleStream', min_duration_ms=1000,
                            min_query_count=200).value)
      noop.append(lg_run(backends.NoOpBackend(task.inference_output[0]),
                         'SingleStream', min_duration_ms=1000,
                         min_query_count=2000).value)
    p90_own, p90_lg = statistics.median(own), statistics.median(harness)
    print(f'(c) SingleStream p90 {p90_lg / 1e6:.3f} ms vs own '
          f'{p90_own / 1e6:.3f} ms: {p90_lg / p90_own:.3f} (target <= 1.03); '
          f'no-op backend p90 {statistics.median(noop) / 1e6:.4f} ms '
          '(target <= 0.1 ms)')
    rows += [('SingleStream p90', f'{p90_lg / 1e6:.2f} ms',
              f"the backend's own p90 {p90_own / 1e6:.2f} ms",
              f'**{p90_lg / p90_own:.3f}** (<= 1.03)'),
             ('per-query overhead, no-op backend',
              f'{statistics.median(noop) / 1e6:.3f} ms', '', '(<= 0.1 ms)')]

  if 'd' in FLAGS.figures:
    quality = {d: lg_run(be[d], 'Offline', mode='accuracy').quality
               for d in ('float32', 'bfloat16')}
    print(f'(d) bfloat16/float32 Offline: '
          f'{med["offline bf16"] / med["offline f32"]:.3f}x; quality float32 '
          f'{quality["float32"]:.4f}, bfloat16 {quality["bfloat16"]:.4f} '
          f'({quality["bfloat16"] / max(quality["float32"], 1e-9):.4f} of '
          'float32; rules: >= 0.99)')
    speed = med['offline bf16'] / med['offline f32']
    kept = quality['bfloat16'] / max(quality['float32'], 1e-9)
    rows.append(('bfloat16', f'Offline {speed:.2f}x float32',
                 f'quality {kept:.3f} of float32', '(>= 0.99)'))
  if 'e' in FLAGS.figures:
    rows += int8_rows(task, exports['float32'], be['float32'], lg_run,
                      rate, tmp)
  print(common.page_rows(rows))


def int8_rows(task, saved, fp32_backend, lg_run, rate, tmp) -> list:
  """Figure (e): INT8 TFLite against float32 TFLite and the SavedModel."""
  gin.clear_config()
  calibration = quantize_tflite.first_samples(run_lib.load_task(
      FLAGS.gin_file, FLAGS.gin_param, FLAGS.calibration_dataset),
      FLAGS.calibration_count)
  gin.clear_config()
  tflite = {}
  for precision in ('int8', 'float32'):
    tflite[precision] = os.path.join(tmp, f'{precision}.tflite')
    quantize_tflite.convert(saved, calibration, precision, tflite[precision])
  contenders = {'int8 tflite': backends.TFLiteBackend(tflite['int8']),
                'f32 tflite': backends.TFLiteBackend(tflite['float32']),
                'f32 savedmodel': fp32_backend}
  rates = {k: [] for k in contenders}
  for _ in range(FLAGS.rounds):
    for name, backend in contenders.items():
      rates[name].append(lg_run(backend, 'Offline',
                                min_duration_ms=FLAGS.offline_duration_ms,
                                offline_expected_qps=rate * 4).value)
  med = {k: statistics.median(v) for k, v in rates.items()}
  quality = {k: lg_run(contenders[k], 'Offline', mode='accuracy').quality
             for k in ('int8 tflite', 'f32 savedmodel')}
  kept = quality['int8 tflite'] / max(quality['f32 savedmodel'], 1e-9)
  print(f'(e) INT8 TFLite Offline {med["int8 tflite"]:.0f} samples/s: '
        f'{med["int8 tflite"] / med["f32 tflite"]:.2f}x float32 TFLite '
        f'({med["f32 tflite"]:.0f}), '
        f'{med["int8 tflite"] / med["f32 savedmodel"]:.2f}x the float32 '
        f'SavedModel ({med["f32 savedmodel"]:.0f}); quality '
        f'{quality["int8 tflite"]:.4f} = {kept:.4f} of float32 '
        f'{quality["f32 savedmodel"]:.4f}', flush=True)
  return [('INT8 (TFLite, LiteRT)',
           f'Offline {med["int8 tflite"]:,.0f} samples/s',
           f'float32 TFLite {med["f32 tflite"]:,.0f}, float32 SavedModel '
           f'{med["f32 savedmodel"]:,.0f}',
           f'**{med["int8 tflite"] / med["f32 tflite"]:.2f}x** and '
           f'{med["int8 tflite"] / med["f32 savedmodel"]:.2f}x'),
          ('INT8 quality', f'{quality["int8 tflite"]:.4f}',
           f'float32 {quality["f32 savedmodel"]:.4f}',
           f'{kept:.4f} (v0.5: >= 0.98 MobileNet, 0.99 others)')]


if __name__ == '__main__':
  flags.DEFINE_multi_string('gin_file', ['gin/resnet_quickstart.gin'],
                            'The model\'s training gin files.')
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_string('dataset', 'data/quickstart', 'Eval TFRecords folder.')
  flags.DEFINE_string('checkpoint_dir', None, 'A training --model_dir.')
  flags.DEFINE_integer('max_batch', 32, 'Batch of both contenders.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_integer('intra_op_threads', 0, 'Threads per TF op (0: TF '
                       'default, one per core).')
  flags.DEFINE_integer('offline_duration_ms', 2000, 'Each Offline run\'s '
                       'minimum duration.')
  flags.DEFINE_integer('server_max_batch', 0, 'Server batch cap (0: '
                       '--max_batch).')
  flags.DEFINE_list('figures', ['a', 'b', 'c', 'd'], 'Figures to measure '
                    '(e: INT8, needs --calibration_dataset).')
  flags.DEFINE_string('calibration_dataset', 'data/quickstart/calibration',
                      'Held-out calibration records for (e).')
  flags.DEFINE_integer('calibration_count', 500, 'Calibration samples.')
  flags.DEFINE_float('server_latency_ms', 200, 'Server p99 bound (ms).')
  flags.DEFINE_integer('server_duration_ms', 60000, 'Each Server run\'s '
                       'minimum duration.')
  flags.DEFINE_multi_integer('server_workers', [1, 2], 'Worker threads of '
                             'the Server runs (one search each).')
  flags.mark_flag_as_required('checkpoint_dir')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
