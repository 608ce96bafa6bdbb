"""Tensor model parallelism on a (batch 2, model 2) mesh of 4 logical CPUs:
BERT's forward, loss and gradients equal the 1-device model's; checkpoints
move between a mesh and one device; bad meshes and rules are named."""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

from distribution import mesh as mesh_lib
from models.bert import model as bert_lib
from models.bert.model import Bert
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


def assert_same_step(dense_out, split_out, variables):
  """(outputs, loss, gradients) of one device and of a mesh agree to
  float32 round-off (sums over split dimensions run in another order)."""
  (out, loss, grads), (split_out, split_loss, split_grads) = (dense_out,
                                                              split_out)
  np.testing.assert_allclose(split_out, out, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(split_loss, loss, rtol=1e-6)
  for var, g, split_g in zip(variables, grads, split_grads):
    scale = np.abs(g.numpy()).max()
    if scale < 1e-6:  # E.g. BERT's key bias (softmax shift): zero.
      continue
    np.testing.assert_allclose(split_g, g, rtol=1e-4, atol=1e-5 * scale,
                               err_msg=var.name)


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
  dense_out = tf.function(loss_and_grads)(dense, inputs)
  with dtensor.default_mesh(partitioner.mesh):
    out = tf.function(loss_and_grads)(
        split, {k: on_mesh(partitioner, v) for k, v in inputs.items()})
    assert_same_step(dense_out, partitioner.to_host(out),
                     dense.trainable_variables)


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


def test_tf_config_tasks_become_dtensor_clients_chief_first():
  cluster = {'chief': ['h0:1'], 'worker': ['h1:1', 'h2:1']}
  env = mesh_lib.dtensor_environment(
      {'cluster': cluster, 'task': {'type': 'worker', 'index': 1}})
  assert env == {'DTENSOR_JOBS': 'h0:1,h1:1,h2:1', 'DTENSOR_CLIENT_ID': '2',
                 'DTENSOR_NUM_CLIENTS': '3', 'DTENSOR_JOB_NAME': 'worker'}
  assert mesh_lib.dtensor_environment(
      {'cluster': cluster, 'task': {'type': 'chief', 'index': 0}})[
          'DTENSOR_CLIENT_ID'] == '0'
  with pytest.raises(ValueError, match=r"task 'worker' 2 is not in"):
    mesh_lib.dtensor_environment(
        {'cluster': cluster, 'task': {'type': 'worker', 'index': 2}})
  with pytest.raises(ValueError, match=r"task 'ps' 0 is not in"):
    mesh_lib.dtensor_environment(
        {'cluster': cluster, 'task': {'type': 'ps', 'index': 0}})


def test_options_a_mesh_cannot_honour_are_named():
  from distribution import gradients as gradients_lib
  from distribution import plan as plan_lib
  from distribution import strategy as strategies
  ok = dict(distribution=strategies.StrategyConfig(kind='multi_worker'),
            gradients=gradients_lib.GradientOptions(clip_norm=1.0),
            weight_update_sharding=False, deterministic=True,
            spatial_partitions=1)
  plan_lib.check_mesh_options(**ok)  # A mesh over processes is fine.
  plan_lib.check_mesh_options(**{**ok, 'distribution': strategies.StrategyConfig(
      kind='tpu', tpu='local')})  # So is one over a TPU slice's hosts.
  for change, message in (
      (dict(distribution=strategies.StrategyConfig(kind='mirrored')),
       "distribution kind is 'mirrored'"),
      (dict(distribution=strategies.StrategyConfig(kind='tpu', tpu='my-pod')),
       'one DTensor client on each host of the slice, each with --tpu=local'),
      (dict(distribution=strategies.StrategyConfig(
          kind='tpu', tpu='local', accelerator='v3-32'), mesh_shape=(8, 2)),
       r'MESH_SHAPE \(8, 2\) has 16 devices; the v3-32 slice the experiment '
       'is for has 32'),
      (dict(gradients=gradients_lib.GradientOptions(
          clip_norm=1.0, clip_before_allreduce=True)),
       'clip_before_allreduce clips each replica'),
      (dict(spatial_partitions=2), r'SPATIAL_PARTITIONS \(2\) splits'),
      (dict(weight_update_sharding=True), 'weight_update_sharding shards'),
      (dict(gradients=gradients_lib.GradientOptions(bytes_per_pack=1024)),
       'bytes_per_pack tune'),
  ):
    with pytest.raises(ValueError, match=message):
      plan_lib.check_mesh_options(**{**ok, **change})


@pytest.mark.slow
def test_bert_quickstart_on_a_2x2_mesh_from_the_command_line(sums_data,
                                                             tmp_path):
  # A fresh process splits its CPU into the mesh's 4 before listing devices
  # (the in-process tests above run with the CPU already split). Training
  # on a mesh is checked against one device and against data-parallel
  # workers above; here 2 steps and one eval over every example (a step on
  # the mesh takes a second).
  model_dir = str(tmp_path / 'run')
  bindings = helpers.sums_bindings(sums_data, model_dir, MESH_SHAPE=(2, 2),
                                   DETERMINISTIC=True, TRAIN_STEPS=2,
                                   STEPS_PER_LOOP=2, EVAL_EVERY_STEPS=2,
                                   FIRST_EVAL_STEP=2)
  done = subprocess.run(
      [helpers.PYTHON, 'train.py', '--gin_file=gin/bert_quickstart.gin',
       f'--model_dir={model_dir}', *(f'--gin_param={b}' for b in bindings)],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=helpers.ROOT))
  # Exit 1: the step budget ran out before the target, as intended.
  assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
  assert 'eval at step 2' in done.stdout
  assert 'were dropped' not in done.stdout + done.stderr  # Eval counts all.
  log = open(os.path.join(model_dir, 'mlperf.log')).read()
  assert '"eval_samples", "value": 100' in log
  assert '"status": "aborted"' in log


def test_a_mesh_without_deterministic_input_is_refused(sums_data, tmp_path):
  with pytest.raises(ValueError, match='MESH_SHAPE needs DETERMINISTIC'):
    helpers.run_gin(['gin/bert_quickstart.gin'], helpers.sums_bindings(
        sums_data, str(tmp_path / 'run'), MESH_SHAPE=(2, 2)))


@pytest.mark.slow
def test_a_mesh_over_two_processes_equals_two_data_parallel_workers(
    sums_data, tmp_path):
  # MESH_SHAPE (2, 2) over 2 processes: each holds one batch shard on its 2
  # devices (heads and feed-forward split between them) and reads its own
  # half of each batch, the half a data-parallel worker of 2 reads.
  runs = {}
  for name, extra in (('mesh', ['MESH_SHAPE=(2, 2)']), ('workers', [])):
    out = tmp_path / name
    out.mkdir()
    helpers.run_worker_processes(
        ['tests.bert_worker_main', sums_data, str(out / 'run'),
         'tests/bert_sgd.gin', *extra],
        out)
    runs[name] = [json.load(open(out / f'w{i}.npz.json')) for i in range(2)]
  for result in runs['mesh']:
    assert result['step'] == 4
    assert result['metrics']['examples'] == 100  # Each eval example once.
    assert result['quality'] == runs['mesh'][0]['quality']
  np.testing.assert_allclose(runs['mesh'][0]['quality'],
                             runs['workers'][0]['quality'], atol=0.02)
  mesh = helpers.checkpoint_tensors(str(tmp_path / 'mesh' / 'run'))
  workers = helpers.checkpoint_tensors(str(tmp_path / 'workers' / 'run'))
  assert sorted(mesh) == sorted(workers)
  assert any('encoder' in k for k in mesh)
  for k in workers:
    scale = np.abs(workers[k]).max()
    np.testing.assert_allclose(mesh[k], workers[k], rtol=1e-4,
                               atol=1e-5 * scale + 1e-7, err_msg=k)
  # One checkpoint, written together; no scratch folders.
  assert not (tmp_path / 'mesh' / 'run' / 'worker_scratch').exists()
  # The chief's MLPerf log (4 steps are short of the checker's 0.712).
  log = [json.loads(line.split(':::MLLOG ', 1)[1]) for line in open(
      tmp_path / 'mesh' / 'run' / 'mlperf.log') if ':::MLLOG ' in line]
  values = {e['key']: e['value'] for e in log}
  assert values['eval_accuracy'] == pytest.approx(runs['mesh'][0]['quality'])
  assert values['global_batch_size'] == 32


@pytest.mark.slow
def test_a_batch_shard_split_over_processes_is_refused(sums_data, tmp_path):
  procs = helpers.start_worker_processes(
      ['tests.bert_worker_main', sums_data, str(tmp_path / 'run'),
       'MESH_SHAPE=(1, 4)'], tmp_path)
  for proc in procs:
    out = proc.communicate(timeout=helpers.HANG_SECONDS)[0]
    assert proc.returncode != 0
    assert ('MESH_SHAPE (1, 4) over 2 processes splits each batch shard (4 '
            'devices) over processes') in out, out[-2000:]
  assert not (tmp_path / 'run' / 'checkpoints').exists()


def test_transformer_on_a_2x2_mesh_equals_one_device():
  """Google's v0.7 4-way split, here 2-way: heads and feed-forward over
  `model`; the packed forward and gradients equal one device's."""
  from input_pipeline import packing
  from models.transformer import model as transformer_lib
  split_mesh = mesh_lib.MeshConfig(
      shape=(2, 2), rules=transformer_lib.sharding_rules()).make()

  def tiny():
    return transformer_lib.Transformer(
        size='tiny', vocab_size=40, num_layers=1, model_dim=32, num_heads=4,
        ff_dim=64, dropout_rate=0.0, seed=5)

  dense = tiny()
  with split_mesh.scope():
    split = tiny()
  split_mesh.check_rules_used()
  assert split_mesh.layouts[
      'decoder/layer_0/cross_attention/attention/output/kernel'
  ].sharding_specs == ['model', dtensor.UNSHARDED]
  rng = np.random.default_rng(0)
  rows = []
  for _ in range(4):
    pairs = [(np.r_[rng.integers(3, 40, n), 1], np.r_[rng.integers(3, 40, m), 1])
             for n, m in ((3, 4), (5, 2))]
    rows.append(next(packing.pack(pairs, 12)))
  inputs = {k: np.stack([r[k] for r in rows]).astype(np.int32)
            for k in packing.FEATURES}

  def loss_and_grads(model, batch):
    with tf.GradientTape() as tape:
      logits = model(batch, training=True)
      loss = tf.reduce_mean(tf.square(logits))
    grads = tape.gradient(loss, model.trainable_variables)
    return logits, loss, [tf.convert_to_tensor(g) for g in grads]

  dense_out = tf.function(loss_and_grads)(dense, inputs)
  with dtensor.default_mesh(split_mesh.mesh):
    out = tf.function(loss_and_grads)(
        split, {k: on_mesh(split_mesh, v) for k, v in inputs.items()})
    assert_same_step(dense_out, split_mesh.to_host(out),
                     dense.trainable_variables)
