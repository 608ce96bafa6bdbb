"""MLPerf Inference v0.5's translation BLEU: ours equals their scorer's
sequence (tensorflow/nmt's RunningBLEUScorer, as r0.5's
process_accuracy.py runs it), rewritten here as the arbiter."""

import collections
import math

import numpy as np
import pytest

from models.common import tokenized_bleu


def their_bleu(references, translations, max_order=4):
  """r0.5 process_accuracy.py: each line split on ' ', add_sentence for
  each, calc_BLEU_score (no smoothing)."""
  def ngrams(segment):
    counts = collections.Counter()
    for order in range(1, max_order + 1):
      for i in range(0, len(segment) - order + 1):
        counts[tuple(segment[i:i + order])] += 1
    return counts

  matches, possible = [0] * max_order, [0] * max_order
  reference_length = translation_length = 0
  for reference, translation in zip(references, translations):
    reference, translation = reference.split(' '), translation.split(' ')
    reference_length += len(reference)
    translation_length += len(translation)
    overlap = ngrams(translation) & ngrams(reference)
    for ngram in overlap:
      matches[len(ngram) - 1] += overlap[ngram]
    for order in range(1, max_order + 1):
      possible[order - 1] += max(0, len(translation) - order + 1)
  precisions = [m / p if p > 0 else 0.0 for m, p in zip(matches, possible)]
  if min(precisions) > 0:
    geo_mean = math.exp(sum((1.0 / max_order) * math.log(p)
                            for p in precisions))
  else:
    geo_mean = 0
  ratio = translation_length / reference_length
  bp = 1.0 if ratio > 1.0 else math.exp(1 - 1.0 / ratio)
  return geo_mean * bp


REFERENCES = [
    'Die Katze sitzt auf der Matte, und der Hund schläft im Garten.',
    'Er sagte: "Das kostet 3,50 Euro & mehr", oder nicht?',
    'Am 12. Mai 2014 eröffnete die Stadt ein neues Museum für moderne Kunst.',
    "Wir haben's geschafft - endlich ist das Projekt (fast) fertig!",
    'Die Regierung plant, die Steuern im nächsten Jahr zu senken.',
    'Ich weiß nicht, ob sie morgen kommt; vielleicht am Wochenende.',
]


def perturbed(text, rng):
  """The reference with words dropped, repeated and swapped."""
  words = text.split()
  out = []
  for w in words:
    roll = rng.random()
    if roll < 0.15:
      continue
    out.append(w)
    if roll > 0.9:
      out.append(w.lower())
  if len(out) > 3 and rng.random() < 0.5:
    i = int(rng.integers(len(out) - 1))
    out[i], out[i + 1] = out[i + 1], out[i]
  return ' '.join(out) or words[0]


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_equals_their_running_bleu_scorer_on_moses_tokens(seed):
  rng = np.random.default_rng(seed)
  hypotheses = [perturbed(r, rng) for r in REFERENCES]
  tok_h = tokenized_bleu.moses_tokenized(hypotheses)
  tok_r = tokenized_bleu.moses_tokenized(REFERENCES)
  want = their_bleu(tok_r, tok_h)
  assert 0.05 < want < 0.95  # Neither extreme: every term takes part.
  got = tokenized_bleu.inference_bleu(hypotheses, REFERENCES)
  assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_short_translations_take_the_brevity_penalty_theirs_takes():
  hypotheses = [' '.join(r.split()[:5]) for r in REFERENCES]
  tok_h = tokenized_bleu.moses_tokenized(hypotheses)
  tok_r = tokenized_bleu.moses_tokenized(REFERENCES)
  want = their_bleu(tok_r, tok_h)
  assert 0 < want < 0.5
  assert tokenized_bleu.tokenized_bleu(tok_h, tok_r) == pytest.approx(
      want, rel=1e-12)


def test_cased_and_moses_escaped_as_tokenizer_perl_writes_it():
  # tokenizer.perl -l de: punctuation split off, "&" and '"' escaped, the
  # decimal comma kept inside the number.
  assert tokenized_bleu.moses_tokenized([REFERENCES[1]]) == [
      'Er sagte : &quot; Das kostet 3,50 Euro &amp; mehr &quot; , oder '
      'nicht ?']
  exact = tokenized_bleu.inference_bleu(REFERENCES, REFERENCES)
  lowered = tokenized_bleu.inference_bleu([r.lower() for r in REFERENCES],
                                          REFERENCES)
  assert exact == pytest.approx(1.0) and lowered < 0.9  # Cased.


def test_mismatched_or_empty_inputs_are_named():
  with pytest.raises(ValueError, match='2 translations for 1 references'):
    tokenized_bleu.tokenized_bleu(['a', 'b'], ['a'])
  with pytest.raises(ValueError, match='No translations'):
    tokenized_bleu.tokenized_bleu([], [])
