"""MiniGo's dual network in NumPy, for inference in host processes.

Self-play and evaluation games run in spawned host processes that import no
TensorFlow (models/common/host_pool.py); this is models/minigo/model.py's
DualNet in inference (moving statistics) from its variables, each batch norm
folded into the convolution before it and 3x3 convolutions as one matrix product
over the nine shifted boards. Tested against DualNet
(tests/models/minigo/test_model.py).
"""

from typing import Mapping

import numpy as np

EPSILON = 1e-5


class NumpyDualNet:
  """(policy probabilities [B, size*size + 1], value [B], Black's view) of
  [B, size, size, planes] features; `weights` is DualNet's variables by
  name (`params` and `state`), as NumPy arrays."""

  def __init__(self, weights: Mapping[str, np.ndarray], *,
               epsilon: float = EPSILON):
    w = {k.split('minigo/', 1)[1]: np.asarray(v, np.float32)
         for k, v in weights.items()}
    self.trunk = []
    self.init = self._fold(w, 'init', epsilon)
    i = 0
    while f'block{i}/conv1/kernel' in w:
      self.trunk.append((self._fold(w, f'block{i}/conv1', epsilon),
                         self._fold(w, f'block{i}/conv2', epsilon)))
      i += 1
    self.policy_conv = self._fold(w, 'policy/conv', epsilon)
    self.value_conv = self._fold(w, 'value/conv', epsilon)
    self.dense = {name: (w[f'{name}/kernel'], w[f'{name}/bias'])
                  for name in ('policy/logits', 'value/hidden',
                               'value/output')}

  @staticmethod
  def _fold(w, name, epsilon):
    """(kernel [k, k, cin, cout], bias [cout]): the convolution with its
    batch norm (inference) folded in."""
    kernel = w[f'{name}/kernel']
    cout = kernel.shape[-1]
    scale = w.get(f'{name}/bn/gamma', np.ones(cout, np.float32)) / np.sqrt(
        w[f'{name}/bn/moving_variance'] + epsilon)
    bias = (w.get(f'{name}/bn/beta', np.zeros(cout, np.float32))
            - w[f'{name}/bn/moving_mean'] * scale)
    return kernel * scale, bias

  @staticmethod
  def _conv(x, folded):
    """'SAME' convolution, stride 1, as one product a kernel tap (fastest
    of the forms measured with one BLAS thread: docs/minigo.md)."""
    kernel, bias = folded
    k = kernel.shape[0]
    if k == 1:
      return x @ kernel[0, 0] + bias
    b, h, w, c = x.shape
    xp = np.zeros((b, h + 2, w + 2, c), np.float32)
    xp[:, 1:-1, 1:-1] = x
    out = np.tensordot(xp[:, :h, :w], kernel[0, 0], 1)
    for i in range(3):
      for j in range(3):
        if i or j:
          out += np.tensordot(xp[:, i:i + h, j:j + w], kernel[i, j], 1)
    return out + bias

  def __call__(self, features: np.ndarray):
    x = np.maximum(self._conv(features.astype(np.float32), self.init), 0)
    for conv1, conv2 in self.trunk:
      y = np.maximum(self._conv(x, conv1), 0)
      x = np.maximum(x + self._conv(y, conv2), 0)
    b = x.shape[0]
    policy = np.maximum(self._conv(x, self.policy_conv), 0).reshape(b, -1)
    kernel, bias = self.dense['policy/logits']
    logits = policy @ kernel + bias
    logits -= logits.max(-1, keepdims=True)
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(-1, keepdims=True)
    value = np.maximum(self._conv(x, self.value_conv), 0).reshape(b, -1)
    kernel, bias = self.dense['value/hidden']
    hidden = np.maximum(value @ kernel + bias, 0)
    kernel, bias = self.dense['value/output']
    return probabilities, np.tanh(hidden @ kernel + bias)[:, 0]
