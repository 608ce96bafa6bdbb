"""BLEU: sacrebleu as configured equals the MLPerf reference's own script."""

import collections
import math
import re
import sys
import unicodedata

import numpy as np
import pytest

from models.common import bleu


# The MLPerf reference's BLEU (translation/tensorflow/transformer/
# compute_bleu.py and utils/metrics.py, as in Google's v0.7
# ml_perf_bleu_metric.py), its sequence rewritten here as the arbiter.
def _punctuation_and_symbols():
  chars = [chr(x) for x in range(sys.maxunicode)]
  punct = ''.join(c for c in chars if unicodedata.category(c).startswith('P'))
  symbols = {c for c in chars if unicodedata.category(c).startswith('S')}
  return punct, symbols


_PUNCT, _SYMBOLS = _punctuation_and_symbols()
_NONDIGIT_PUNCT = re.compile(r'([^\d])([' + re.escape(_PUNCT) + r'])')
_PUNCT_NONDIGIT = re.compile(r'([' + re.escape(_PUNCT) + r'])([^\d])')


def reference_tokenize(text):
  text = _NONDIGIT_PUNCT.sub(r'\1 \2 ', text)
  text = _PUNCT_NONDIGIT.sub(r' \1 \2', text)
  text = ''.join(f' {c} ' if c in _SYMBOLS else c for c in text)
  return text.split()


def ngrams(tokens, max_order):
  counts = collections.Counter()
  for order in range(1, max_order + 1):
    for i in range(len(tokens) - order + 1):
      counts[tuple(tokens[i:i + order])] += 1
  return counts


def reference_bleu(references, hypotheses, max_order=4):
  references = [reference_tokenize(r.lower()) for r in references]
  hypotheses = [reference_tokenize(h.lower()) for h in hypotheses]
  ref_length = hyp_length = 0
  matches = [0] * max_order
  possible = [0] * max_order
  for ref, hyp in zip(references, hypotheses):
    ref_length += len(ref)
    hyp_length += len(hyp)
    ref_counts, hyp_counts = ngrams(ref, max_order), ngrams(hyp, max_order)
    for gram, count in ref_counts.items():
      matches[len(gram) - 1] += min(count, hyp_counts[gram])
    for gram, count in hyp_counts.items():
      possible[len(gram) - 1] += count
  precisions, smooth = [0.0] * max_order, 1.0
  for i in range(max_order):
    if possible[i] > 0:
      if matches[i] > 0:
        precisions[i] = matches[i] / possible[i]
      else:
        smooth *= 2
        precisions[i] = 1.0 / (smooth * possible[i])
  geo_mean = 0.0
  if max(precisions) > 0:
    geo_mean = math.exp(sum(math.log(p) for p in precisions if p) / max_order)
  ratio = hyp_length / ref_length
  bp = 0.0 if ratio <= 0 else 1.0 if ratio >= 1 else math.exp(1 - 1 / ratio)
  return geo_mean * bp


def perturbed(texts, seed):
  """Hypotheses of mixed quality: words dropped, swapped, re-cased, with
  punctuation and symbols kept (the tokeniser's cases)."""
  rng = np.random.default_rng(seed)
  out = []
  for text in texts:
    words = text.split()
    kind = rng.integers(4)
    if kind == 1 and len(words) > 1:
      words.pop(int(rng.integers(len(words))))
    elif kind == 2 and len(words) > 2:
      i = int(rng.integers(len(words) - 1))
      words[i], words[i + 1] = words[i + 1], words[i]
    elif kind == 3:
      words = [w.upper() for w in words]
    out.append(' '.join(words))
  return out


@pytest.fixture(scope='module')
def german_references():
  from tools.formats import gettext_pairs
  pairs = gettext_pairs.catalog_pairs(('Django', 'Sphinx'))
  return [t for _, t in pairs]


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_sacrebleu_equals_the_reference_script(german_references, seed):
  rng = np.random.default_rng(seed)
  refs = list(rng.choice(german_references, 300, replace=False))
  hyps = perturbed(refs, seed)
  assert 0.2 < reference_bleu(refs, hyps) < 0.95  # A mixed case.
  assert bleu.mlperf_bleu(hyps, refs) == pytest.approx(
      reference_bleu(refs, hyps), abs=1e-9)


def test_smoothing_of_orders_without_matches_is_the_reference_s():
  refs = ['Das Löschen des Objekts „x“ würde erfordern: 5 $.',
          'Bitte zwei gültige Werte eingeben.']
  hyps = ['Löschen Objekt erfordern 5 €', 'zwei Werte']
  value = reference_bleu(refs, hyps)
  assert 0 < value < 0.1  # No 4-gram matches: smoothed, not zero.
  assert bleu.mlperf_bleu(hyps, refs) == pytest.approx(value, abs=1e-9)


class _Vocab:
  """Ids are characters' code points (a stand-in for SubwordVocab.decode,
  which the round-trip tests pin)."""

  @staticmethod
  def decode(ids):
    return ''.join(chr(i) for i in ids if i > 1)


def as_ids(texts):
  """_Vocab's ids of texts, EOS-terminated, zero-padded to one width."""
  encoded = [[ord(c) for c in text] + [1] for text in texts]
  width = max(len(e) for e in encoded)
  return np.array([e + [0] * (width - len(e)) for e in encoded])


def test_metric_scores_each_pair_once_in_index_order():
  refs = ['eins zwei drei', 'vier fünf', 'sechs sieben acht neun']
  metric = bleu.BleuMetric(vocab=_Vocab(), references=refs)
  ids = as_ids(refs)
  metric.update({'ids': ids[[2, 0]], 'index': np.array([2, 0])})
  with pytest.raises(RuntimeError, match='1 of 3 eval pairs were not'):
    metric.result()
  metric.update({'ids': ids[[1]], 'index': np.array([1])})
  assert metric.result() == {'bleu': pytest.approx(1.0), 'translated': 3.0}
  with pytest.raises(RuntimeError, match='translated twice'):
    metric.update({'ids': ids[[1]], 'index': np.array([1])})
  metric.reset()
  metric.update({'ids': ids[[1, 0, 2]], 'index': np.array([0, 1, 2])})
  # Each translation is scored against its index's reference.
  assert metric.result()['bleu'] == pytest.approx(
      bleu.mlperf_bleu([refs[1], refs[0], refs[2]], refs))
  assert metric.result()['bleu'] < 0.9


def test_a_pool_of_processes_gives_the_one_process_bleu_bit_for_bit(
    german_references):
  refs = german_references[:900]
  hyps = perturbed(refs, 5)
  ids = as_ids(hyps)
  metric = bleu.BleuMetric(vocab=_Vocab(), references=refs, processes=3)
  try:
    metric.update({'ids': ids, 'index': np.arange(len(refs))})
    pooled = metric.result()
    # A second eval reuses the pool's processes.
    metric.reset()
    metric.update({'ids': ids[::-1], 'index': np.arange(len(refs))[::-1]})
    again = metric.result()
  finally:
    metric.close()
  single = bleu.mlperf_bleu(hyps, refs)
  assert 0.2 < single < 0.95
  assert pooled['bleu'] == again['bleu'] == single  # Bit for bit.
  assert pooled['translated'] == 900
  # The statistics are integer sums: chunks add up to the whole corpus's.
  whole = bleu.bleu_statistics((hyps, refs))
  parts = np.sum([bleu.bleu_statistics((hyps[a:b], refs[a:b]))
                  for a, b in ((0, 1), (1, 400), (400, 900))], axis=0)
  assert parts.tolist() == whole
  assert bleu.bleu_from_statistics(whole) == single


def test_hosts_sum_statistics_to_the_one_host_bleu_bit_for_bit(
    german_references):
  refs = german_references[:300]
  ids = as_ids(perturbed(refs, 7))
  rng = np.random.default_rng(0)
  host_of = rng.integers(0, 3, len(refs))  # Interleaved, as replicas are.

  def hosts(assign):
    metrics = [bleu.BleuMetric(vocab=_Vocab(), references=refs)
               for _ in range(3)]
    for h, metric in enumerate(metrics):
      mine = np.flatnonzero(assign == h)
      if len(mine):
        metric.update({'ids': ids[mine], 'index': mine})
    return metrics, [m.statistics() for m in metrics]

  metrics, total = hosts(host_of)
  whole = bleu.BleuMetric(vocab=_Vocab(), references=refs)
  whole.update({'ids': ids, 'index': np.arange(len(refs))})
  assert metrics[0].result_from(total) == whole.result()  # Bit for bit.
  assert whole.result_from([whole.statistics()]) == whole.result()
  assert 0.2 < whole.result()['bleu'] < 0.95
  # Only 13 numbers a host travel; the examples stay on their host.
  assert [t.shape for t in total] == [(13,)] * 3

  # A pair on two hosts and another on none: the same count, caught.
  extra = bleu.BleuMetric(vocab=_Vocab(), references=refs)
  extra.update({'ids': ids[[5]], 'index': np.array([5])})
  gap = bleu.BleuMetric(vocab=_Vocab(), references=refs)
  gap.update({'ids': ids[[6]], 'index': np.array([6])})
  with pytest.raises(RuntimeError, match='not each pair once'):
    metrics[0].result_from(total + [extra.statistics(), -gap.statistics()])
  with pytest.raises(RuntimeError, match='translated 299 eval pairs for 300'):
    metrics[0].result_from(total + [-gap.statistics()])
