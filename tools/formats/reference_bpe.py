"""Raw parallel text to the MLPerf GNMT reference's BPE tokens, step by step
as its data script does (mlcommons/training v0.7,
`rnn_translator/download_dataset.sh` and `pytorch/scripts/filter_dataset.py`):

1. Moses tokenization of each side in its language (`tokenizer.perl -l en`
   / `-l de`, escaping on: sacremoses, its Python port);
2. training pairs only: `clean-corpus-n.perl ... 1 80`: '|' removed,
   whitespace runs collapsed, pairs with a side empty, of more than 80 or
   fewer than 1 tokens, a token over 1,000 characters or a length ratio over
   9 left out; then filter_dataset.py: pairs with a character outside
   latin-1 left out;
3. a joint BPE of `merges` (32,000) operations learnt on the cleaned German
   then English training text (subword-nmt's learn_bpe, as the reference),
   or the reference's own codes file;
4. the BPE applied to every sentence (apply_bpe);
5. the vocabulary: get_vocab over the segmented English then German
   training text (most frequent first), or the reference's vocab.bpe.32000.

The eval pairs are tokenized and segmented, never cleaned (the reference
translates newstest2014.tok.bpe.32000.en, all 3,003 lines).
"""

import contextlib
import dataclasses
import io
import re
from typing import Sequence

from input_pipeline import bpe
from models.common import tokenized_bleu

# clean-corpus-n.perl's defaults as the reference runs it.
MIN_TOKENS, MAX_TOKENS, MAX_RATIO, MAX_TOKEN_CHARS = 1, 80, 9.0, 1000


@dataclasses.dataclass
class Prepared:
  """Pairs as BPE-segmented text, the vocabulary, the codes, and counts of
  the pairs left out."""
  train: list
  eval: list
  vocab: bpe.BpeVocab
  codes: str
  dropped_by_clean: int
  dropped_by_latin1: int


def _clean_side(text: str) -> str:
  return re.sub(r'\s+', ' ', text.replace('|', '')).strip()


def clean_corpus(pairs: Sequence[tuple]) -> tuple[list, int]:
  """clean-corpus-n.perl on tokenized pairs (1 to 80 tokens, ratio 9):
  (kept pairs, cleaned as it writes them; how many were left out)."""
  kept = []
  for source, target in pairs:
    source, target = _clean_side(source), _clean_side(target)
    if not source or not target:
      continue
    s, t = source.split(' '), target.split(' ')
    if not (MIN_TOKENS <= len(s) <= MAX_TOKENS and
            MIN_TOKENS <= len(t) <= MAX_TOKENS):
      continue
    if len(s) / len(t) > MAX_RATIO or len(t) / len(s) > MAX_RATIO:
      continue
    if max(map(len, s + t)) > MAX_TOKEN_CHARS:
      continue
    kept.append((source, target))
  return kept, len(pairs) - len(kept)


def latin1_only(pairs: Sequence[tuple]) -> tuple[list, int]:
  """filter_dataset.py: pairs whose both sides encode as latin-1."""
  def fits(text):
    try:
      text.encode('latin1')
    except UnicodeEncodeError:
      return False
    return True
  kept = [p for p in pairs if fits(p[0]) and fits(p[1])]
  return kept, len(pairs) - len(kept)


def learn_codes(texts: Sequence[str], merges: int) -> str:
  """subword-nmt's learn_bpe over `texts` (one sentence a line)."""
  from subword_nmt import learn_bpe
  out = io.StringIO()
  with contextlib.redirect_stderr(io.StringIO()):  # Its progress bar.
    learn_bpe.learn_bpe(io.StringIO(''.join(t + '\n' for t in texts)), out,
                        merges)
  return out.getvalue()


def segment(codes: str, texts: Sequence[str]) -> list[str]:
  """subword-nmt's apply_bpe of `codes` to each tokenized text."""
  from subword_nmt import apply_bpe
  model = apply_bpe.BPE(io.StringIO(codes))
  return [model.segment(t.strip()) for t in texts]


def vocabulary(texts: Sequence[str]) -> list[str]:
  """subword-nmt's get_vocab: the tokens of `texts`, most frequent first."""
  from subword_nmt import get_vocab
  out = io.StringIO()
  get_vocab.get_vocab(io.StringIO(''.join(t + '\n' for t in texts)), out)
  return [line.split(' ')[0] for line in out.getvalue().splitlines()]


def prepare(train_pairs: Sequence[tuple], eval_pairs: Sequence[tuple], *,
            merges: int = 32000, codes: str = '',
            vocab_tokens: Sequence[str] = (), source_lang: str = 'en',
            target_lang: str = 'de') -> Prepared:
  """The reference's steps (module docstring) on raw text pairs.

  Args:
    train_pairs, eval_pairs: (source, target) raw text.
    merges: BPE operations to learn (the reference: 32,000).
    codes: the reference's BPE codes (bpe.32000) instead of learning.
    vocab_tokens: the reference's vocab.bpe.32000 instead of get_vocab's.
    source_lang, target_lang: the Moses tokenizer's languages.
  """
  def tokenized(pairs):
    sources = tokenized_bleu.moses_tokenized([s for s, _ in pairs],
                                             source_lang)
    targets = tokenized_bleu.moses_tokenized([t for _, t in pairs],
                                             target_lang)
    return list(zip(sources, targets))

  train, dropped_clean = clean_corpus(tokenized(train_pairs))
  train, dropped_latin = latin1_only(train)
  if not train:
    raise ValueError('No training pair is left after the reference\'s '
                     'cleaning (1 to 80 tokens a side, ratio 9, latin-1).')
  if not codes:
    codes = learn_codes([t for _, t in train] + [s for s, _ in train], merges)
  evaluation = tokenized(eval_pairs)

  def segmented(pairs):
    sides = segment(codes, [s for s, _ in pairs] + [t for _, t in pairs])
    return list(zip(sides[:len(pairs)], sides[len(pairs):]))

  train, evaluation = segmented(train), segmented(evaluation)
  tokens = vocab_tokens or vocabulary([s for s, _ in train] +
                                      [t for _, t in train])
  vocab = bpe.BpeVocab.from_reference(tokens, lang=target_lang)
  return Prepared(train=train, eval=evaluation, vocab=vocab, codes=codes,
                  dropped_by_clean=dropped_clean,
                  dropped_by_latin1=dropped_latin)
