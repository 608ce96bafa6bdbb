"""The MLPerf GNMT reference's vocabulary: Moses tokens cut by a joint BPE
(subword-nmt), looked up word by word.

The reference (mlcommons/training v0.7, `rnn_translator/download_dataset.sh`)
writes `*.tok.bpe.32000.*` text, tokens separated by spaces, a token inside
a word ending in "@@"; `vocab.bpe.32000` lists the tokens of the training
text, most frequent first. Google's v0.7 TPU GNMT looks each token up in it
(`<unk>` for the rest) and, to score, joins the tokens, removes "@@ " and
Moses-detokenizes.

Here the vocabulary file is `vocab.txt` of a data folder built with
`tools/build_translation_data.py --vocab_format=bpe`: this suite's reserved
ids first (`<pad>` 0, also the decoder's start id; `<EOS>` 1; `[UNK]` 2,
as input_pipeline/subwords.py), then the reference's tokens in its order.
`encode_batch` takes BPE-segmented text (tools/formats/reference_bpe.py
makes it from raw text); `decode` gives detokenized text (sacremoses'
MosesDetokenizer, the Python port of detokenizer.perl).
"""

from typing import Iterable, Sequence

import numpy as np

from input_pipeline import subwords

JOINER = '@@'


class BadBpeVocabulary(ValueError):
  """A vocabulary file that is not a BPE token list."""


class BpeVocab:
  """Token <-> id, and detokenization of decoded ids."""

  def __init__(self, tokens: Sequence[str], *, lang: str = 'de',
               source: str = 'vocabulary'):
    """Args:
      tokens: the vocabulary, id order, the reserved three first.
      lang: the language `decode` detokenizes (the target's).
      source: names the vocabulary in errors.
    """
    self.pieces = list(tokens)
    if tuple(self.pieces[:3]) != subwords.RESERVED:
      raise BadBpeVocabulary(
          f'{source}: the first three tokens must be {subwords.RESERVED}, '
          f'got {tuple(self.pieces[:3])}. Build the data with '
          'tools/build_translation_data.py --vocab_format=bpe.')
    self.ids = {t: i for i, t in enumerate(self.pieces)}
    if len(self.ids) != len(self.pieces):
      raise BadBpeVocabulary(f'{source}: tokens repeat.')
    bad = [t for t in self.pieces if not t or ' ' in t]
    if bad:
      raise BadBpeVocabulary(f'{source}: token {bad[0]!r} is empty or holds '
                             'a space.')
    self.lang = lang
    self._detokenizer = None

  @classmethod
  def load(cls, path: str, lang: str = 'de') -> 'BpeVocab':
    import tensorflow as tf  # Reads gs:// paths too.
    with tf.io.gfile.GFile(path, 'rb') as f:
      raw = f.read()
    try:
      text = raw.decode('utf-8')
    except UnicodeDecodeError as e:
      raise BadBpeVocabulary(f'{path} is not UTF-8 text (byte '
                             f'{e.start}).') from e
    return cls(text.rstrip('\n').split('\n'), lang=lang, source=path)

  @classmethod
  def from_reference(cls, tokens: Iterable[str], lang: str = 'de',
                     source: str = 'vocabulary') -> 'BpeVocab':
    """The reference's token list (`vocab.bpe.32000`, or get_vocab's
    output) behind the reserved ids; its own `<unk>`, `<s>` and `</s>`
    (Google's vocab_utils adds them) are left out, their ids being the
    reserved ones."""
    skip = {'<unk>', '<s>', '</s>', *subwords.RESERVED}
    return cls([*subwords.RESERVED, *(t for t in tokens if t not in skip)],
               lang=lang, source=source)

  def __len__(self) -> int:
    return len(self.pieces)

  def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
    """Each BPE-segmented text's ids (no EOS), int64; unknown tokens
    [UNK]."""
    return [np.asarray([self.ids.get(t, subwords.UNK_ID) for t in text.split()],
                       np.int64) for text in texts]

  def encode(self, text: str) -> np.ndarray:
    return self.encode_batch([text])[0]

  def segmented(self, ids: Iterable[int]) -> str:
    """The tokens of `ids` joined by spaces, stopping at the first EOS and
    skipping padding: the reference's `*.tok.bpe.*` form."""
    tokens = []
    for i in ids:
      i = int(i)
      if i == subwords.EOS_ID:
        break
      if i != subwords.PAD_ID:
        tokens.append(self.pieces[i])
    return ' '.join(tokens)

  def decode(self, ids: Iterable[int]) -> str:
    """Detokenized text of `ids`: "@@ " joins removed, then Moses
    detokenization (escaped characters restored)."""
    text = self.segmented(ids).replace(JOINER + ' ', '')
    if text.endswith(JOINER):
      text = text[:-len(JOINER)]
    if self._detokenizer is None:
      from sacremoses import MosesDetokenizer
      self._detokenizer = MosesDetokenizer(lang=self.lang)
    return self._detokenizer.detokenize(text.split(), unescape=True)
