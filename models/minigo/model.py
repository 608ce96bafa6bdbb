"""MiniGo's dual network, as Google's v0.7 dual_net.py builds it.

- Input: the mlperf07 planes (models/minigo/features.py), booleans cast to
  float; NHWC.
- An initial 3x3 convolution of conv_width, batch norm, ReLU; then
  trunk_layers residual blocks (3x3 conv, BN, ReLU, 3x3 conv, BN, the skip,
  ReLU). Convolutions have no bias; batch norm has momentum 0.95 and
  epsilon 1e-5.
- Policy head: a 1x1 convolution of 2, batch norm without scale or offset,
  ReLU, a dense layer to size * size + 1 logits.
- Value head: a 1x1 convolution of 1, batch norm without scale or offset,
  ReLU, dense fc_width + ReLU, dense 1, tanh (Black's view of the result).
- Kernels glorot-uniform and biases zero (tf.layers' defaults).

v0.7 (train_loop.py): 6 trunk layers, conv and fc width 64, bfloat16
activations on the TPU.
"""

import tensorflow as tf

from models.common import layers


class DualNet(tf.Module):
  """(policy logits [B, size*size + 1], value [B], new moving statistics)
  of [B, size, size, planes] features.

  Variables live in `params` (trainable) and `state` (moving statistics)
  by path: `minigo/init/...`, `minigo/block{i}/conv{1,2}/...`,
  `minigo/policy/...`, `minigo/value/...`.
  """

  def __init__(self, *, board_size: int = 19, planes: int = 13,
               conv_width: int = 64, fc_width: int = 64,
               trunk_layers: int = 6, policy_conv_width: int = 2,
               value_conv_width: int = 1, bn_momentum: float = 0.95,
               bn_epsilon: float = 1e-5, bn_group_size: int = 0,
               compute_dtype: str = 'float32', seed: int = 0):
    """Args:
      board_size: the board's side (19 in v0.7; 9 for the small board).
      planes: input feature planes (mlperf07: 13).
      conv_width, fc_width, trunk_layers, policy_conv_width,
        value_conv_width: dual_net.py's flags of the same names.
      bn_momentum, bn_epsilon: batch norm's.
      bn_group_size: replicas whose batch statistics are combined (0: all;
        1: per replica, as TPUEstimator's per-core batch norm).
      compute_dtype: 'float32' or 'bfloat16' (activations; Google's
        enable_bf16).
      seed: the initialisation's.
    """
    super().__init__(name='minigo')
    if min(board_size, conv_width, fc_width, policy_conv_width,
           value_conv_width) < 1 or trunk_layers < 0:
      raise ValueError('models.minigo.model.DualNet: sizes must be >= 1 (and '
                       f'trunk_layers >= 0), got board_size={board_size}, '
                       f'conv_width={conv_width}, fc_width={fc_width}, '
                       f'trunk_layers={trunk_layers}.')
    self.board_size, self.planes = board_size, planes
    self.trunk_layers = trunk_layers
    self.dtype = layers.compute_dtype(compute_dtype)
    self.bn = dict(sync=layers.BatchNormSync(bn_group_size),
                   momentum=bn_momentum, epsilon=bn_epsilon)
    self._seed, self._counter = seed, 0
    self.params, self.state = {}, {}
    moves = board_size * board_size + 1
    self._conv('init', 3, planes, conv_width)
    for i in range(trunk_layers):
      self._conv(f'block{i}/conv1', 3, conv_width, conv_width)
      self._conv(f'block{i}/conv2', 3, conv_width, conv_width)
    self._conv('policy/conv', 1, conv_width, policy_conv_width, scaled=False)
    self._dense('policy/logits', policy_conv_width * (moves - 1), moves)
    self._conv('value/conv', 1, conv_width, value_conv_width, scaled=False)
    self._dense('value/hidden', value_conv_width * (moves - 1), fc_width)
    self._dense('value/output', fc_width, 1)

  # -- Variables -----------------------------------------------------------

  def _init(self, shape, fan_in, fan_out):
    self._counter += 1
    return layers.glorot_uniform(shape, [self._seed, self._counter], fan_in,
                                 fan_out)

  def _variable(self, table, name, value, trainable=True):
    name = f'minigo/{name}'
    table[name] = tf.Variable(value, name=name, trainable=trainable)

  def _conv(self, name, k, cin, cout, scaled=True):
    """A convolution without bias and its batch norm (with gamma and beta
    unless `scaled` is False, as the heads')."""
    self._variable(self.params, f'{name}/kernel',
                   self._init([k, k, cin, cout], k * k * cin, k * k * cout))
    if scaled:
      self._variable(self.params, f'{name}/bn/gamma', tf.ones([cout]))
      self._variable(self.params, f'{name}/bn/beta', tf.zeros([cout]))
    self._variable(self.state, f'{name}/bn/moving_mean', tf.zeros([cout]),
                   trainable=False)
    self._variable(self.state, f'{name}/bn/moving_variance', tf.ones([cout]),
                   trainable=False)

  def _dense(self, name, cin, cout):
    self._variable(self.params, f'{name}/kernel',
                   self._init([cin, cout], cin, cout))
    self._variable(self.params, f'{name}/bias', tf.zeros([cout]))

  # -- Forward -------------------------------------------------------------

  def _conv_bn(self, x, name, updates, training):
    name = f'minigo/{name}'
    kernel = tf.cast(self.params[f'{name}/kernel'], self.dtype)
    x = tf.nn.conv2d(x, kernel, 1, 'SAME')
    cout = kernel.shape[-1]
    gamma = self.params.get(f'{name}/bn/gamma', tf.ones([cout]))
    beta = self.params.get(f'{name}/bn/beta', tf.zeros([cout]))
    y, mean, var = layers.batch_norm(
        x, gamma, beta, self.state[f'{name}/bn/moving_mean'],
        self.state[f'{name}/bn/moving_variance'], training=training,
        **self.bn)
    if training:
      updates[f'{name}/bn/moving_mean'] = mean
      updates[f'{name}/bn/moving_variance'] = var
    return y

  def _apply_dense(self, x, name):
    name = f'minigo/{name}'
    return (tf.matmul(x, tf.cast(self.params[f'{name}/kernel'], x.dtype))
            + tf.cast(self.params[f'{name}/bias'], x.dtype))

  def __call__(self, features, *, training: bool):
    updates = {}
    x = tf.cast(features, self.dtype)
    x = tf.nn.relu(self._conv_bn(x, 'init', updates, training))
    for i in range(self.trunk_layers):
      y = tf.nn.relu(self._conv_bn(x, f'block{i}/conv1', updates, training))
      y = self._conv_bn(y, f'block{i}/conv2', updates, training)
      x = tf.nn.relu(x + y)
    batch = tf.shape(x)[0]
    policy = tf.nn.relu(self._conv_bn(x, 'policy/conv', updates, training))
    logits = self._apply_dense(tf.reshape(policy, [batch, -1]),
                               'policy/logits')
    value = tf.nn.relu(self._conv_bn(x, 'value/conv', updates, training))
    hidden = tf.nn.relu(self._apply_dense(tf.reshape(value, [batch, -1]),
                                          'value/hidden'))
    value = tf.tanh(tf.reshape(self._apply_dense(hidden, 'value/output'),
                               [batch]))
    return tf.cast(logits, tf.float32), tf.cast(value, tf.float32), updates

  def l2_variables(self) -> list:
    """The variables dual_net.py's L2 cost covers: all trainable but
    biases and batch norm's beta (its gamma included)."""
    return [v for name, v in sorted(self.params.items())
            if not name.endswith(('/bias', '/beta'))]
