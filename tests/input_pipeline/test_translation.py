"""Translation data: invertible subwords, packing and exact eval coverage, on
the quickstart's real pairs."""

import os

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import packing
from input_pipeline import subwords
from input_pipeline.translation import TranslationInput
from tools.formats import gettext_pairs


@pytest.fixture(scope='module')
def pairs():
  return gettext_pairs.catalog_pairs()


@pytest.fixture(scope='module')
def vocab(translation_data):
  return subwords.SubwordVocab.load(
      os.path.join(translation_data[0], 'vocab.txt'))


def test_subwords_give_back_every_real_text_exactly(pairs, vocab):
  texts = [t for pair in pairs for t in pair]
  ids = vocab.encode_batch(texts)
  assert [vocab.decode(i) for i in ids] == texts
  assert not any((i == subwords.UNK_ID).any() for i in ids)
  # Pieces, not characters: the vocabulary was learnt from these texts
  # (0.51 pieces a character with the tests' 2,022 pieces, 0.36 with the
  # quickstart's 5,416).
  assert np.mean([len(i) for i in ids]) < 0.6 * np.mean(
      [len(t) for t in texts])


def test_subwords_escape_what_the_vocabulary_never_saw(vocab):
  text = '  Größe: 3½ m²\t日本 ## \\x ▁ «end»  '
  ids = vocab.encode(text)
  assert vocab.decode(ids) == text
  assert subwords.UNK_ID not in ids and subwords.EOS_ID not in ids
  # Decoding stops at EOS and skips padding.
  assert vocab.decode([*ids, subwords.EOS_ID, *ids]) == text
  assert vocab.decode([0, *ids, 0, 0]) == text


def test_vocabulary_without_the_reserved_ids_is_named(tmp_path, vocab):
  path = tmp_path / 'vocab.txt'
  pieces = list(vocab.pieces)
  pieces[1] = '</s>'
  path.write_text('\n'.join(pieces) + '\n')
  with pytest.raises(subwords.BadVocabulary,
                     match=r"vocab.txt: line 2 \(id 1\) is '</s>'"):
    subwords.SubwordVocab.load(str(path))
  path.write_bytes(b'<pad>\n<EOS>\n[UNK]\n\xff\n')
  with pytest.raises(subwords.BadVocabulary, match='not UTF-8'):
    subwords.SubwordVocab.load(str(path))


def test_packing_real_pairs_keeps_every_pair_once_in_order(pairs, vocab):
  chosen = pairs[::7][:800]
  encoded = [tuple(np.r_[vocab.encode(t), 1] for t in pair) for pair in chosen]
  encoded = [p for p in encoded if len(p[0]) <= 32 and len(p[1]) <= 32]
  rows = list(packing.pack(encoded, 64))
  assert len(rows) < len(encoded) / 3  # Several pairs a row.
  unpacked = []
  for row in rows:
    assert all(v.shape == (64,) for v in row.values())
    seg_in, seg_out = row['inputs_segmentation'], row['targets_segmentation']
    count = seg_in.max()
    assert seg_out.max() == count
    for side, seg in (('inputs', seg_in), ('targets', seg_out)):
      real = seg > 0
      # Segments 1..count in order, then padding (segment 0, id 0).
      assert (np.diff(seg[real]) >= 0).all() and real[:real.sum()].all()
      assert (row[side][~real] == 0).all()
      for k in range(1, count + 1):
        # Positions restart at 0 in each segment.
        assert row[f'{side}_position'][seg == k].tolist() == list(
            range((seg == k).sum()))
    for k in range(1, count + 1):
      unpacked.append((row['inputs'][seg_in == k].tolist(),
                       row['targets'][seg_out == k].tolist()))
  assert unpacked == [(s.tolist(), t.tolist()) for s, t in encoded]


def test_eval_covers_every_pair_once_over_three_pipelines(translation_data):
  data_dir, metadata = translation_data
  data = TranslationInput(data_dir=data_dir, deterministic=True)
  data.check()
  total = data.num_eval_examples()
  assert total == metadata['eval_pairs'] > 200
  steps = data.eval_steps(num_pipelines=3, global_batch_size=96)
  seen = []
  for i in range(3):
    ctx = tf.distribute.InputContext(num_input_pipelines=3,
                                     input_pipeline_id=i,
                                     num_replicas_in_sync=3)
    batches = list(data.eval_dataset(ctx, global_batch_size=96, steps=steps))
    assert len(batches) == steps
    for b in batches:
      assert b['inputs'].shape == (32, metadata['eval_length'])
      real = b['mask'].numpy() == 1
      assert (b['index'].numpy()[~real] == -1).all()
      assert (b['inputs'].numpy()[~real] == 0).all()
      seen += b['index'].numpy()[real].tolist()
  assert sorted(seen) == list(range(total))
  references = data.references()
  assert len(references) == total
  assert references == [
      line for line in open(os.path.join(data_dir, 'eval_references.txt'),
                            encoding='utf-8').read().split('\n')[:total]]


def test_training_rows_are_packed_per_replica_batches(translation_data):
  data_dir, metadata = translation_data
  data = TranslationInput(data_dir=data_dir, deterministic=True)
  ctx = tf.distribute.InputContext(num_input_pipelines=2,
                                   input_pipeline_id=1,
                                   num_replicas_in_sync=2)
  batch = next(iter(data.train_dataset(ctx, global_batch_size=16)))
  assert set(batch) == set(packing.FEATURES)
  assert batch['targets'].shape == (8, metadata['packed_length'])
  assert data.num_train_examples == metadata['train_rows']
  # Resuming at step 3 reads what the fourth batch of a fresh start holds.
  fresh = list(data.train_dataset(ctx, global_batch_size=16).take(4))[3]
  resumed = next(iter(data.train_dataset(ctx, global_batch_size=16,
                                         start_step=3)))
  np.testing.assert_array_equal(fresh['inputs'], resumed['inputs'])
