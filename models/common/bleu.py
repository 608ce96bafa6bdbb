"""BLEU as MLPerf v0.7 computes it for the Transformer, on the host.

The arbiter of "25.0" is the reference's script (`compute_bleu` with
`bleu_tokenize` in the MLPerf reference, copied as Google's v0.7
`lingvo/core/ml_perf_bleu_metric.py`): corpus BLEU-4 of uncased text under
the "international" mteval-v14 tokenisation (a space around every
punctuation mark next to a non-digit and around every symbol), n-gram
precisions with zero matches smoothed as 1 / (2^k x candidates), and the
usual brevity penalty. sacrebleu computes exactly that with
`tokenize='intl', lowercase=True, smooth_method='exp'`
(tests/models/common/test_bleu.py checks it against the reference's sequence).
MLPerf logs it as a fraction: the target is 0.25.

Corpus BLEU is a function of integer sums over sentences (hypothesis and
reference lengths, matched and total n-grams of each order), so chunks of
the corpus can be counted in separate processes and summed: `BleuMetric`
with `processes` > 1 does that in a pool, and gives the one-process score
bit for bit (the sums are exact; sacrebleu's corpus score is the same
function of the same sums). Imports no TensorFlow, for the pool's spawned
processes.
"""

from typing import Mapping, Sequence

import numpy as np

from input_pipeline import subwords
from models.common import host_pool


def _sacrebleu():
  import sacrebleu
  return sacrebleu.metrics.BLEU(tokenize='intl', lowercase=True,
                                smooth_method='exp')


def mlperf_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus BLEU in [0, 1] of `hypotheses` against one reference each."""
  return _sacrebleu().corpus_score(list(hypotheses),
                                   [list(references)]).score / 100.0


def bleu_statistics(pairs: tuple) -> list[int]:
  """(hypotheses, references) -> their summed BLEU statistics:
  [hypothesis length, reference length, matched n-grams 1..4, n-grams 1..4]."""
  hypotheses, references = pairs
  score = _sacrebleu().corpus_score(list(hypotheses), [list(references)])
  return [score.sys_len, score.ref_len, *score.counts, *score.totals]


def bleu_from_statistics(stats: Sequence[int]) -> float:
  """Corpus BLEU in [0, 1] from summed `bleu_statistics`."""
  from sacrebleu.metrics import BLEU
  stats = [int(s) for s in stats]
  return BLEU.compute_bleu(correct=stats[2:6], total=stats[6:10],
                           sys_len=stats[0], ref_len=stats[1],
                           smooth_method='exp').score / 100.0


class BleuMetric:
  """Detokenises decoded ids and scores them. Implements
  training.task.PerHostMetric; fed `ids` [n, length] and `index` [n] (the
  pair's line in the references). Per host, each host translates and counts
  its own pairs; the chief gets 13 numbers from each."""

  def __init__(self, *, vocab: subwords.SubwordVocab,
               references: Sequence[str], processes: int = 0):
    """Args:
      vocab: detokenises the decoded ids.
      references: the eval pairs' target texts, in index order.
      processes: count BLEU's statistics in this many host processes, in
        chunks of consecutive pairs (0 or 1: in this process).
    """
    self.vocab, self.references = vocab, list(references)
    self.processes = processes
    self.translations = {}
    self._pool = host_pool.HostPool(processes)

  def reset(self) -> None:
    self.translations = {}

  def update(self, outputs: Mapping[str, np.ndarray]) -> None:
    for index, ids in zip(outputs['index'], outputs['ids']):
      index = int(index)
      if index in self.translations:
        raise RuntimeError(f'Eval pair {index} was translated twice: the eval '
                           'input repeats records.')
      self.translations[index] = self.vocab.decode(ids)

  def result(self) -> dict[str, float]:
    """{'bleu': ..., 'translated': pairs}; every reference must have had its
    translation."""
    missing = len(self.references) - len(self.translations)
    if missing:
      raise RuntimeError(
          f'{missing} of {len(self.references)} eval pairs were not '
          'translated: BLEU would be over part of the eval set.')
    hypotheses = [self.translations[i] for i in range(len(self.references))]
    if self.processes <= 1:
      score = mlperf_bleu(hypotheses, self.references)
    else:
      score = bleu_from_statistics(self._counts(hypotheses, self.references))
    return {'bleu': score, 'translated': float(len(self.translations))}

  def statistics(self) -> np.ndarray:
    """This host's pairs' BLEU statistics (bleu_statistics' 10 counts) and
    three of their indices: how many, the sum of index + 1 and of its
    square (summed over hosts, they show a pair missing or repeated)."""
    indices = sorted(self.translations)
    hypotheses = [self.translations[i] for i in indices]
    references = [self.references[i] for i in indices]
    counts = (self._counts(hypotheses, references) if indices
              else [0] * 10)
    ids = np.asarray(indices, np.float64) + 1.0
    return np.asarray([*counts, len(ids), ids.sum(), np.square(ids).sum()],
                      np.float64)

  def result_from(self, parts: Sequence[np.ndarray]) -> dict[str, float]:
    """{'bleu', 'translated'} of every host's statistics, summed.

    Raises:
      RuntimeError: if the hosts did not translate every pair once.
    """
    statistics = np.sum(parts, axis=0)
    n = len(self.references)
    ids = np.arange(1, n + 1, dtype=np.float64)
    translated, id_sum, id_squares = statistics[10:13]
    if (translated, id_sum, id_squares) != (n, ids.sum(),
                                            np.square(ids).sum()):
      raise RuntimeError(
          f'The hosts translated {int(translated)} eval pairs for '
          f'{n}, not each pair once: BLEU would be over part of the eval '
          'set.')
    return {'bleu': bleu_from_statistics(statistics[:10]),
            'translated': float(translated)}

  def _counts(self, hypotheses, references) -> list:
    if self.processes <= 1:
      return bleu_statistics((hypotheses, references))
    bounds = np.linspace(0, len(hypotheses), self.processes + 1).astype(int)
    chunks = [(hypotheses[a:b], references[a:b])
              for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return list(np.sum(self._pool.map(bleu_statistics, chunks), axis=0))

  def close(self) -> None:
    """Stops the pool's processes."""
    self._pool.close()
