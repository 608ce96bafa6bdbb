"""Benchmark: BLEU's wall time in one process and in a pool of processes.

  python -m benchmarks.bleu_pool [--pairs=3003] [--rounds=3] \
      [--processes=0,2,4]

Scores `--pairs` real German texts (the Django and Sphinx catalogs that
pip installs, repeated to the count: 3,003 is newstest2014's size) against
perturbed copies of themselves (words dropped, swapped, recased) with
models.common.bleu.BleuMetric at each process count, round by round in turn, and
prints the median wall time of `result()` (the pool already started, as
from the second eval of a run on) and its ratio to one process. Every
count must give the same score bit for bit, or the benchmark stops.
"""

import statistics
import time

import numpy as np
from absl import app
from absl import flags

from benchmarks import common
from core import entry_point
from models.common import bleu

FLAGS = flags.FLAGS


def texts(count: int) -> tuple[list[str], list[str]]:
  """(hypotheses, references) of `count` catalog texts."""
  from tools.formats import gettext_pairs
  refs = [t for _, t in gettext_pairs.catalog_pairs(('Django', 'Sphinx'))]
  refs = (refs * (count // len(refs) + 1))[:count]
  rng = np.random.default_rng(0)
  hyps = []
  for text in refs:
    words = [w for w in text.split() if rng.random() > 0.15]
    if len(words) > 2 and rng.random() < 0.3:
      i = int(rng.integers(len(words) - 1))
      words[i], words[i + 1] = words[i + 1], words[i]
    hyps.append(' '.join(words))
  return hyps, refs


class _Chars:
  """Ids are code points: the benchmark times BLEU, not detokenisation."""

  @staticmethod
  def decode(ids):
    return ''.join(chr(i) for i in ids if i > 1)


def main(argv):
  del argv
  hyps, refs = texts(FLAGS.pairs)
  encoded = [[ord(c) for c in text] + [1] for text in hyps]
  width = max(len(e) for e in encoded)
  ids = np.array([e + [0] * (width - len(e)) for e in encoded])
  counts = [int(p) for p in FLAGS.processes.split(',')]
  metrics = {p: bleu.BleuMetric(vocab=_Chars(), references=refs, processes=p)
             for p in counts}
  times = {p: [] for p in counts}
  scores = {}
  try:
    for p, metric in metrics.items():  # Starts the pools: not timed.
      metric.update({'ids': ids, 'index': np.arange(len(refs))})
      scores[p] = metric.result()['bleu']
    if len(set(scores.values())) != 1:
      raise SystemExit(f'BLEU differs between process counts: {scores}')
    for _ in range(FLAGS.rounds):
      for p, metric in metrics.items():
        start = time.perf_counter()
        metric.result()
        times[p].append(time.perf_counter() - start)
  finally:
    for metric in metrics.values():
      metric.close()
  base = statistics.median(times[counts[0]])
  print(f'{FLAGS.pairs} pairs, BLEU {scores[counts[0]]:.6f} at every count')
  for p in counts:
    median = statistics.median(times[p])
    print(f'processes {p}: {median:.3f} s (median of {FLAGS.rounds}), '
          f'{base / median:.2f}x of processes {counts[0]}')
  print(common.page_rows([
      (f'BLEU of {FLAGS.pairs:,} pairs, {p} processes',
       f'{statistics.median(times[p]):.3f} s',
       (f'{counts[0]} processes' if counts[0] else 'in this process') +
       f' {base:.3f} s',
       f'{base / statistics.median(times[p]):.2f}x, bit for bit')
      for p in counts[1:]]))


if __name__ == '__main__':
  flags.DEFINE_integer('pairs', 3003, 'Pairs scored (newstest2014: 3003).')
  flags.DEFINE_integer('rounds', 3, 'Timed rounds per process count.')
  flags.DEFINE_string('processes', '0,2,4', 'Process counts, first = base.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
