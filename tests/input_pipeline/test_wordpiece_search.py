"""The shortened threshold search gives tensorflow-text's vocabulary."""

import collections

import numpy as np
from tensorflow_text.tools.wordpiece_vocab import (
    wordpiece_tokenizer_learner_lib as lib)

from input_pipeline import subwords
from input_pipeline import wordpiece_search


def test_the_same_vocabulary_as_the_library_on_catalog_text(monkeypatch):
  from tools.formats import gettext_pairs
  pairs = gettext_pairs.catalog_pairs()[:400]
  counts = collections.Counter()
  for pair in pairs:
    for text in pair:
      counts.update(subwords.words(text))
  word_counts = sorted(counts.items())
  args = dict(reserved_tokens=list(subwords.RESERVED), lower_thresh=1,
              max_unique_chars=2000, include_joiner_token=True, joiner='##')
  learn_with_thresh, learnt = lib.learn_with_thresh, []
  monkeypatch.setattr(lib, 'learn_with_thresh', lambda *a: (
      learnt.append(a[1]), learn_with_thresh(*a))[1])
  for size in (300, 900):
    expected = lib.learn(word_counts, vocab_size=size, **args)
    library = len(learnt)
    assert wordpiece_search.learn(word_counts, vocab_size=size,
                                  **args) == expected, size
    # No more thresholds learnt than the library's path (here 6 and 6,
    # 6 and 2; the quickstart catalog: 12 and 4).
    assert len(learnt) - library <= library, (size, learnt)
    learnt.clear()


class Learnt(collections.namedtuple('Learnt', 'thresh size')):
  """A stand-in vocabulary: its threshold and its length."""

  def __len__(self):
    return self.size


def test_the_library_path_for_shrinking_vocabularies(monkeypatch):
  # Vocabulary size as a falling function of the threshold, as learnt
  # vocabularies are: the library's bisection (its learn_with_thresh
  # replaced) and the shortened one end at the same threshold.
  rng = np.random.default_rng(0)
  for case in range(300):
    upper = int(rng.integers(2, 5000))
    # sizes[t] = 1 + the drops from t on: never rising with t.
    drops = rng.integers(0, 40, upper + 2) * (rng.random(upper + 2) < 0.3)
    sizes = 1 + np.cumsum(drops[::-1])[::-1]
    target = int(rng.integers(1, sizes[1] + 2))
    word_counts = rng.integers(1, upper + 1, 50).tolist()
    monkeypatch.setattr(lib, 'learn_with_thresh',
                        lambda wc, t, p: Learnt(t, int(sizes[t])))
    params = lib.Params(upper, 1, 4, None, 50, 1000, target, 0.05, True, '##',
                        [])
    expected = lib.learn_binary_search([], 1, upper, params)
    got = wordpiece_search._search(lambda t: Learnt(t, int(sizes[t])),
                                   word_counts, 1, upper, target,
                                   0.05 * target)
    assert got.thresh == expected.thresh, (case, upper, target)
