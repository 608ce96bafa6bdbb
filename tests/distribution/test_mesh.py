"""Tensor model parallelism on a (batch 2, model 2) mesh of 4 logical CPUs:
BERT's forward, loss and gradients equal the 1-device model's; checkpoints
move between a mesh and one device; bad meshes and rules are named."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

from distribution import mesh as mesh_lib
from models import bert as bert_lib
from models.bert import Bert
from tests import helpers


def tiny_bert():
  return Bert(size='tiny', vocab_size=60, max_position_embeddings=16,
              dropout_rate=0.0)


def batch(size=4):
  rng = np.random.default_rng(0)
  return {'input_ids': rng.integers(0, 60, (size, 16)).astype(np.int32),
          'input_mask': (np.arange(16) < 12).astype(np.int32)[None].repeat(
              size, 0),
          'segment_ids': (np.arange(16) >= 8).astype(np.int32)[None].repeat(
              size, 0),
          'masked_lm_positions': rng.integers(0, 12, (size, 3)).astype(
              np.int32)}


@pytest.fixture(scope='module')
def partitioner():
  return mesh_lib.MeshConfig(shape=(2, 2), rules=bert_lib.sharding_rules()).make()


def on_mesh(partitioner, value):
  rank = len(value.shape)
  return dtensor.relayout(
      dtensor.copy_to_mesh(tf.constant(value), dtensor.Layout.replicated(
          partitioner.mesh, rank)),
      dtensor.Layout.batch_sharded(partitioner.mesh, 'batch', rank))


def full_values(partitioner, model) -> dict:
  """The model's variables as whole host tensors."""
  with dtensor.default_mesh(partitioner.mesh):
    return partitioner.to_host({k: v.read_value()
                                for k, v in model.params.items()})


def loss_and_grads(model, inputs):
  with tf.GradientTape() as tape:
    mlm, nsp = model(inputs, training=True)
    loss = tf.reduce_mean(tf.square(mlm)) + tf.reduce_mean(nsp)
  grads = tape.gradient(loss, model.trainable_variables)
  return mlm, loss, [tf.convert_to_tensor(g) for g in grads]


def test_bert_on_a_2x2_mesh_equals_one_device(partitioner):
  dense = tiny_bert()
  with partitioner.scope():
    split = tiny_bert()
  partitioner.check_rules_used()
  # Heads and the feed-forward inner dimension are split over `model`.
  layout = partitioner.layouts['bert/encoder/layer_0/attention/self/query/kernel']
  assert layout.sharding_specs == [dtensor.UNSHARDED, 'model']
  assert partitioner.layouts[
      'bert/encoder/layer_1/output/dense/kernel'].sharding_specs == [
          'model', dtensor.UNSHARDED]
  inputs = batch()
  mlm, loss, grads = tf.function(loss_and_grads)(dense, inputs)
  with dtensor.default_mesh(partitioner.mesh):
    out = tf.function(loss_and_grads)(
        split, {k: on_mesh(partitioner, v) for k, v in inputs.items()})
    split_mlm, split_loss, split_grads = partitioner.to_host(out)
  # Sums over split dimensions run in another order: float32 round-off.
  np.testing.assert_allclose(split_mlm, mlm, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(split_loss, loss, rtol=1e-6)
  for var, g, split_g in zip(dense.trainable_variables, grads, split_grads):
    scale = np.abs(g.numpy()).max()
    if scale < 1e-6:  # The key bias's gradient is zero (softmax shift).
      continue
    np.testing.assert_allclose(split_g, g, rtol=1e-4, atol=1e-5 * scale,
                               err_msg=var.name)


def test_checkpoints_move_between_a_mesh_and_one_device(partitioner,
                                                         tmp_path):
  with partitioner.scope():
    split = tiny_bert()
  for k, var in split.params.items():  # Distinct values to compare.
    var.assign(var + 0.5)
  path = tf.train.Checkpoint(model=split).save(str(tmp_path / 'mesh'))
  dense = tiny_bert()
  tf.train.Checkpoint(model=dense).restore(path).assert_existing_objects_matched()
  full = full_values(partitioner, split)
  for k, var in dense.params.items():
    np.testing.assert_array_equal(var.numpy(), full[k], err_msg=k)
  # And back: a 1-device checkpoint restores into the split variables.
  for var in dense.params.values():
    var.assign(var * 2.0)
  path = tf.train.Checkpoint(model=dense).save(str(tmp_path / 'one'))
  with partitioner.scope():
    again = tiny_bert()
  tf.train.Checkpoint(model=again).restore(path).assert_existing_objects_matched()
  full = full_values(partitioner, again)
  for k, var in dense.params.items():
    np.testing.assert_array_equal(full[k], var.numpy(), err_msg=k)


def test_bad_meshes_and_rules_are_named():
  with pytest.raises(ValueError, match=r'MESH_SHAPE \(3, 2\) needs 6 devices; '
                     r'this process has 4'):
    mesh_lib.MeshConfig(shape=(3, 2)).make()
  with pytest.raises(ValueError, match=r'names mesh axes \[\'heads\'\]'):
    mesh_lib.MeshConfig(shape=(2, 2),
                        rules=(('query', (None, 'heads')),)).make()
  unused = mesh_lib.MeshConfig(shape=(2, 2), rules=(
      *bert_lib.sharding_rules(), ('decoder/.*kernel$', (None, 'model')))).make()
  with unused.scope():
    tiny_bert()
  with pytest.raises(ValueError, match=r"\['decoder/\.\*kernel\$'\] match no "
                     'variable'):
    unused.check_rules_used()
  twice = mesh_lib.MeshConfig(shape=(2, 2), rules=(
      ('query/kernel$', (None, 'model')),
      ('attention/self/.*/kernel$', (None, 'model')))).make()
  with pytest.raises(ValueError, match=r'attention/self/query/kernel matches '
                     r"two sharding rules, 'query/kernel\$' and"):
    with twice.scope():
      tiny_bert()
  rank = mesh_lib.MeshConfig(shape=(2, 2), rules=(
      ('query/bias$', (None, 'model')),)).make()
  with pytest.raises(ValueError, match=r'gives 2 dimensions to variable '
                     r'bert/encoder/layer_0/attention/self/query/bias, which '
                     r'has 1'):
    with rank.scope():
      tiny_bert()


@pytest.mark.slow
def test_bert_quickstart_on_a_2x2_mesh_reaches_target(sums_data, tmp_path):
  model_dir = str(tmp_path / 'run')
  result = helpers.run_gin(
      ['gin/bert_quickstart.gin'],
      helpers.sums_bindings(sums_data, model_dir, MESH_SHAPE=(2, 2),
                            DETERMINISTIC=True))
  assert result.status == 'success', result.evals
  assert result.evals[-1][3]['examples'] == 100  # Every eval example once.
  checked = helpers.run_checker(os.path.join(model_dir, 'mlperf.log'),
                                '0.7.0', str(tmp_path))
  assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_mesh_without_deterministic_input_is_refused(sums_data, tmp_path):
  with pytest.raises(ValueError, match='MESH_SHAPE needs DETERMINISTIC'):
    helpers.run_gin(['gin/bert_quickstart.gin'], helpers.sums_bindings(
        sums_data, str(tmp_path / 'run'), MESH_SHAPE=(2, 2)))
