"""An invertible subword vocabulary: tensorflow-text WordPiece over a
lossless split of the text.

MLPerf's Transformer scores BLEU on detokenised text, so the tokenisation
must give back exactly the text it was given. WordPiece alone does not (it
drops whitespace), so the text is first turned into "words" whose
concatenation is the text itself:

1. escape: `\\`, `#` (WordPiece's suffix marker), the space marker `▁` and
   any character outside the vocabulary's alphabet become `\\<code point>;`;
2. every space becomes `▁` and one `▁` is put in front (as SentencePiece);
3. split into words: a run of letters and digits, or any other single
   character, each with the `▁` before it (regex `WORD` below).

Each word is cut into the longest vocabulary pieces (tensorflow-text's
FastWordpieceTokenizer; a piece inside a word carries the `##` prefix).
Decoding is concatenation: drop each piece's `##`, turn `▁` back into
spaces, drop the leading one and undo the escapes.

The vocabulary file holds one piece a line; its line number is the id. Ids 0
and 1 are reserved as in Google's v0.7 Transformer (`<pad>` 0, also the
decoder's start id; `<EOS>` 1), and 2 is `[UNK]`.
"""

import collections
import re
from typing import Iterable, Sequence

import numpy as np

PAD, EOS, UNK = '<pad>', '<EOS>', '[UNK]'
RESERVED = (PAD, EOS, UNK)
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
SUFFIX = '##'
SPACE = '\u2581'  # ▁
_ESCAPED = ('\\', '#', SPACE)
# Characters escapes are written with: always in the alphabet.
_ESCAPE_ALPHABET = '\\;0123456789'
# A letter/digit run (at most 40 characters: WordPiece gives up on longer
# words) or one other character, each with its optional space marker.
WORD = re.compile(SPACE + r'?[^\W_]{1,40}|' + SPACE + r'?[^' + SPACE + ']|' +
                  SPACE)
_UNESCAPE = re.compile(r'\\(\d+);')


def escape(text: str, alphabet: frozenset | None = None) -> str:
  """`text` with reserved characters (and, given an alphabet, every
  character outside it) written as `\\<code point>;`."""
  out = []
  for c in text:
    if c in _ESCAPED or (alphabet is not None and c not in alphabet and
                         c != ' '):
      out.append(f'\\{ord(c)};')
    else:
      out.append(c)
  return ''.join(out)


def words(text: str, alphabet: frozenset | None = None) -> list[str]:
  """The lossless split of `text` (see the module docstring)."""
  marked = SPACE + escape(text, alphabet).replace(' ', SPACE)
  return WORD.findall(marked)


def join_pieces(pieces: Iterable[str]) -> str:
  """The text of a piece sequence: the inverse of `words` plus WordPiece."""
  marked = ''.join(p[len(SUFFIX):] if p.startswith(SUFFIX) else p
                   for p in pieces)
  if marked.startswith(SPACE):
    marked = marked[1:]
  return _UNESCAPE.sub(lambda m: chr(int(m.group(1))),
                       marked.replace(SPACE, ' '))


class BadVocabulary(ValueError):
  pass


class SubwordVocab:
  """Encodes text to ids and decodes ids to text (exactly invertible)."""

  def __init__(self, pieces: Sequence[str], *, source: str = 'vocabulary'):
    """Args:
      pieces: the vocabulary, id order; the first three are RESERVED.
      source: where the pieces came from, for error messages.

    Raises:
      BadVocabulary: naming the source and the first wrong reserved line.
    """
    for i, want in enumerate(RESERVED):
      got = pieces[i] if i < len(pieces) else None
      if got != want:
        raise BadVocabulary(
            f'{source}: line {i + 1} (id {i}) is {got!r}, but ids 0, 1, 2 '
            f'must be {", ".join(RESERVED)}. Build the vocabulary with '
            'tools/build_translation_data.py.')
    self.pieces = list(pieces)
    self.ids = {p: i for i, p in enumerate(self.pieces)}
    if len(self.ids) != len(self.pieces):
      dup = [p for p, n in collections.Counter(self.pieces).items() if n > 1]
      raise BadVocabulary(f'{source}: pieces repeat, e.g. {dup[0]!r}.')
    self.alphabet = frozenset(
        p for p in self.pieces if len(p) == 1) | frozenset(_ESCAPED)
    missing = [c for c in _ESCAPE_ALPHABET + SPACE if c not in self.ids]
    if missing:
      raise BadVocabulary(
          f'{source}: the pieces {missing!r} are missing; every vocabulary '
          'needs the digits, "\\", ";" and "▁" to escape rare characters. '
          'Build it with tools/build_translation_data.py.')
    self._tokenizer = None

  @classmethod
  def load(cls, path: str) -> 'SubwordVocab':
    import tensorflow as tf  # Reads gs:// paths too.
    with tf.io.gfile.GFile(path, 'rb') as f:
      raw = f.read()
    try:
      text = raw.decode('utf-8')
    except UnicodeDecodeError as e:
      raise BadVocabulary(f'{path} is not UTF-8 text (byte {e.start}).') from e
    return cls(text.rstrip('\n').split('\n'), source=path)

  def save(self, path: str) -> None:
    import tensorflow as tf
    with tf.io.gfile.GFile(path, 'w') as f:
      f.write('\n'.join(self.pieces) + '\n')

  def __len__(self) -> int:
    return len(self.pieces)

  def _wordpiece(self):
    if self._tokenizer is None:
      import tensorflow_text as tf_text
      self._tokenizer = tf_text.FastWordpieceTokenizer(
          vocab=self.pieces, suffix_indicator=SUFFIX, max_bytes_per_word=400,
          token_out_type='int64', unknown_token=UNK, no_pretokenization=True)
    return self._tokenizer

  def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
    """Each text's ids (no EOS), int64."""
    import tensorflow as tf
    split = [words(t, self.alphabet) for t in texts]
    flat = [w for ws in split for w in ws]
    if not flat:
      return [np.zeros([0], np.int64) for _ in texts]
    per_word = self._wordpiece().tokenize(tf.constant(flat)).to_list()
    out, k = [], 0
    for ws in split:
      pieces = per_word[k:k + len(ws)]
      k += len(ws)
      out.append(np.asarray([i for p in pieces for i in p], np.int64))
    return out

  def encode(self, text: str) -> np.ndarray:
    return self.encode_batch([text])[0]

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids`, stopping at the first EOS and skipping padding."""
    pieces = []
    for i in ids:
      i = int(i)
      if i == EOS_ID:
        break
      if i != PAD_ID:
        pieces.append(self.pieces[i])
    return join_pieces(pieces)


def learn(texts: Iterable[str], *, vocab_size: int) -> SubwordVocab:
  """A vocabulary of about `vocab_size` pieces learnt from `texts` with
  tensorflow-text's WordPiece learner (source and target text together
  make MLPerf's shared vocabulary). The same vocabulary as the library's
  `learn`, in fewer passes (input_pipeline/wordpiece_search.py)."""
  from input_pipeline import wordpiece_search
  counts = collections.Counter()
  for text in texts:
    counts.update(words(text))
  # The escape characters, alone and inside words, whatever the text holds.
  for c in _ESCAPE_ALPHABET + SPACE:
    counts[c] += 1
    counts['x' + c] += 1
  pieces = wordpiece_search.learn(
      sorted(counts.items()), vocab_size=vocab_size,
      reserved_tokens=list(RESERVED), lower_thresh=1, max_unique_chars=2000,
      include_joiner_token=True, joiner=SUFFIX)
  return SubwordVocab(pieces, source='learnt vocabulary')
