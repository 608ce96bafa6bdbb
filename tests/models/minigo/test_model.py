"""models/minigo/model.py: the dual network against a NumPy version of
dual_net.py's sequence, in inference and in training."""

import numpy as np
import pytest
import tensorflow as tf

from models.minigo import model as minigo


def _conv(x, kernel):
  """NHWC 'SAME' convolution, stride 1."""
  k = kernel.shape[0]
  pad = k // 2
  xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
  h, w = x.shape[1:3]
  out = np.zeros(x.shape[:3] + (kernel.shape[-1],))
  for i in range(k):
    for j in range(k):
      out += np.einsum('bhwc,cd->bhwd', xp[:, i:i + h, j:j + w], kernel[i, j])
  return out


def _reference(net, x, training):
  """dual_net.py's model_inference_fn in NumPy, on net's variables."""
  p = {k.split('minigo/')[1]: v.numpy() for k, v in net.params.items()}
  s = {k.split('minigo/')[1]: v.numpy() for k, v in net.state.items()}

  def bn(y, name):
    if training:
      mean, var = y.mean((0, 1, 2)), y.var((0, 1, 2))
    else:
      mean, var = s[f'{name}/bn/moving_mean'], s[f'{name}/bn/moving_variance']
    gamma = p.get(f'{name}/bn/gamma', 1.0)
    beta = p.get(f'{name}/bn/beta', 0.0)
    return (y - mean) / np.sqrt(var + 1e-5) * gamma + beta

  relu = lambda y: np.maximum(y, 0)
  x = relu(bn(_conv(x.astype(np.float64), p['init/kernel']), 'init'))
  for i in range(net.trunk_layers):
    y = relu(bn(_conv(x, p[f'block{i}/conv1/kernel']), f'block{i}/conv1'))
    y = bn(_conv(y, p[f'block{i}/conv2/kernel']), f'block{i}/conv2')
    x = relu(x + y)
  b = x.shape[0]
  policy = relu(bn(_conv(x, p['policy/conv/kernel']), 'policy/conv'))
  logits = policy.reshape(b, -1) @ p['policy/logits/kernel'] + p[
      'policy/logits/bias']
  value = relu(bn(_conv(x, p['value/conv/kernel']), 'value/conv'))
  hidden = relu(value.reshape(b, -1) @ p['value/hidden/kernel']
                + p['value/hidden/bias'])
  value = np.tanh(hidden @ p['value/output/kernel'] + p['value/output/bias'])
  return logits, value[:, 0]


def _trained_looking(net, rng):
  """Statistics, scales and biases away from their initial values, so
  each one counts."""
  for table in (net.params, net.state):
    for name, v in table.items():
      if not name.endswith('/kernel'):
        base = 1.0 if name.endswith(('gamma', 'variance')) else 0.0
        v.assign(base + rng.uniform(0.1, 0.5, v.shape).astype(np.float32))


@pytest.mark.parametrize('training', [False, True])
def test_the_network_is_dual_nets_sequence(training):
  net = minigo.DualNet(board_size=5, conv_width=8, fc_width=6,
                       trunk_layers=2, seed=3)
  rng = np.random.default_rng(0)
  _trained_looking(net, rng)
  x = rng.integers(0, 2, (4, 5, 5, 13)).astype(np.uint8)
  logits, value, updates = net(tf.constant(x), training=training)
  want_logits, want_value = _reference(net, x, training)
  assert logits.shape == (4, 26) and value.shape == (4,)
  np.testing.assert_allclose(logits.numpy(), want_logits, rtol=1e-4,
                             atol=1e-4)
  np.testing.assert_allclose(value.numpy(), want_value, rtol=1e-4, atol=1e-5)
  # Training updates every batch norm's statistics (momentum 0.95), the
  # heads' included; inference none.
  assert len(updates) == (len(net.state) if training else 0)
  if training:
    name = 'minigo/policy/conv/bn/moving_mean'
    old = net.state[name].numpy()
    assert not np.allclose(updates[name].numpy(), old)


def test_l2_covers_kernels_and_gammas_not_biases_or_betas():
  net = minigo.DualNet(board_size=5, conv_width=4, fc_width=4,
                       trunk_layers=1)
  names = {v.name.split(':')[0] for v in net.l2_variables()}
  assert 'minigo/init/bn/gamma' in names and 'minigo/init/kernel' in names
  assert not any(n.endswith(('/bias', '/beta')) for n in names)
  assert 'minigo/policy/conv/bn/gamma' not in net.params  # Unscaled heads.
  assert len(names) == len(net.params) - sum(
      n.endswith(('/bias', '/beta')) for n in net.params)
  with pytest.raises(ValueError, match='sizes must be >= 1'):
    minigo.DualNet(conv_width=0)


def test_numpy_network_for_host_processes_matches():
  """models/minigo/numpy_model.py (batch norm folded, host processes) gives
  DualNet's inference: the policy's softmax and the value."""
  from models.minigo import numpy_model as minigo_numpy
  net = minigo.DualNet(board_size=5, conv_width=8, fc_width=6,
                       trunk_layers=2, seed=4)
  rng = np.random.default_rng(1)
  _trained_looking(net, rng)
  x = rng.integers(0, 2, (3, 5, 5, 13)).astype(np.uint8)
  logits, value, _ = net(tf.constant(x), training=False)
  weights = {k: v.numpy() for k, v in {**net.params, **net.state}.items()}
  policy, got_value = minigo_numpy.NumpyDualNet(weights)(x)
  np.testing.assert_allclose(policy, tf.nn.softmax(logits).numpy(),
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(got_value, value.numpy(), rtol=1e-4, atol=1e-5)
