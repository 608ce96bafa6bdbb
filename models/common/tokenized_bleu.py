"""BLEU as MLPerf Inference v0.5 scores translation (GNMT), on the host.

Not the Training metric (models/common/bleu.py: sacreBLEU, `-lc --tokenize
intl`). v0.5's accuracy script (mlcommons/inference, branch r0.5,
`v0.5/translation/gnmt/tensorflow/process_accuracy.py`) scores each
translation against `newstest2014.tok.bpe.32000.de` with BPE's "@@ "
removed, i.e. the reference as the Moses tokenizer wrote it
(`tokenizer.perl -l de`, its defaults: escaping on, no aggressive dash
splitting, as tensorflow/nmt's `wmt16_en_de.sh` runs it), both split on
spaces, with tensorflow/nmt's `RunningBLEUScorer(4)`: corpus BLEU-4, cased,
no smoothing, brevity penalty exp(1 - reference / translation length) when
shorter. The target is 99% of the FP32 model's (23.9 x 0.99 for their GNMT).

Here the translations are this suite's detokenised text and the references
raw text, so both go through the same Moses tokenizer (sacremoses, the
Python port of tokenizer.perl) and are counted by sacreBLEU with its own
tokenisation off, cased and unsmoothed: the same sums and formula as
theirs (tests/models/common/test_tokenized_bleu.py checks it against their
sequence). One difference, kept: an empty translation counts as no token
here and as one empty token in theirs (`"".split(" ") == [""]`). Given as a
fraction, as this suite logs every BLEU.
"""

from typing import Sequence


def moses_tokenized(texts: Sequence[str], lang: str = 'de') -> list[str]:
  """Each text as `tokenizer.perl -l <lang>` writes it (escaping on)."""
  from sacremoses import MosesTokenizer
  tokenizer = MosesTokenizer(lang=lang)
  return [tokenizer.tokenize(t, return_str=True, escape=True) for t in texts]


def tokenized_bleu(hypotheses: Sequence[str],
                   references: Sequence[str]) -> float:
  """Corpus BLEU in [0, 1] of space-tokenised hypotheses, one reference
  each, as tensorflow/nmt counts it (cased, no smoothing)."""
  from sacrebleu.metrics import BLEU
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} translations for '
                     f'{len(references)} references.')
  if not hypotheses:
    raise ValueError('No translations to score.')
  scorer = BLEU(tokenize='none', lowercase=False, smooth_method='none',
                force=True)
  return scorer.corpus_score(list(hypotheses),
                             [list(references)]).score / 100.0


def inference_bleu(translations: Sequence[str], references: Sequence[str],
                   lang: str = 'de') -> float:
  """MLPerf Inference v0.5's BLEU of detokenised translations against raw
  reference texts: both Moses-tokenized, then `tokenized_bleu`."""
  return tokenized_bleu(moses_tokenized(translations, lang),
                        moses_tokenized(references, lang))
