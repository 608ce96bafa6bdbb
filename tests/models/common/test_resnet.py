"""ResNet v1.5: sizes, FLOPs, initialisation, precision, batch-norm sync."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from models.common import layers
from models.common.resnet import ResNet


def param_count(model):
  return sum(int(np.prod(v.shape)) for v in model.params.values())


@pytest.mark.parametrize('depth,expected', [(18, 11689512), (50, 25557032)])
def test_parameter_counts_match_the_published_models(depth, expected):
  assert param_count(ResNet(depth=depth)) == expected


def test_resnet50_forward_flops_are_v1_5():
  # v1.5 (stride on the 3x3) costs 4.09 GMACs at 224x224; v1 costs 3.86.
  flops = ResNet(depth=50).forward_flops(224)
  assert 8.1e9 < flops < 8.25e9


def test_weights_are_named_by_path_for_sharding_rules():
  model = ResNet(depth=18, width_multiplier=0.25, num_classes=10)
  names = {v.name for v in model.trainable_variables}
  assert 'resnet/stage2/block0/conv1/kernel:0' in names
  assert 'resnet/stage2/block0/shortcut/bn/gamma:0' in names
  assert 'resnet/fc/bias:0' in names
  assert all(not layers.is_decay_exempt(n) for n in names
             if n.endswith('kernel:0'))
  assert all(layers.is_decay_exempt(n) for n in names
             if n.endswith(('gamma:0', 'beta:0', 'bias:0')))


def test_last_bn_gamma_of_each_block_starts_at_zero():
  model = ResNet(depth=50, width_multiplier=0.25, num_classes=10)
  last = [k for k in model.params if k.endswith('bn3/gamma')]
  assert len(last) == 16
  assert all(not model.params[k].numpy().any() for k in last)
  off = ResNet(depth=50, width_multiplier=0.25, num_classes=10,
               zero_init_last_bn_gamma=False)
  assert all(off.params[k].numpy().all() for k in last)


def test_width_multiplier_scales_channels():
  model = ResNet(depth=18, width_multiplier=0.5, num_classes=10)
  assert model.params['resnet/stem/conv/kernel'].shape == (7, 7, 3, 32)
  assert model.params['resnet/fc/kernel'].shape == (256, 10)


def test_bfloat16_compute_tracks_float32():
  x = tf.random.stateless_normal([4, 64, 64, 3], seed=[1, 2])
  f32 = ResNet(depth=18, width_multiplier=0.5, num_classes=10, seed=3)
  bf16 = ResNet(depth=18, width_multiplier=0.5, num_classes=10, seed=3,
                compute_dtype='bfloat16',
                zero_init_last_bn_gamma=False)
  f32b = ResNet(depth=18, width_multiplier=0.5, num_classes=10, seed=3,
                zero_init_last_bn_gamma=False)
  a, _ = f32b(x, training=True)
  b, _ = bf16(x, training=True)
  assert b.dtype == tf.float32
  assert all(v.dtype == tf.float32 for v in bf16.trainable_variables)
  rel = float(tf.norm(a - b) / tf.norm(a))
  assert rel < 0.05
  del f32


def test_unknown_depth_is_a_clear_error():
  with pytest.raises(ValueError, match='depth'):
    ResNet(depth=42)


def replica_logits(strategy, model, x):
  n = strategy.num_replicas_in_sync
  per = x.shape[0] // n

  def fn():
    ctx = tf.distribute.get_replica_context()
    i = ctx.replica_id_in_sync_group
    logits, updates = model(x[i * per:(i + 1) * per], training=True)
    return logits, updates['resnet/stem/bn/moving_mean']

  logits, means = strategy.run(tf.function(fn))
  return (np.concatenate([t.numpy() for t in strategy.experimental_local_results(
      logits)]), [m.numpy() for m in strategy.experimental_local_results(means)])


def test_cross_replica_batch_norm_equals_full_batch_batch_norm():
  x = tf.random.stateless_normal([8, 32, 32, 3], seed=[4, 5])
  single = ResNet(depth=18, width_multiplier=0.25, num_classes=10, seed=1,
                  zero_init_last_bn_gamma=False)
  want, _ = single(x, training=True)
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=4)
  with strategy.scope():
    synced = ResNet(depth=18, width_multiplier=0.25, num_classes=10, seed=1,
                    zero_init_last_bn_gamma=False, bn_group_size=0)
  got, means = replica_logits(strategy, synced, x)
  np.testing.assert_allclose(got, want.numpy(), rtol=1e-3, atol=1e-3)
  for m in means[1:]:
    np.testing.assert_allclose(m, means[0], rtol=1e-5, atol=1e-6)


def test_grouped_batch_norm_normalises_within_each_group():
  x = tf.random.stateless_normal([8, 32, 32, 3], seed=[6, 7])
  single = ResNet(depth=18, width_multiplier=0.25, num_classes=10, seed=1,
                  zero_init_last_bn_gamma=False)
  want = np.concatenate([single(x[:4], training=True)[0].numpy(),
                         single(x[4:], training=True)[0].numpy()])
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=4)
  with strategy.scope():
    grouped = ResNet(depth=18, width_multiplier=0.25, num_classes=10, seed=1,
                     zero_init_last_bn_gamma=False, bn_group_size=2)
  got, _ = replica_logits(strategy, grouped, x)
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
  # Per-replica statistics (group 1) differ from both.
  with strategy.scope():
    local = ResNet(depth=18, width_multiplier=0.25, num_classes=10, seed=1,
                   zero_init_last_bn_gamma=False, bn_group_size=1)
  got_local, _ = replica_logits(strategy, local, x)
  assert np.abs(got_local - want).max() > 1e-2


def test_kernels_start_with_googles_variance_scaling():
  # TF1 tf.variance_scaling_initializer() defaults: variance 1 / fan_in.
  model = ResNet(depth=50, seed=2)
  for name in ('resnet/stage4/block0/conv2/kernel',
               'resnet/stage3/block2/conv2/kernel'):
    kernel = model.params[name].numpy()
    fan_in = np.prod(kernel.shape[:3])
    assert kernel.std() == pytest.approx(np.sqrt(1 / fan_in), rel=0.02), name
  he = ResNet(depth=50, seed=2, kernel_init_scale=2.0)
  kernel = he.params['resnet/stage4/block0/conv2/kernel'].numpy()
  assert kernel.std() == pytest.approx(np.sqrt(2 / (3 * 3 * 512)), rel=0.02)
