"""BERT: sizes, the TF1 checkpoint map, precision."""

import numpy as np
import pytest
import tensorflow as tf

from models.bert import model as bert_lib
from models.bert import checkpoint as bert_checkpoint


def test_base_parameter_count_matches_the_published_pretraining_model():
  model = bert_lib.Bert(size='base')
  assert sum(int(np.prod(v.shape)) for v in model.params.values()) == 110106428


def test_large_has_the_mlperf_shape():
  model = bert_lib.Bert(size='large')
  assert model.num_layers == 24 and model.hidden_size == 1024
  assert model.num_heads == 16 and model.intermediate_size == 4096
  assert model.params['bert/embeddings/word_embeddings'].shape == (30522, 1024)
  assert model.params['bert/embeddings/position_embeddings'].shape == (512,
                                                                       1024)


def write_tf1_checkpoint(path, values: dict, extra: dict):
  """A name-based TF1 checkpoint, written by tf.compat.v1.train.Saver."""
  graph = tf.Graph()
  with graph.as_default():
    variables = [tf.compat.v1.get_variable(
        name, initializer=tf.constant(value)) for name, value in
                 {**values, **extra}.items()]
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, path)


def tiny(**kwargs):
  return bert_lib.Bert(size='tiny', vocab_size=50, max_position_embeddings=16,
                       **kwargs)


def test_tf1_checkpoint_round_trip_reproduces_the_values(tmp_path):
  rng = np.random.default_rng(0)
  reference = tiny(seed=1)
  values = {name: rng.standard_normal(v.shape).astype(np.float32)
            for name, v in reference.params.items()}
  extra = {'bert/encoder/layer_0/attention/self/query/kernel/adam_m':
               np.zeros((128, 128), np.float32),
           'global_step': np.int64(28252)}
  path = write_tf1_checkpoint(str(tmp_path / 'model.ckpt-28252'), values,
                              extra)
  model = tiny(seed=2)
  assert bert_checkpoint.load_tf1_checkpoint(model, path) == len(values)
  for name, var in model.params.items():
    np.testing.assert_array_equal(var.numpy(), values[name], err_msg=name)
  # The loaded model computes with the loaded weights: same outputs as a model
  # holding those values from the start.
  batch = {'input_ids': tf.constant([[2, 7, 9, 3, 0]]),
           'input_mask': tf.constant([[1, 1, 1, 1, 0]]),
           'segment_ids': tf.constant([[0, 0, 1, 1, 0]]),
           'masked_lm_positions': tf.constant([[1, 2]])}
  for name, var in reference.params.items():
    var.assign(values[name])
  for a, b in zip(model(batch, training=False), reference(batch,
                                                          training=False)):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_checkpoint_with_other_shapes_names_the_variable_and_both_shapes(
    tmp_path):
  other = bert_lib.Bert(size='tiny', vocab_size=60, max_position_embeddings=16)
  path = write_tf1_checkpoint(
      str(tmp_path / 'ckpt'), {n: v.numpy() for n, v in other.params.items()},
      {})
  model = tiny()
  before = model.params['bert/pooler/dense/kernel'].numpy()
  with pytest.raises(ValueError, match=r'bert/embeddings/word_embeddings: '
                     r'shape \(60, 128\) in checkpoint .* but \(50, 128\)'):
    bert_checkpoint.load_tf1_checkpoint(model, path)
  # Nothing was assigned: the checks run first.
  np.testing.assert_array_equal(model.params['bert/pooler/dense/kernel'],
                                before)


def test_checkpoint_of_another_layout_names_missing_variables(tmp_path):
  path = write_tf1_checkpoint(str(tmp_path / 'ckpt'),
                              {'resnet/fc/kernel': np.zeros((2, 2),
                                                            np.float32)}, {})
  with pytest.raises(ValueError, match='lacks .* variables'):
    bert_checkpoint.load_tf1_checkpoint(tiny(), path)


def test_bfloat16_tracks_float32():
  batch = {'input_ids': tf.constant([[2, 7, 9, 3, 11, 12, 3, 0]] * 2),
           'input_mask': tf.constant([[1] * 7 + [0]] * 2),
           'segment_ids': tf.constant([[0, 0, 0, 0, 1, 1, 1, 0]] * 2),
           'masked_lm_positions': tf.constant([[1, 4]] * 2)}
  f32 = tiny(seed=3)
  bf16 = tiny(seed=3, compute_dtype='bfloat16')
  a, _ = f32(batch, training=False)
  b, _ = bf16(batch, training=False)
  assert b.dtype == tf.float32
  assert float(tf.norm(a - b) / tf.norm(a)) < 0.02


def test_weight_decay_exclusion_is_the_references():
  assert bert_lib.exclude_from_weight_decay(
      'bert/encoder/layer_0/output/LayerNorm/gamma:0')
  assert bert_lib.exclude_from_weight_decay('cls/predictions/output_bias:0')
  assert not bert_lib.exclude_from_weight_decay(
      'bert/encoder/layer_0/output/dense/kernel:0')


def test_masked_lm_head_runs_in_float32_on_a_bfloat16_model():
  # Google's run_pretraining.py: get_masked_lm_output(bert_config,
  # tf.cast(model.get_sequence_output(), tf.float32), ...): the whole head in
  # float32 on the bfloat16 encoder's output.
  batch = {'input_ids': tf.constant([[2, 7, 9, 3, 11, 12, 3, 0]] * 2),
           'input_mask': tf.constant([[1] * 7 + [0]] * 2),
           'segment_ids': tf.constant([[0, 0, 0, 0, 1, 1, 1, 0]] * 2),
           'masked_lm_positions': tf.constant([[1, 4]] * 2)}
  model = tiny(seed=3, compute_dtype='bfloat16')
  mlm, _ = model(batch, training=False)
  sequence, _ = model.encode(batch['input_ids'], batch['input_mask'],
                             batch['segment_ids'], training=False)
  w = model.params
  x = tf.cast(tf.gather(sequence, batch['masked_lm_positions'],
                        batch_dims=1), tf.float32)
  x = bert_lib.gelu(tf.einsum('bph,hk->bpk', x,
                              w['cls/predictions/transform/dense/kernel']) +
                    w['cls/predictions/transform/dense/bias'])
  x = bert_lib.layer_norm(x, w['cls/predictions/transform/LayerNorm/gamma'],
                          w['cls/predictions/transform/LayerNorm/beta'])
  logits = tf.einsum('bph,vh->bpv', x, w['bert/embeddings/word_embeddings'])
  logits += w['cls/predictions/output_bias']
  np.testing.assert_allclose(mlm, logits, rtol=1e-5, atol=1e-5)
  # The bfloat16 head (an option) rounds the logits: visibly different.
  rounded, _ = tiny(seed=3, compute_dtype='bfloat16',
                    float32_heads=False)(batch, training=False)
  assert float(tf.reduce_max(tf.abs(rounded - logits))) > 1e-3
