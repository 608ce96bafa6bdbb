"""create_pretraining_data on real text: format, masking, determinism, bad input."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from tools import create_pretraining_data as cpd

FEATURES = {
    'input_ids': tf.io.FixedLenFeature([64], tf.int64),
    'input_mask': tf.io.FixedLenFeature([64], tf.int64),
    'segment_ids': tf.io.FixedLenFeature([64], tf.int64),
    'masked_lm_positions': tf.io.FixedLenFeature([10], tf.int64),
    'masked_lm_ids': tf.io.FixedLenFeature([10], tf.int64),
    'masked_lm_weights': tf.io.FixedLenFeature([10], tf.float32),
    'next_sentence_labels': tf.io.FixedLenFeature([1], tf.int64),
}


def read_all(files):
  ds = tf.data.TFRecordDataset(files).map(
      lambda r: tf.io.parse_single_example(r, FEATURES))
  return [{k: v.numpy() for k, v in ex.items()} for ex in ds]


def test_instances_have_the_mlperf_layout(bert_data):
  folder, counts = bert_data
  vocab = cpd.load_vocab(os.path.join(folder, 'vocab.txt'))
  cls, sep = vocab.index('[CLS]'), vocab.index('[SEP]')
  examples = read_all(tf.io.gfile.glob(os.path.join(folder, 'train-*')))
  assert len(examples) == counts['train']['instances'] > 5000
  for ex in examples[:500]:
    n = int(ex['input_mask'].sum())
    ids = ex['input_ids'][:n]
    assert ids[0] == cls and ids[-1] == sep and (ids == sep).sum() == 2
    first_sep = int(np.argmax(ids == sep))
    assert (ex['segment_ids'][:first_sep + 1] == 0).all()
    assert (ex['segment_ids'][first_sep + 1:n] == 1).all()
    assert not ex['input_ids'][n:].any()
    k = int(ex['masked_lm_weights'].sum())
    assert k == min(10, max(1, int(round(n * 0.15))))
    positions = ex['masked_lm_positions'][:k]
    assert (np.diff(positions) > 0).all() and (positions < n).all()
    assert not set(positions) & {0, first_sep, n - 1}


def test_masking_follows_the_80_10_10_rule_and_nsp_is_balanced(bert_data):
  folder, _ = bert_data
  mask = cpd.load_vocab(os.path.join(folder, 'vocab.txt')).index('[MASK]')
  kinds = collections.Counter()
  nsp = []
  for ex in read_all(tf.io.gfile.glob(os.path.join(folder, 'train-*'))):
    k = int(ex['masked_lm_weights'].sum())
    shown = ex['input_ids'][ex['masked_lm_positions'][:k]]
    truth = ex['masked_lm_ids'][:k]
    kinds['mask'] += int((shown == mask).sum())
    kinds['kept'] += int(((shown == truth) & (shown != mask)).sum())
    kinds['random'] += int(((shown != truth) & (shown != mask)).sum())
    nsp.append(int(ex['next_sentence_labels'][0]))
  total = sum(kinds.values())
  assert total > 30000
  assert abs(kinds['mask'] / total - 0.8) < 0.01
  # A random token equals the original now and then, so "kept" is a bit high.
  assert abs(kinds['kept'] / total - 0.1) < 0.01
  assert abs(kinds['random'] / total - 0.1) < 0.01
  assert 0.45 < np.mean(nsp) < 0.6


def small_corpus(tmp_path, text: bytes):
  path = tmp_path / 'corpus.txt'
  path.write_bytes(text)
  return str(path)


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(
    bert_data, tmp_path):
  folder, _ = bert_data
  vocab = os.path.join(folder, 'vocab.txt')
  corpus = os.path.join(folder, 'eval_corpus.txt')
  outputs = {}
  for name, seed in (('a', 1), ('b', 1), ('c', 2)):
    out = str(tmp_path / name)
    cpd.create(input_files=[corpus], vocab_file=vocab, output_files=[out],
               max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2,
               random_seed=seed)
    outputs[name] = open(out, 'rb').read()
  assert outputs['a'] == outputs['b']
  assert outputs['a'] != outputs['c']


def test_vocabulary_without_special_tokens_is_refused(tmp_path):
  vocab = tmp_path / 'vocab.txt'
  vocab.write_text('[PAD]\n[UNK]\n[CLS]\nthe\n')
  with pytest.raises(ValueError, match=r"lacks \['\[SEP\]', '\[MASK\]'\]"):
    cpd.load_vocab(str(vocab))


def test_empty_documents_long_lines_and_bad_bytes_are_handled(bert_data,
                                                              tmp_path):
  folder, _ = bert_data
  text = (b'The first document has a sentence.\nAnd another one here.\n\n\n\n'
          b'\n' + b'A very long line that goes on and on. ' * 200 + b'\n'
          b'Bytes \xff\xfe that are not UTF-8 stay in.\n\n'
          b'Third document, one sentence.\nSecond sentence of it.\n')
  out = str(tmp_path / 'out')
  counts = cpd.create(input_files=[small_corpus(tmp_path, text)],
                      vocab_file=os.path.join(folder, 'vocab.txt'),
                      output_files=[out], max_seq_length=64,
                      max_predictions_per_seq=10, dupe_factor=3)
  assert counts['documents'] == 3  # The blank lines made no empty documents.
  examples = read_all([out])
  assert len(examples) == counts['instances'] > 0
  assert all(ex['input_mask'].sum() <= 64 for ex in examples)


def test_text_with_no_sentences_is_a_clear_error(bert_data, tmp_path):
  folder, _ = bert_data
  with pytest.raises(ValueError, match='No text in'):
    cpd.create(input_files=[small_corpus(tmp_path, b'\n\n  \n')],
               vocab_file=os.path.join(folder, 'vocab.txt'),
               output_files=[str(tmp_path / 'out')])
