"""tensorflow-text's WordPiece learner with fewer passes over the words.

`wordpiece_tokenizer_learner_lib.learn` bisects the count threshold between
the largest and smallest word counts, learning a whole vocabulary at every
threshold it tries (four passes over every word each). Its answer is
decided by comparisons alone: at each threshold, is the vocabulary within
the slack of the target, above it or below it. A vocabulary only shrinks as
the threshold rises (the search assumes as much), so one learnt at a low
threshold that is already too small answers "below" for every higher
threshold without learning them, and one that is too large answers "above"
for every lower one.

`learn` here takes the same path as the library's and returns the
vocabulary it returns, but first learns a few thresholds upward from the
count of the `vocab_size`-th most frequent word (at that threshold every
word as frequent is a piece of its own, so the vocabulary is at least about
that large), doubling until one is too small; most of the library's path
then lies above it and costs nothing. The Transformer quickstart's
catalog (17,682 words, target 4,000): 4 thresholds learnt instead of 12,
the same 5,272 pieces 3.9 times faster (benchmarks/wordpiece_search.py,
docs/benchmarks.md).
"""

from typing import Sequence


def learn(word_counts: Sequence[tuple[str, int]], *, vocab_size: int,
          reserved_tokens: Sequence[str], lower_thresh: int = 10,
          upper_thresh: int = int(1e7), max_unique_chars: int = 1000,
          include_joiner_token: bool = True, joiner: str = '##',
          num_iterations: int = 4, max_input_tokens: int = int(5e6),
          max_token_length: int = 50, slack_ratio: float = 0.05) -> list[str]:
  """The vocabulary `wordpiece_tokenizer_learner_lib.learn` gives for the
  same arguments (its parameters, its defaults)."""
  from tensorflow_text.tools.wordpiece_vocab import (
      wordpiece_tokenizer_learner_lib as lib)
  params = lib.Params(upper_thresh, lower_thresh, num_iterations,
                      max_input_tokens, max_token_length, max_unique_chars,
                      vocab_size, slack_ratio, include_joiner_token, joiner,
                      list(reserved_tokens))
  upper, lower = lib.get_search_threshs(word_counts, params.upper_thresh,
                                        params.lower_thresh)
  all_counts = lib.get_input_words(word_counts, params.reserved_tokens,
                                   params.max_token_length)
  allowed = lib.get_allowed_chars(all_counts, params.max_unique_chars)
  counts = lib.filter_input_words(all_counts, allowed,
                                  params.max_input_tokens)
  return _search(lambda t: lib.learn_with_thresh(counts, t, params),
                 [c for _, c in counts], lower, upper, vocab_size,
                 max(slack_ratio * vocab_size, 0))


def _search(learn_at, word_counts: list[int], lower: int, upper: int,
            vocab_size: int, slack: float) -> list[str]:
  """`learn_binary_search`'s path over [lower, upper], learning a threshold
  only where no learnt one decides its comparison."""
  learnt = {}

  def vocab(t):
    if t not in learnt:
      learnt[t] = learn_at(t)
    return learnt[t]

  def too_small(size):
    return vocab_size - size > slack  # Below the target's slack.

  # Probes upward from the vocab_size-th largest word count.
  ranked = sorted(word_counts, reverse=True)
  t = max(lower, ranked[min(vocab_size, len(ranked)) - 1], 2)
  while t <= upper and not too_small(len(vocab(t))):
    t *= 2

  while True:
    t = (upper + lower) // 2
    terminal = lower >= upper or t <= 1
    if t not in learnt and not terminal:
      if any(s <= t and too_small(len(v)) for s, v in learnt.items()):
        upper = t - 1  # Smaller still: below the target.
        continue
      if any(s >= t and len(v) > vocab_size for s, v in learnt.items()):
        lower = t + 1  # Larger still: above the target.
        continue
    size = len(vocab(t))
    if (size <= vocab_size and not too_small(size)) or terminal:
      return learnt[t]
    if size > vocab_size:
      lower = t + 1
    else:
      upper = t - 1
