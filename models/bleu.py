"""BLEU as MLPerf v0.7 computes it for the Transformer, on the host.

The arbiter of "25.0" is the reference's script (`compute_bleu` with
`bleu_tokenize` in the MLPerf reference, copied as Google's v0.7
`lingvo/core/ml_perf_bleu_metric.py`): corpus BLEU-4 of uncased text under
the "international" mteval-v14 tokenisation (a space around every
punctuation mark next to a non-digit and around every symbol), n-gram
precisions with zero matches smoothed as 1 / (2^k x candidates), and the
usual brevity penalty. sacrebleu computes exactly that with
`tokenize='intl', lowercase=True, smooth_method='exp'`
(tests/models/test_bleu.py checks it against the reference's sequence).
MLPerf logs it as a fraction: the target is 0.25.
"""

from typing import Mapping, Sequence

import numpy as np

from input_pipeline import subwords


def mlperf_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus BLEU in [0, 1] of `hypotheses` against one reference each."""
  import sacrebleu
  bleu = sacrebleu.metrics.BLEU(tokenize='intl', lowercase=True,
                                smooth_method='exp')
  return bleu.corpus_score(list(hypotheses), [list(references)]).score / 100.0


class BleuMetric:
  """Detokenises decoded ids and scores them. Implements
  training.task.HostMetric; fed `ids` [n, length] and `index` [n] (the
  pair's line in the references)."""

  def __init__(self, *, vocab: subwords.SubwordVocab,
               references: Sequence[str]):
    self.vocab, self.references = vocab, list(references)
    self.translations = {}

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
    order = range(len(self.references))
    return {'bleu': mlperf_bleu([self.translations[i] for i in order],
                                self.references),
            'translated': float(len(self.translations))}
