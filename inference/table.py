"""Every scenario of one model, FP32 and INT8: the results table
`inference.run --scenario=all` prints (docs/inference.md keeps them).

Per precision (the SavedModel; the TFLite model when given): accuracy mode
(the TFLite model gated against the SavedModel's quality), Offline,
SingleStream, Server at a target QPS (given, or half the precision's
Offline rate: a measurement of the latency tail at a load the system
carries, not a peak search) and MultiStream (v0.5's metric emulated under
--settings=v0.5, else LoadGen's percentile latency at its samples a query).
"""

import dataclasses
from typing import Callable

from inference import accuracy
from inference import multistream


@dataclasses.dataclass
class Row:
  """One precision's figures; None where not run."""
  precision: str
  quality: float | None = None
  gate: str = ''
  offline: str = ''
  single_stream: str = ''
  server: str = ''
  multi_stream: str = ''


def _verdict(report) -> str:
  return {True: 'VALID', False: 'INVALID', None: ''}[report.valid]


def measure(run: Callable, *, precision: str, backend, server_qps: float,
            multistream_figure: Callable | None) -> Row:
  """One precision's row.

  Args:
    run: (mode, folder, **extra) -> inference.run.Report.
    precision: the row's label ('FP32', 'INT8').
    backend: the precision's backend (passed to run).
    server_qps: Server's target (0: half the Offline rate measured here).
    multistream_figure: backend -> the cell of v0.5's emulation; None for
      LoadGen's own MultiStream.
  """
  folder = precision.lower()

  def scenario(mode, name, **extra):
    report = run(mode, f'{folder}/{name}', backend=backend, **extra)
    print(report, flush=True)  # The run's reasons, beside the table's cell.
    return report

  row = Row(precision)
  row.quality = scenario('accuracy', 'accuracy', scenario='Offline').quality
  offline = scenario('performance', 'offline', scenario='Offline')
  row.offline = f'{offline.value:.1f} samples/s ({_verdict(offline)})'
  single = scenario('performance', 'single_stream', scenario='SingleStream')
  row.single_stream = (f'p90 {single.value / 1e6:.2f} ms '
                       f'({_verdict(single)})')
  qps = server_qps or max(1.0, round(offline.value / 2, 1))
  server = scenario('performance', 'server', scenario='Server',
                    server_target_qps=qps)
  row.server = (f'{qps:g} QPS: {server.value or 0:.1f} samples/s '
                f'({_verdict(server)})')
  if multistream_figure is not None:
    row.multi_stream = multistream_figure(backend)
  else:
    ms = scenario('performance', 'multi_stream', scenario='MultiStream')
    row.multi_stream = f'p99 {ms.value / 1e6:.2f} ms ({_verdict(ms)})'
  return row


def markdown(model: str, settings: str, rows: list[Row]) -> str:
  """The table, one row a precision."""
  lines = [f'{model}, {settings} settings:', '',
           '| precision | accuracy | Offline | SingleStream | Server | '
           'MultiStream |', '|---|---|---|---|---|---|']
  for r in rows:
    quality = f'{r.quality:.4f}' if r.quality is not None else ''
    if r.gate:
      quality += f' ({r.gate})'
    lines.append(f'| {r.precision} | {quality} | {r.offline} | '
                 f'{r.single_stream} | {r.server} | {r.multi_stream} |')
  return '\n'.join(lines)


def results_table(run, task, backends_by_precision: dict, *, settings: str,
                  server_qps: float, count: int = 0) -> str:
  """Every scenario of each precision ({'FP32': backend, 'INT8': backend});
  the second gated against the first's quality."""
  v05 = settings == 'v0.5'

  def emulated(precision):
    def figure(backend):
      found = multistream.emulate_v05(run, task, precision.lower(),
                                      count=count, backend=backend)
      return f'{found.samples_per_query} samples a query (emulated)'
    return figure

  rows = [measure(run, precision=p, backend=b, server_qps=server_qps,
                  multistream_figure=emulated(p) if v05 else None)
          for p, b in backends_by_precision.items()]
  if len(rows) == 2:
    verdict = accuracy.QualityGate(
        quality=rows[1].quality, reference=rows[0].quality,
        gate=accuracy.quality_gate(task.inference_model, settings))
    rows[1].gate = (f'{verdict.ratio:.2%} of FP32, gate {verdict.gate:.0%}: '
                    f'{"passed" if verdict.passed else "FAILED"}')
  return markdown(task.inference_model, settings, rows)
