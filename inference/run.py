"""Runs LoadGen on an exported model: all four scenarios, both modes.

  python -m inference.run --gin_file=gin/resnet_quickstart.gin \
      --saved_model=runs/resnet_savedmodel --dataset=data/quickstart \
      --scenario=Offline --mode=performance --output_dir=runs/loadgen \
      [--user_conf=user.conf] [--min_duration_ms=10000] [--settings=v0.5]

The gin files are the model's training files: they give the eval pipeline
(the samples are preprocessed exactly as in-loop evaluation does) and the
quality metric. LoadGen's own logs (mlperf_log_summary.txt,
mlperf_log_detail.txt, mlperf_log_accuracy.json) land in --output_dir; a short
report is printed: VALID/INVALID with LoadGen's reasons, the metric, and in
accuracy mode the model's quality computed from mlperf_log_accuracy.json.

--settings=v0.5 runs with MLPerf Inference v0.5's settings of the model's
benchmark (models/common/inference_v05.py: QSL size, bounds, percentiles, query
counts, durations, seeds) instead of today's; there MultiStream is v0.5's
metric, the most samples a query within the bound, emulated
(inference/multistream.py).

--tflite serves an INT8 (or float) TFLite model through the LiteRT
interpreter. With --saved_model as well, accuracy mode runs both and gates
the TFLite model's quality at the benchmark's fraction of the SavedModel's
(v0.5: 98% for MobileNet, 99% for the others; today's rules: 99%): exit 1
when it falls short.
"""

import concurrent.futures
import dataclasses
import os
import time

from absl import app
from absl import flags
import mlperf_loadgen as lg

from core import config as gin_config
from core import entry_point
from core import startup
from inference import settings as settings_lib


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_multi_string('gin_file', [], 'The model\'s training gin files.')
  flags.DEFINE_list('gin_search_paths', [], gin_config.SEARCH_PATHS_HELP)
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_string('model', '', 'Model name in user.conf lines (default: '
                      'the task\'s, e.g. resnet50 or bert).')
  flags.DEFINE_string('saved_model', '', 'tools/export_savedmodel.py output.')
  flags.DEFINE_string('tflite', '', 'A tools/quantize_tflite.py model to serve '
                      'instead; in accuracy mode with --saved_model too, its '
                      'quality is gated against the SavedModel\'s (FP32).')
  flags.DEFINE_string('onnx', '', 'A tools/export_onnx.py model to serve '
                      'instead, through ONNX Runtime (CPU).')
  flags.DEFINE_bool('noop_backend', False, 'Answer zeros (harness overhead).')
  flags.DEFINE_string('dataset', None, 'Folder of the eval TFRecords.')
  flags.DEFINE_enum('scenario', 'Offline',
                    [*settings_lib.SCENARIOS, 'all', 'submission'],
                    'LoadGen scenario; all: every scenario and accuracy, '
                    'FP32 and (with --tflite) INT8, as a table; submission: '
                    'every run a v0.5 submission holds (with '
                    '--settings=v0.5; inference/submission.py), for '
                    'tools.package inference.')
  flags.DEFINE_enum('mode', 'performance', list(settings_lib.MODES), 'Mode.')
  flags.DEFINE_string('user_conf', '', 'user.conf (model.scenario.key = v).')
  flags.DEFINE_string('output_dir', None, 'Where LoadGen writes its logs.')
  flags.DEFINE_integer('count', 0, 'Samples used (0: all).')
  flags.DEFINE_integer('max_batch', 32, 'Largest batch a worker forms.')
  flags.DEFINE_float('batch_timeout_ms', 2.0, 'Wait to fill a batch (ms).')
  flags.DEFINE_integer('workers', 1, 'Worker threads.')
  flags.DEFINE_integer('intra_op_threads', 0, 'Threads per TF op (0: one per '
                       'core); workers x threads = cores is the usual split.')
  flags.DEFINE_integer('min_duration_ms', None, 'Override min duration.')
  flags.DEFINE_integer('min_query_count', None, 'Override min queries.')
  flags.DEFINE_float('expected_qps', None, 'Offline expected QPS.')
  flags.DEFINE_float('target_qps', None, 'Server target QPS.')
  flags.DEFINE_float('target_latency_ms', None, 'Server latency bound (ms).')
  flags.DEFINE_bool('find_peak', False, 'Search the highest VALID Server QPS.')
  flags.DEFINE_enum('audit', None, ['TEST01', 'TEST04', 'TEST05'],
                    'Audit test to run.')
  flags.DEFINE_enum('settings', 'current', ['current', 'v0.5'],
                    'The MLPerf Inference settings: LoadGen\'s current ones '
                    '(the task\'s where LoadGen has none) or v0.5\'s.')
  flags.mark_flags_as_required(['dataset', 'output_dir'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
from inference import accuracy
from inference import audit as audit_lib
from inference import backend as backends
from inference import multistream
from inference import sample_library
from inference import submission
from inference import sut as sut_lib
from inference import table as table_lib
from models.common import inference_v05

# Each scenario's metric as mlperf_log_summary.txt words it.
METRICS = {
    'Offline': 'Samples per second',
    'SingleStream': '90.00 percentile latency (ns)',
    'MultiStream': '99.00 percentile latency (ns)',
    'Server': 'Completed samples per second',
}


@dataclasses.dataclass
class Report:
  scenario: str
  mode: str
  valid: bool | None  # None in accuracy mode: LoadGen gives no verdict.
  reasons: list
  metric: str
  value: float | None
  quality: float | None
  summary: dict
  short_run: bool
  rules_min_duration_ms: int = settings_lib.RULES_MIN_DURATION_MS

  def __str__(self):
    verdict = {True: 'VALID', False: 'INVALID',
               None: 'accuracy run (no verdict: the quality is the result)'}
    head = f'{self.scenario} {self.mode}: {verdict[self.valid]}'
    if self.short_run and self.mode == 'performance':
      # One statement of what the verdict means, not two that seem to clash.
      head += (' for its own settings; shorter than the rules\' '
               f'{self.rules_min_duration_ms / 1000:g} s minimum, so a '
               'measurement, not a submission result')
    lines = [head] + [f'  reason: {r}' for r in self.reasons]
    if self.value is not None:
      lines.append(f'  {self.metric}: {self.value:g}')
    if self.quality is not None:
      lines.append(f'  quality from mlperf_log_accuracy.json: '
                   f'{self.quality:.4f}')
    return '\n'.join(lines)


# The setting from which LoadGen plans a latency scenario's queries.
EXPECTED_LATENCY = {'SingleStream': 'single_stream_expected_latency_ns',
                    'MultiStream': 'multi_stream_expected_latency_ns'}
# Offline without an expected QPS: the probe's rate times this, so the run
# outlasts min_duration even if the machine gets twice as fast meanwhile.
OFFLINE_QPS_MARGIN = 2.0
# Runs again a run LoadGen planned too short at most this many times.
MAX_RESIZES = 3


def probe_qps(backend, library, *, max_batch: int, workers: int,
              seconds: float = 1.0, spread: int = 4) -> float:
  """Samples per second the backend answers in batches of max_batch from
  `workers` threads, timed for at least `seconds`.

  The batches cycle through `spread` batches' worth of samples taken evenly
  across the library, not the first batch again and again: a translation
  batch lasts as long as its longest sentence, and the library's first
  samples need not be typical (the GNMT quickstart's first 32 made the
  probe half the rate LoadGen then measured, and a loaded machine's
  Offline run fell short of min_duration).
  """
  n = min(max_batch, library.total)
  count = min(library.total, spread * n)
  step = (library.total - 1) / max(1, count - 1)
  ids = sorted({round(i * step) for i in range(count)})
  library.load(ids)
  batches = [library.get([ids[(b * n + k) % len(ids)] for k in range(n)])
             for b in range(max(1, len(ids) // n))]
  deadline = time.perf_counter() + seconds

  def work(w):
    done, b = 0, w
    while done < 3 * n or time.perf_counter() < deadline:
      backend.predict(batches[b % len(batches)])
      done, b = done + n, b + 1
    return done

  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
    done = sum(pool.map(work, range(max(1, workers))))
  elapsed = time.perf_counter() - start
  library.unload(ids)
  return done / elapsed


def parse_summary(path: str) -> dict:
  """`key : value` lines of mlperf_log_summary.txt as a dict of strings."""
  summary = {}
  with open(path) as f:
    for line in f:
      if ':' in line:
        key, _, value = line.partition(':')
        summary.setdefault(key.strip(), value.strip())
  return summary


def _unmet(summary: dict) -> list:
  """The summary's '... satisfied' conditions that are not."""
  return [k for k, v in summary.items()
          if k.endswith('satisfied') and v.upper() != 'YES']


def run_benchmark(*, task, backend, scenario: str, mode: str,
                  output_dir: str, model_name: str, user_conf: str = '',
                  count: int = 0, max_batch: int = 32,
                  batch_timeout_ms: float = 2.0, workers: int = 1,
                  audit_config: str = '', defaults: dict | None = None,
                  performance_samples: int = 0, repeat_to: int = 0,
                  trace: bool = True, **setting_values) -> Report:
  """One LoadGen run; returns its report.

  Args:
    task: the model's training.task.Task (eval data, inference hooks).
    backend: a backend (inference/backend.py).
    scenario: SingleStream, MultiStream, Server or Offline.
    mode: performance or accuracy.
    output_dir: where LoadGen writes its logs.
    model_name: the model name of user.conf lines.
    user_conf: optional user.conf.
    count: samples in the library (0: the whole eval set).
    max_batch: largest batch a worker forms.
    batch_timeout_ms: how long a worker waits to fill a batch.
    workers: worker threads (not SingleStream).
    audit_config: an audit.config for TEST01/TEST04 ('' = none).
    defaults: {scenario: TestSettings attributes} (default: the task's
      `inference_settings`; models/common/inference_v05.py's for v0.5).
    performance_samples: the QSL's performance samples (0: the task's).
    repeat_to: the eval set repeated whole to at least this many samples
      (sample_library.EvalSampleLibrary; 0: as it is).
    trace: LoadGen writes mlperf_log_trace.json (a record a sample: some
      hundred MB for a run of a million samples).
    **setting_values: TestSettings attributes (min_duration_ms, ...).
  """
  defaults = task.inference_settings if defaults is None else defaults
  performance_samples = (performance_samples or
                         task.inference_performance_samples)
  settings = settings_lib.make_settings(
      model=model_name, scenario=scenario, mode=mode, user_conf=user_conf,
      defaults=defaults.get(scenario), **setting_values)
  library = sample_library.EvalSampleLibrary(task=task, count=count,
                                             repeat_to=repeat_to)
  library.load([0])
  backend.check_inputs(library.get([0]))
  output_key, dtype = task.inference_output
  # Warm-up: build every batch shape's kernels before LoadGen's clock.
  library.load(range(min(max_batch, library.total)))
  for n in {1, min(max_batch, library.total)}:
    backend.predict(library.get(list(range(n))))
  library.unload(range(library.total))
  probed = (scenario == 'Offline' and mode == 'performance' and
            settings.offline_expected_qps ==
            lg.TestSettings().offline_expected_qps)
  if probed:
    # LoadGen sizes the one Offline query from the expected QPS; left at its
    # default of 1 the run ends long before min_duration (INVALID).
    measured = probe_qps(backend, library, max_batch=max_batch,
                         workers=workers)
    settings.offline_expected_qps = measured * OFFLINE_QPS_MARGIN
    print(f'Offline: no expected QPS given; a probe answered '
          f'{measured:.1f} samples/s, so expected QPS = '
          f'{settings.offline_expected_qps:.1f} (x{OFFLINE_QPS_MARGIN:g}, to '
          f'outlast min_duration; --expected_qps={measured:.1f} runs closer '
          'to it).', flush=True)

  os.makedirs(output_dir, exist_ok=True)

  def loadgen_run() -> dict:
    impl = sut_lib.SystemUnderTest(
        backend=backend, library=library, output_key=output_key,
        inline=scenario == 'SingleStream', max_batch=max_batch,
        batch_timeout_ms=batch_timeout_ms, workers=workers)
    sut = lg.ConstructSUT(impl.issue_queries, impl.flush_queries)
    qsl = lg.ConstructQSL(
        library.total, min(library.total, performance_samples),
        library.load, library.unload)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = output_dir
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = trace
    try:
      lg.StartTestWithLogSettings(sut, qsl, settings, log_settings,
                                  audit_config or os.path.join(
                                      output_dir, 'no-audit.config'))
    finally:
      lg.DestroyQSL(qsl)
      lg.DestroySUT(sut)
      impl.close()
    if impl.error is not None:
      raise RuntimeError(f'Answering a query failed ({impl.error!r}); the '
                         'run\'s logs are not a result.') from impl.error
    return parse_summary(os.path.join(output_dir, 'mlperf_log_summary.txt'))

  summary = run_until_sized(
      loadgen_run, lambda s: resize_short_run(
          s, settings, scenario=scenario, mode=mode, probed=probed))
  valid = (summary.get('Result is') == 'VALID') if mode == 'performance' \
      else None
  reasons = [f'{k}: {summary[k]}' for k in _unmet(summary)]
  quality = None
  if mode == 'accuracy':
    responses = accuracy.read_responses(
        os.path.join(output_dir, 'mlperf_log_accuracy.json'), dtype)
    quality = task.inference_quality(responses, library.references())
  metric = METRICS[scenario]
  value = summary.get(metric)
  rules_min = (defaults.get(scenario) or {}).get(
      'min_duration_ms', settings_lib.RULES_MIN_DURATION_MS)
  return Report(scenario=scenario, mode=mode, valid=valid, reasons=reasons,
                metric=metric, value=float(value) if value else None,
                quality=quality, summary=summary,
                short_run=settings.min_duration_ms < rules_min,
                rules_min_duration_ms=rules_min)


def run_until_sized(loadgen_run, resize) -> dict:
  """LoadGen's summary of a run that was not cut short by its own plan:
  while `resize(summary)` resizes the settings (resize_short_run: the run
  ended before min_duration, LoadGen having planned too little), runs
  again, at most MAX_RESIZES times. More than once: a short run's rate is
  itself an underestimate (its few batches pay the start and the last
  partial batch; a busy check's GNMT probe saw 17 samples/s, the first
  run 130, and the rerun sized at twice that still ended early)."""
  summary = loadgen_run()
  for _ in range(MAX_RESIZES):
    message = resize(summary)
    if not message:
      break
    print(message, flush=True)
    summary = loadgen_run()
  return summary


def resize_short_run(summary: dict, settings, *, scenario: str, mode: str,
                     probed: bool) -> str | None:
  """When a performance run ended before min_duration because LoadGen
  planned too little work, sizes the next run from what LoadGen itself
  measured; returns what it did, or None when the run stands.

  Offline sized by the harness's probe: the machine ran faster than the
  probe saw (a busy machine's load moved, say): expected QPS = the rate
  LoadGen measured x OFFLINE_QPS_MARGIN. SingleStream and MultiStream:
  LoadGen plans min_duration / expected latency queries, so a system
  faster than expected (v0.5's SingleStream expects 10 ms) runs out of
  queries: expected latency = half the mean LoadGen measured.
  """
  unmet = _unmet(summary)
  if mode != 'performance' or 'Min duration satisfied' not in unmet:
    return None
  if scenario == 'Offline':
    if not probed or unmet != ['Min duration satisfied']:
      return None
    rate = float(summary['Samples per second'])
    settings.offline_expected_qps = rate * OFFLINE_QPS_MARGIN
    return (f'Offline: the run answered {rate:.1f} samples/s, faster than '
            f'the probe, and ended before min_duration; running again with '
            f'expected QPS {settings.offline_expected_qps:.1f} (its logs '
            'replace the first run\'s).')
  expected = EXPECTED_LATENCY.get(scenario)
  if not expected or 'Mean latency (ns)' not in summary:
    return None
  mean = float(summary['Mean latency (ns)'])
  setattr(settings, expected, mean / 2)
  return (f'{scenario}: queries answered in {mean / 1e6:.2f} ms on '
          f'average, faster than expected, and the run ended before '
          f'min_duration; running again expecting {mean / 2e6:.2f} ms '
          '(its logs replace the first run\'s).')


def load_task(gin_files: list[str], gin_params: list[str], dataset: str):
  """The task of the model's gin files (their TASK macro), reading eval data
  from `dataset`."""
  # The training command's bindings, maybe without its hardware file.
  gin_config.parse(gin_files, list(gin_params) + [f'DATA_DIR = {dataset!r}'],
                   unread_macros='known')
  task = gin_config.configured_task()
  if not hasattr(task, 'inference_model'):
    raise ValueError(
        f'{type(task).__name__} ({task.mlperf_benchmark}) has no MLPerf '
        'Inference benchmark: the harness serves resnet50, mobilenet, bert, '
        'ssd-resnet34, dlrm, gnmt and the Transformer (docs/inference.md). '
        'Export it with tools.export_savedmodel for your own serving.')
  return task


def main(argv):
  del argv
  f = flags.FLAGS
  backends.set_intra_op_threads(f.intra_op_threads)
  if f.scenario == 'submission' and f.settings != 'v0.5':
    raise ValueError('--scenario=submission writes an MLPerf Inference v0.5 '
                     'submission\'s runs: give --settings=v0.5.')
  # Bad input raises ValueError or FileNotFoundError: one line, exit 2
  # (entry_point.tool_main).
  task = load_task(gin_config.resolve_gin_files(f.gin_file,
                                                f.gin_search_paths),
                   f.gin_param, f.dataset)
  v05 = {}
  if f.settings == 'v0.5':  # A model v0.5 lacks fails here, before work.
    v05 = dict(defaults=inference_v05.settings(task.inference_model),
               performance_samples=inference_v05.performance_samples(
                   task.inference_model))
  task.data.check()
  if f.onnx and (f.tflite or f.noop_backend):
    raise ValueError('--onnx serves the model alone: give it without '
                     '--tflite and --noop_backend.')
  if f.noop_backend:
    backend = backends.NoOpBackend(task.inference_output[0])
  elif f.onnx:
    backend = backends.OnnxBackend(f.onnx, threads=f.intra_op_threads)
  elif f.tflite:
    backend = backends.TFLiteBackend(
        f.tflite, threads=f.intra_op_threads,
        postprocess=getattr(task, 'postprocess', None))
  else:
    backend = backends.SavedModelBackend(f.saved_model)
  values = {
      'min_duration_ms': f.min_duration_ms,
      'min_query_count': f.min_query_count,
      'offline_expected_qps': f.expected_qps,
      'server_target_qps': f.target_qps,
      'server_target_latency_ns': (int(f.target_latency_ms * 1e6)
                                   if f.target_latency_ms else None),
  }
  model_name = f.model or task.inference_model
  common = dict(task=task, backend=backend, scenario=f.scenario,
                model_name=model_name, user_conf=f.user_conf, count=f.count,
                max_batch=f.max_batch, batch_timeout_ms=f.batch_timeout_ms,
                workers=f.workers, **v05)

  def run(mode, folder, **extra):
    return run_benchmark(mode=mode, output_dir=os.path.join(f.output_dir,
                                                            folder),
                         **{**common, **values, **extra})

  if f.find_peak:
    if f.scenario != 'Server':
      raise app.UsageError('--find_peak searches Server target QPS.')
    best, tried = audit_lib.find_peak_qps(
        lambda qps: run('performance', f'peak_{qps:.1f}',
                        server_target_qps=qps),
        start_qps=f.target_qps or 100.0)
    for qps, valid in tried:
      print(f'  target {qps:.1f} QPS: {"VALID" if valid else "INVALID"}')
    print(f'highest VALID Server target: {best} QPS')
    return 0 if best else 1
  if f.audit:
    reference = run('performance', 'reference')
    if f.audit == 'TEST05':  # Other seeds, set on the TestSettings.
      audited = run('performance', f.audit, **audit_lib.TEST05_SETTINGS)
      verdict = audit_lib.verify_test05(audit=audited, reference=reference)
    else:
      audited = run('performance', f.audit,
                    audit_config=audit_lib.write_audit_config(
                        f.audit, os.path.join(f.output_dir, f.audit)))
      if f.audit == 'TEST01':
        run('accuracy', 'accuracy')
        verdict = audit_lib.verify_test01(
            audit=audited, reference=reference,
            accuracy_dir=os.path.join(f.output_dir, 'accuracy'),
            audit_dir=os.path.join(f.output_dir, f.audit),
            dtype=task.inference_output[1])
      else:
        verdict = audit_lib.verify_test04(audit=audited, reference=reference)
    print(verdict)
    return 0 if verdict.passed else 1
  if f.scenario == 'submission':
    # v0.5's QSL size even where the eval set is smaller (its GNMT did so).
    common['repeat_to'] = v05['performance_samples']
    # No trace: a submission holds none, and v0.5's MultiStream search
    # writes gigabytes of it.
    common['trace'] = False
    served = ({'format': 'tflite', 'path': f.tflite} if f.tflite else
              {'format': 'onnx', 'path': f.onnx} if f.onnx else
              {'format': 'savedmodel', 'path': f.saved_model})
    record = submission.run_all(
        run, task, output_dir=f.output_dir, model=task.inference_model,
        settings_used={k: v for k, v in values.items() if v is not None},
        served=served, gin_files=f.gin_file,
        server_qps=f.target_qps or 0.0, count=f.count)
    failed = [f'{s} {t}' for s, d in record['scenarios'].items()
              for t, v in d['audits'].items() if not v['passed']]
    invalid = [s for s, d in record['scenarios'].items() if not d['valid']]
    print(f'submission runs in {f.output_dir}: INVALID {invalid or "none"}; '
          f'audits failed: {failed or "none"}. Package them with python -m '
          f'tools.package inference {f.output_dir} --output=PACKAGE '
          '(docs/submitting.md).')
    return 0 if not (failed or invalid) else 1
  if f.scenario == 'all':
    by_precision = {}
    if f.saved_model:
      by_precision['FP32'] = backends.SavedModelBackend(f.saved_model)
    if f.onnx:
      by_precision['FP32-ONNX'] = backend
    if f.tflite:
      by_precision['INT8'] = backend
    print(table_lib.results_table(run, task, by_precision,
                                  settings=f.settings,
                                  server_qps=f.target_qps or 0.0,
                                  count=f.count))
    return 0
  if (f.settings == 'v0.5' and f.scenario == 'MultiStream' and
      f.mode == 'performance'):
    found = multistream.emulate_v05(run, task, count=f.count)
    return 0 if found.samples_per_query else 1
  if f.tflite and f.saved_model and f.mode == 'accuracy':
    gate = accuracy.quality_gate(task.inference_model, f.settings)
    reference = run('accuracy', 'reference_fp32',
                    backend=backends.SavedModelBackend(f.saved_model))
    print(reference)
    report = run('accuracy', '')
    print(report)
    verdict = accuracy.QualityGate(quality=report.quality,
                                   reference=reference.quality, gate=gate)
    print(verdict)
    return 0 if verdict.passed else 1
  report = run(f.mode, '')
  print(report)
  return 0 if report.valid or f.mode == 'accuracy' else 1


if __name__ == '__main__':
  app.run(entry_point.tool_main(main))
