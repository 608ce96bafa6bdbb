"""Raw-op building blocks shared by models: variables, conv, batch norm.

Weights are plain tf.Variables named by their path (`resnet/stage2/block0/
conv1/kernel`) so that sharding rules and checkpoint maps can match them.
"""

import math

import tensorflow as tf

from distribution import replica_groups

DTYPES = {'float32': tf.float32, 'bfloat16': tf.bfloat16}


class Dropout:
  """Dropout whose masks follow the model's seed.

  Every call site traced gets its own op seed (seed x 100003 + the count of
  sites traced so far; replicas trace in turn, so theirs differ too). With
  op seeds, random ops are allowed under op determinism (DETERMINISTIC,
  which a mesh needs) and a run's masks repeat from run to run.
  """

  def __init__(self, rate: float, seed: int):
    self.rate, self.seed = rate, seed
    self._sites = 0

  def __call__(self, x, training: bool):
    if not training or not self.rate:
      return x
    self._sites += 1
    return tf.nn.dropout(x, rate=self.rate,
                         seed=self.seed * 100003 + self._sites)


def project(x, kernel, bias=None, transpose_kernel=False):
  """x [..., in] times a 2-D kernel, as one 2-D matmul, plus bias.

  A 3-D x times a 2-D kernel would run as a broadcasting BatchMatMul whose
  kernel gradient is one product per example followed by a sum: about 2x
  slower for BERT-base on CPU.
  """
  fan_in = kernel.shape[1] if transpose_kernel else kernel.shape[0]
  fan_out = kernel.shape[0] if transpose_kernel else kernel.shape[1]
  y = tf.matmul(tf.reshape(x, [-1, fan_in]), kernel,
                transpose_b=transpose_kernel)
  if bias is not None:
    y = tf.nn.bias_add(y, tf.cast(bias, y.dtype))
  return tf.reshape(y, [-1, *x.shape[1:-1], fan_out])


def compute_dtype(name: str) -> tf.DType:
  if name not in DTYPES:
    raise ValueError(f'`compute_dtype` must be one of {sorted(DTYPES)}, got '
                     f'{name!r}.')
  return DTYPES[name]


def stack_size(model: str, sizes: dict, size: str,
               overrides: tuple[int, ...]) -> tuple[int, ...]:
  """A Transformer stack's (layers, width, heads, feed-forward width): the
  named size's from `sizes`, each replaced by its override when > 0."""
  if size not in sizes:
    raise ValueError(f'{model} `size` must be one of {sorted(sizes)}, got '
                     f'{size!r}.')
  return tuple(o or d for o, d in zip(overrides, sizes[size]))


def variance_scaling(shape, seed, fan_in: int,
                     scale: float = 1.0) -> tf.Tensor:
  """Truncated normal with variance scale / fan_in, stateless.

  scale 1.0 is TF1's `tf.variance_scaling_initializer()` with its defaults
  (fan_in, truncated normal), what Google's v0.7 ResNet uses; 2.0 is He et
  al.'s.
  """
  # 0.8796 is the stddev of a unit normal truncated at two sigma.
  stddev = math.sqrt(scale / fan_in) / 0.87962566
  return tf.random.stateless_truncated_normal(shape, seed=seed, stddev=stddev)


def glorot_uniform(shape, seed, fan_in: int, fan_out: int) -> tf.Tensor:
  """tf.layers' default kernel initialiser (Glorot and Bengio's uniform),
  stateless."""
  limit = math.sqrt(6.0 / (fan_in + fan_out))
  return tf.random.stateless_uniform(shape, seed, -limit, limit)


def int8_kernel(kernel, channel_axis: int = -1) -> tf.Tensor:
  """The kernel as TFLite's full-integer converter will store it, for
  quantization-aware training: each output channel rounded to its own
  symmetric int8 grid (scale max |w| / 127, values -127..127: TFLite's
  per-channel weight quantization), gradients passed through unchanged
  (the straight-through estimator).

  The grid is per output channel, so a per-channel factor the converter
  folds in later (batch norm's gamma / sqrt(variance + epsilon)) leaves the
  rounded kernel on the folded kernel's grid: what trains here is exactly
  what the INT8 model computes with.

  Args:
    kernel: a float convolution kernel.
    channel_axis: the output channels' axis (-1 for conv2d's [h, w, in,
      out]; 2 for depthwise_conv2d's [h, w, in, 1], whose channels are its
      inputs').
  """
  axis = channel_axis % kernel.shape.rank
  others = [a for a in range(kernel.shape.rank) if a != axis]
  largest = tf.reduce_max(tf.abs(kernel), axis=others, keepdims=True)
  scale = tf.where(largest > 0, largest / 127.0, tf.ones_like(largest))
  rounded = tf.clip_by_value(tf.round(kernel / scale), -127.0, 127.0) * scale
  return kernel + tf.stop_gradient(rounded - kernel)


def compute_kernel(kernel, dtype: tf.DType, *, int8: bool,
                   channel_axis: int = -1) -> tf.Tensor:
  """A convolution kernel as the forward pass uses it: on its INT8 grid
  (int8_kernel) when `int8` (quantization-aware training), then cast to the
  compute dtype."""
  if int8:
    kernel = int8_kernel(kernel, channel_axis)
  return tf.cast(kernel, dtype)


def is_decay_exempt(name: str) -> bool:
  """Batch-norm parameters and biases take no weight decay (nor LARS scaling)."""
  base = name.split(':')[0]
  return base.endswith(('/bias', '/beta', '/gamma')) or '/bn/' in base


# Input channels from which oneDNN's strided 1x1 filter gradient is sound
# (conv2d's docstring).
ONEDNN_STRIDED_1X1_SAFE = 16


def conv2d(x, kernel, stride: int):
  """NHWC convolution with the reference's fixed padding for strided convs.

  Strided convolutions pad explicitly (tf.pad, then VALID) rather than with
  conv2d's explicit-padding form: oneDNN has no kernels for that form's
  gradients (and none at all in bfloat16), so it falls back to Eigen, which
  made a ResNet-50 step ~1.4x (float32) to ~7x (bfloat16) slower on CPU.

  A strided 1x1 convolution of fewer than 16 input channels is the
  stride's subsample convolved at stride 1 (the same products and sums):
  TF 2.21's oneDNN filter gradient of the strided form corrupts the heap
  (an abort or a segfault, soon after) for such inputs on an even map at an
  odd batch when ops run on 2 or more threads (docs/benchmarks-history.md, "A
  oneDNN crash": a width-0.125 backbone's 8-channel projection shortcut at
  3 images a replica). The subsample costs 1.2-1.9x (float32) and
  1.3-2.7x (bfloat16) on ResNet-50's shortcuts on CPU, so wider inputs
  keep the strided form.
  """
  k = kernel.shape[0]
  if k == 1 and stride > 1 and kernel.shape[2] < ONEDNN_STRIDED_1X1_SAFE:
    return tf.nn.conv2d(x[:, ::stride, ::stride, :], kernel, 1, 'VALID')
  if stride == 1:
    return tf.nn.conv2d(x, kernel, 1, 'SAME')
  pad_total = k - 1
  if pad_total:
    pad_beg = pad_total // 2
    x = tf.pad(x, [[0, 0], [pad_beg, pad_total - pad_beg],
                   [pad_beg, pad_total - pad_beg], [0, 0]])
  return tf.nn.conv2d(x, kernel, stride, 'VALID')


class BatchNormSync:
  """How batch-norm statistics are combined across replicas.

  group_size 1 keeps statistics per replica (fused kernel); 0 combines all
  replicas; N combines groups of N consecutive replicas (the TPU reference's
  `model_bn_span` = N x per-replica batch).
  """

  def __init__(self, group_size: int = 0):
    if group_size < 0:
      raise ValueError(f'`bn_group_size` must be >= 0, got {group_size}.')
    self.group_size = group_size

  def combine(self, local_stats: tf.Tensor) -> tf.Tensor:
    """Averages a [2, C] (mean, mean of squares) across the replica group."""
    ctx = tf.distribute.get_replica_context()
    n = ctx.num_replicas_in_sync if ctx else 1
    group = self.group_size or n
    if n == 1 or group == 1:
      return local_stats
    if n % group:
      raise ValueError(f'`bn_group_size` ({group}) must divide the number of '
                       f'replicas ({n}).')
    # A sum within the group only (the strategy's all-reduce for a group of
    # every replica).
    members = replica_groups.consecutive(tf.distribute.get_strategy(), group)
    return members.sum(local_stats) / group

  def is_local(self) -> bool:
    ctx = tf.distribute.get_replica_context()
    n = ctx.num_replicas_in_sync if ctx else 1
    return n == 1 or self.group_size == 1


def named_batch_norm(x, name: str, params, state, updates: dict, *,
                     training: bool, **kwargs):
  """batch_norm of the variables `{name}/gamma`, `{name}/beta` (in `params`)
  and `{name}/moving_mean`, `{name}/moving_variance` (in `state`); in
  training, the new moving statistics go into `updates` under the moving
  variables' names. kwargs: batch_norm's (sync, momentum, epsilon, ...)."""
  y, mean, var = batch_norm(
      x, params[f'{name}/gamma'], params[f'{name}/beta'],
      state[f'{name}/moving_mean'], state[f'{name}/moving_variance'],
      training=training, **kwargs)
  if training:
    updates[f'{name}/moving_mean'] = mean
    updates[f'{name}/moving_variance'] = var
  return y


def batch_norm(x, gamma, beta, moving_mean, moving_var, *, training: bool,
               sync: BatchNormSync, momentum: float, epsilon: float,
               mask=None, valid_fraction: float = 1.0):
  """Batch norm over N, H, W of an NHWC tensor.

  mask (training with combined statistics only): [1, H, 1, 1], 1 on the rows
  the statistics count; `valid_fraction` is the share of counted rows over
  every replica of the group (the same in each group of spatial partitions:
  models/common/spatial.py), so that the combined means are over counted rows.

  Returns:
    (y, new_moving_mean, new_moving_var); the moving values are None when not
    training. Statistics are computed in float32 whatever x's dtype.
  """
  if not training:
    y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=moving_mean, variance=moving_var,
        epsilon=epsilon, data_format='NHWC', is_training=False)
    return y, None, None
  if sync.is_local():
    if mask is not None:
      raise ValueError('A batch-norm mask needs statistics combined over the '
                       'replicas that share an image (bn_group_size).')
    y, mean, var, _, _, _ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=tf.zeros_like(gamma),
        variance=tf.ones_like(gamma), epsilon=epsilon, data_format='NHWC',
        is_training=True, exponential_avg_factor=1.0)
  else:
    xf = tf.cast(x, tf.float32)
    if mask is not None:
      xf = xf * tf.cast(mask, tf.float32)
    local = tf.stack([tf.reduce_mean(xf, [0, 1, 2]),
                      tf.reduce_mean(tf.square(xf), [0, 1, 2])])
    if mask is not None:
      local = local / valid_fraction
    mean, mean_sq = tf.unstack(sync.combine(local))
    var = tf.maximum(mean_sq - tf.square(mean), 0.0)
    scale = gamma * tf.math.rsqrt(var + epsilon)
    shift = beta - mean * scale
    y = x * tf.cast(scale, x.dtype) + tf.cast(shift, x.dtype)
  new_mean = momentum * moving_mean + (1.0 - momentum) * tf.stop_gradient(mean)
  new_var = momentum * moving_var + (1.0 - momentum) * tf.stop_gradient(var)
  return y, new_mean, new_var
