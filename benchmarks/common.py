"""Pieces the benchmarks share: a same-dtype matmul peak, the timing, and
the rows they print for docs/benchmarks.md.

TensorFlow is imported where it is used: the benchmarks that time fresh
processes (startup, malloc_env) do not import it in their parent.
"""

import datetime
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from core import config as gin_config

ROOT = gin_config.ROOT
PAGE = 'docs/benchmarks.md'


def page_rows(rows: list[tuple[str, str, str, str]], argv=None) -> str:
  """Rows of docs/benchmarks.md's tables for figures just measured: each
  (measure, ours, the peer, the ratio with its target), then today's date
  and the command that measured them. The benchmark prints them last, to be
  pasted over the page's rows of the same measures."""
  argv = sys.argv if argv is None else argv
  spec = getattr(sys.modules['__main__'], '__spec__', None)
  program = (f'python -m {spec.name}' if spec else
             f'python {os.path.relpath(argv[0], ROOT)}')
  command = ' '.join([program] + [shlex.quote(a) for a in argv[1:]])
  today = datetime.date.today().isoformat()
  lines = [f'rows for {PAGE} (measure | ours | peer | ratio | date | '
           'command):']
  lines += [f'| {m} | {o} | {p} | {r} | {today} | `{command}` |'
            for m, o, p, r in rows]
  return '\n'.join(lines)



def step_row(model: str, dtype: str, batch: int, ours: float, peer: str,
             theirs: float, *, target: str | None = None, unit: str = 's',
             digits: int = 3, mfu: float | None = None) -> tuple:
  """A page row for a training step: our seconds a step and the peer's,
  and our speed-up over it, bold with its `target` ('>= 1.2'), or marked
  the floor when the peer is one (target None)."""
  scale = 1e3 if unit == 'ms' else 1.0
  mine = f'{ours * scale:.{digits}f} {unit}'
  if mfu is not None:
    mine += f', MFU {mfu:.2f}'
  ratio = f'{theirs / ours:.2f}x'
  ratio = f'**{ratio}** ({target})' if target else f'{ratio} (the floor)'
  return (f'training step, {model}, {dtype}, batch {batch:,}', mine,
          f'{peer} {theirs * scale:.{digits}f} {unit}', ratio)


def matmul_peak(dtype: str, n: int = 4096, reps: int = 10):
  """A callable running `reps` chained n x n matmuls, and their FLOPs."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  # Entries N(0, 1/n) keep a chain of products finite with no rescaling op.
  a = tf.random.normal([n, n], stddev=n**-0.5, dtype=tf.float32)
  a = tf.cast(a, tf.bfloat16 if dtype == 'bfloat16' else tf.float32)

  @tf.function
  def run():
    x = a
    for _ in range(reps):
      x = tf.matmul(x, a)
    return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

  return run, 2 * n**3 * reps


def timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def images_per_second(dataset, batches: int, batch: int) -> float:
  """Images/s of a fresh iterator of `dataset` after its first batch.

  One iterator at a time: a live iterator keeps filling its prefetch
  buffers in the background, which would both steal cores from another
  contender and bank work before its own clock starts.
  """
  iterator = iter(dataset)
  next(iterator)
  start = time.perf_counter()
  for _ in range(batches):
    next(iterator)
  elapsed = time.perf_counter() - start
  del iterator
  return batches * batch / elapsed


def ms_per_call(fn, calls: list) -> float:
  """Milliseconds of one call of `fn` traced as a tf.function, over the
  argument tuples `calls` (after two warm-up calls), its results fetched."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  fn = tf.function(fn)
  for args in calls[:2]:
    fn(*args)
  start = time.perf_counter()
  for args in calls:
    result = fn(*args)
  tf.nest.map_structure(lambda t: t.numpy(), result)
  return (time.perf_counter() - start) / len(calls) * 1e3


def interleaved_images_per_second(datasets: dict, rounds: int, batches: int,
                                  batch: int) -> dict:
  """{name: median images/s} of `datasets`, each read for `batches` batches
  a round, round by round."""
  rates = {name: [] for name in datasets}
  for _ in range(rounds):
    for name, dataset in datasets.items():
      rates[name].append(images_per_second(dataset, batches, batch))
  return {name: statistics.median(v) for name, v in rates.items()}


def interleaved_medians(runners: dict, rounds: int) -> dict:
  """Median seconds of each callable, run once to warm up, then round-robin.

  Interleaving puts every contender through the same stretches of machine
  noise, so their ratios hold even when absolute times drift.
  """
  for fn in runners.values():
    fn()
  times = {name: [] for name in runners}
  for _ in range(rounds):
    for name, fn in runners.items():
      times[name].append(timed(fn))
  return {name: statistics.median(t) for name, t in times.items()}


def interleaved_runs(variants: dict, rounds: int, run) -> dict:
  """`run(setting, model_dir)` -> a dict of figures with a 'loss', for each
  variant (name -> setting) in turn, round by round, each into a fresh
  folder; prints every run's figures. Returns name -> the runs' dicts.

  Raises:
    SystemExit: if the runs did not all end at the same loss (the variants
      must not change the weights).
  """
  results = {name: [] for name in variants}
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(rounds):
      for i, (name, setting) in enumerate(variants.items()):
        results[name].append(run(setting, os.path.join(tmp, f'{r}_{i}')))
        print(f'round {r + 1} {name}: ' + ', '.join(
            f'{k} {v:.1f}' for k, v in results[name][-1].items()
            if k != 'loss'), flush=True)
  losses = {one['loss'] for runs in results.values() for one in runs}
  if len(losses) != 1:
    raise SystemExit(f'the runs ended at different losses: {losses}')
  return results


def print_median_ratios(before: list, after: list, keys) -> dict:
  """One line a key: the median seconds of `before`'s and `after`'s runs
  (dicts of figures) and their ratio; returns {key: (before, after)}."""
  width = max(len(k) for k in keys) + 1
  medians = {}
  for key in keys:
    a = statistics.median(run[key] for run in before)
    b = statistics.median(run[key] for run in after)
    print(f'  {key:{width}s} {a:7.1f} s  {b:7.1f} s  {a / b:5.2f}x')
    medians[key] = (a, b)
  return medians


def collective_ops(graph) -> int:
  """Collective ops in a traced graph and the functions it calls (the
  while loop's body is one of them)."""
  # A FuncGraph keeps the functions it calls in `_functions`; TensorFlow has
  # no public listing.
  graphs = [graph] + [f.graph for f in graph._functions.values()  # pylint: disable=protected-access
                      if hasattr(f, 'graph')]
  return sum(1 for g in graphs for op in g.get_operations()
             if 'Collective' in op.type)


class StepWorker:
  """A peer's training step in its own process (its own venv), timed on
  request: the worker prints `ready`, then answers each `run` line on its
  stdin with the seconds its steps took."""

  def __init__(self, python: str, argv: list[str], *, setup: str,
               env: dict | None = None):
    """Args:
      python: the peer environment's interpreter.
      argv: the worker script and its flags.
      setup: what builds that environment, for the message when it is
        missing (`make garden_venv`).
      env: extra environment variables.
    """
    if not os.path.exists(python):
      raise FileNotFoundError(f'No environment at {python}: run `{setup}`.')
    self.proc = subprocess.Popen(
        [python, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=dict(os.environ, **(env or {})))
    ready = self.proc.stdout.readline().strip()
    if ready != 'ready':
      raise RuntimeError(f'The worker {argv[0]} did not start (it said '
                         f'{ready!r}; its stderr is above).')

  def run(self) -> float:
    self.proc.stdin.write('run\n')
    self.proc.stdin.flush()
    return float(self.proc.stdout.readline())

  def close(self):
    self.proc.stdin.close()
    self.proc.wait(timeout=60)
