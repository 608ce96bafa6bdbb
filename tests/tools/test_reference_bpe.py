"""The MLPerf GNMT reference's data steps (tools/formats/reference_bpe.py)
and the BPE vocabulary (input_pipeline/bpe.py), on real catalog pairs."""

import io
import json
import os

import numpy as np
import pytest

from input_pipeline import bpe
from input_pipeline import subwords
from input_pipeline.length_buckets import LengthBucketInput
from tools import build_translation_data
from tools.formats import gettext_pairs
from tools.formats import reference_bpe


@pytest.fixture(scope='module')
def pairs():
  """2,000 catalog pairs (real English and German), and 100 more held out."""
  catalog = gettext_pairs.catalog_pairs()
  return catalog[:2000], catalog[2000:2100]


def test_clean_corpus_is_clean_corpus_n_perl_1_80_ratio_9():
  long = ' '.join(['w'] * 81)
  kept, dropped = reference_bpe.clean_corpus([
      ('a  b |c ', ' x y'),            # kept as 'a b c' / 'x y'
      ('', 'x'),                       # an empty side
      (long, 'x ' * 10),               # 81 tokens
      ('a', ' '.join(['y'] * 10)),     # ratio 10 > 9
      ('a', ' '.join(['y'] * 9)),      # ratio 9: kept
      ('a ' + 'b' * 1001, 'x'),        # a token over 1,000 characters
  ])
  assert kept == [('a b c', 'x y'), ('a', ' '.join(['y'] * 9))]
  assert dropped == 4


def test_latin1_filter_is_filter_dataset_py():
  kept, dropped = reference_bpe.latin1_only(
      [('Grüße', 'café'), ('„Zitat“', 'quote'), ('ok', 'ok ☺')])
  assert kept == [('Grüße', 'café')] and dropped == 2


def test_steps_are_subword_nmts_and_decoding_restores_the_text(pairs):
  train, evaluation = pairs
  prepared = reference_bpe.prepare(train, evaluation, merges=500)
  # The codes: subword-nmt's learn_bpe over German then English tokens.
  assert prepared.codes.startswith('#version: 0.2\n')
  assert len(prepared.codes.splitlines()) == 501
  from subword_nmt import apply_bpe, get_vocab
  model = apply_bpe.BPE(io.StringIO(prepared.codes))
  tokenized = reference_bpe.clean_corpus(list(zip(
      reference_bpe.tokenized_bleu.moses_tokenized([s for s, _ in train],
                                                   'en'),
      reference_bpe.tokenized_bleu.moses_tokenized([t for _, t in train],
                                                   'de'))))[0]
  tokenized = reference_bpe.latin1_only(tokenized)[0]
  assert prepared.train == [(model.segment(s), model.segment(t))
                            for s, t in tokenized]
  assert any('@@' in t for _, t in prepared.train)  # Words were cut.
  # The vocabulary: get_vocab's order behind the reserved ids.
  out = io.StringIO()
  get_vocab.get_vocab(io.StringIO(''.join(
      f'{s}\n' for s in [s for s, _ in prepared.train] +
      [t for _, t in prepared.train])), out)
  want = [line.split(' ')[0] for line in out.getvalue().splitlines()]
  assert prepared.vocab.pieces == [*subwords.RESERVED, *want]
  # Decoding: tokens -> "@@ " joins removed -> Moses detokenization, which
  # gives back the raw German (escapes restored) of every sentence the
  # vocabulary can spell: those in latin-1 (the cleaning left the others
  # out of training, so their other characters are [UNK]).
  vocab = prepared.vocab
  from sacremoses import MosesDetokenizer
  detok = MosesDetokenizer(lang='de')
  latin1 = 0
  for (_, raw), (_, segmented) in zip(evaluation, prepared.eval):
    ids = np.concatenate([vocab.encode(segmented), [subwords.EOS_ID, 0, 5]])
    text = vocab.decode(ids)
    known = ' '.join(vocab.pieces[i] for i in vocab.encode(segmented))
    assert text == detok.detokenize(known.replace('@@ ', '').split(),
                                    unescape=True)
    if reference_bpe.latin1_only([(raw, raw)])[0]:
      latin1 += 1
      assert text == raw
    else:
      assert subwords.UNK in text
  assert latin1 >= 80  # Of 100: most of the held-out text took part.


def test_unknown_tokens_and_a_vocabulary_without_the_reserved_ids():
  vocab = bpe.BpeVocab.from_reference(['<unk>', '<s>', '</s>', 'Haus',
                                       'Ha@@', 'us'])
  assert vocab.pieces[3:] == ['Haus', 'Ha@@', 'us']
  assert vocab.encode('Ha@@ us Hund').tolist() == [4, 5, subwords.UNK_ID]
  assert vocab.decode([4, 5, 3, 1, 3]) == 'Haus Haus'
  with pytest.raises(bpe.BadBpeVocabulary, match='first three tokens'):
    bpe.BpeVocab(['Haus', 'Hund', 'Katze'])


def test_build_writes_the_reference_data_and_the_pipeline_reads_it(
    pairs, tmp_path):
  train, evaluation = pairs
  out = str(tmp_path / 'bpe')
  metadata = build_translation_data.build(
      output_dir=out, train_pairs=train, eval_pairs=evaluation,
      max_length=48, train_shards=2, layout='pairs', vocab_format='bpe',
      bpe_merges=500)
  assert metadata['vocab_format'] == 'bpe'
  assert metadata['train_pairs'] + metadata['train_pairs_too_long'] + \
      metadata['train_pairs_cleaned_out'] == len(train)
  assert os.path.exists(os.path.join(out, 'bpe_codes.txt'))
  data = LengthBucketInput(data_dir=out, deterministic=True)
  assert isinstance(data.vocab, bpe.BpeVocab)
  assert len(data.vocab) == metadata['vocab_size']
  data.check()
  # BLEU's references stay the raw text; the eval records hold the BPE ids
  # of the tokenized sources.
  assert data.references() == [t for _, t in evaluation]
  with open(os.path.join(out, 'metadata.json')) as f:
    assert json.load(f)['target_lang'] == 'de'


def test_bad_codes_or_vocabulary_file_is_named(pairs, tmp_path):
  train, evaluation = pairs
  vocab_file = tmp_path / 'vocab.bpe'
  vocab_file.write_bytes(b'Haus\n\xff\n')
  with pytest.raises(ValueError, match=r'vocab.bpe, line 2: byte 0'):
    build_translation_data.build(
        output_dir=str(tmp_path / 'out'), train_pairs=train[:50],
        eval_pairs=evaluation[:5], vocab_file=str(vocab_file),
        vocab_format='bpe', bpe_merges=50)
  assert not os.path.exists(tmp_path / 'out')  # Nothing written.
