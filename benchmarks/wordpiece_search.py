"""Benchmark: learning the Transformer quickstart's vocabulary with
tensorflow-text's WordPiece learner and with input_pipeline.wordpiece_search.

  python -m benchmarks.wordpiece_search [--vocab_size=4000] \
      [--eval_every=20]

Counts the words of the quickstart's training pairs (the catalogs pip
installs, 1 pair in `--eval_every` held out, as tools.build_translation_data
does), learns a vocabulary from them with both, one after the other, and
prints each one's wall time, the thresholds it learnt and the ratio. The
two vocabularies must be the same, or the benchmark stops.
"""

import collections
import time

from absl import app
from absl import flags
from benchmarks import common
from core import entry_point

FLAGS = flags.FLAGS


def main(argv):
  del argv
  from tensorflow_text.tools.wordpiece_vocab import (
      wordpiece_tokenizer_learner_lib as lib)
  from input_pipeline import subwords
  from input_pipeline import wordpiece_search
  from tools import build_translation_data
  from tools.formats import gettext_pairs
  train, _ = build_translation_data.held_out(gettext_pairs.catalog_pairs(),
                                             every=FLAGS.eval_every)
  counts = collections.Counter()
  for pair in train:
    for text in pair:
      counts.update(subwords.words(text))
  word_counts = sorted(counts.items())
  args = dict(vocab_size=FLAGS.vocab_size,
              reserved_tokens=list(subwords.RESERVED), lower_thresh=1,
              max_unique_chars=2000, include_joiner_token=True, joiner='##')
  learn_with_thresh, learnt = lib.learn_with_thresh, []

  def counted(*a):
    learnt.append(a[1])
    return learn_with_thresh(*a)
  lib.learn_with_thresh = counted  # Counts both: the search calls it too.
  results = {}
  for name, learn in (('tensorflow-text', lib.learn),
                      ('wordpiece_search', wordpiece_search.learn)):
    learnt.clear()
    started = time.time()
    vocab = learn(word_counts, **args)
    results[name] = (time.time() - started, list(learnt), vocab)
    print(f'{name}: {results[name][0]:.1f} s, {len(learnt)} thresholds '
          f'{learnt}, {len(vocab)} pieces', flush=True)
  lib.learn_with_thresh = learn_with_thresh
  (library, _, expected), (ours, _, got) = results.values()
  if got != expected:
    raise SystemExit('the vocabularies differ')
  print(f'{len(word_counts)} words, target {FLAGS.vocab_size}: the same '
        f'vocabulary {library / ours:.2f}x faster')
  print(common.page_rows([(
      f'WordPiece vocabulary, {FLAGS.vocab_size:,} pieces',
      f'`wordpiece_search` {ours:.1f} s',
      f'tensorflow-text `learn` {library:.1f} s',
      f'{library / ours:.2f}x, the same pieces')]))


if __name__ == '__main__':
  flags.DEFINE_integer('vocab_size', 4000, 'the target vocabulary size')
  flags.DEFINE_integer('eval_every', 20, 'one pair in this many held out')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
