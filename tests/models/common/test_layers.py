"""models.common.layers.conv2d: the reference's padding, and strided 1x1
convolutions that TF 2.21's oneDNN gets wrong."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from models.common import layers
from tests import helpers


def numpy_conv(x, kernel, stride):
  """The reference's convolution: pad (k - 1) split low-first, VALID."""
  k = kernel.shape[0]
  lo = (k - 1) // 2
  hi = k - 1 - lo
  x = np.pad(x, [(0, 0), (lo, hi), (lo, hi), (0, 0)])
  rows = (x.shape[1] - k) // stride + 1
  cols = (x.shape[2] - k) // stride + 1
  out = np.zeros([x.shape[0], rows, cols, kernel.shape[3]])
  for i in range(k):
    for j in range(k):
      patch = x[:, i:i + stride * rows:stride, j:j + stride * cols:stride]
      out += np.einsum('bhwc,cd->bhwd', patch, kernel[i, j])
  return out


@pytest.mark.parametrize('k,stride,cin', [(1, 2, 8), (1, 2, 32), (3, 2, 8),
                                          (3, 1, 8), (7, 2, 3)])
def test_conv2d_is_the_references_convolution(k, stride, cin):
  rng = np.random.default_rng(k * 100 + stride * 10 + cin)
  x = rng.normal(size=[3, 10, 10, cin]).astype(np.float32)
  kernel = rng.normal(size=[k, k, cin, 5]).astype(np.float32)
  got = layers.conv2d(tf.constant(x), tf.constant(kernel), stride).numpy()
  np.testing.assert_allclose(got, numpy_conv(x, kernel, stride), atol=1e-4)


# The crash's own conditions: 8 input channels, an even map, an odd batch,
# ops on 2 threads (the xdist workers run 1, so a fresh process). The
# strided form aborts or segfaults here within a few steps on AVX-512
# machines (seen on an Intel Xeon and an AMD EPYC); the subsample form gives
# the exact filter gradient every time.
GRADIENT_SCRIPT = '''
import numpy as np
from core import startup
tf = startup.import_tensorflow()
from models.common import layers
rng = np.random.default_rng(0)
x = tf.constant(rng.normal(size=[3, 40, 40, 8]).astype(np.float32))
kernel = tf.Variable(rng.normal(size=[1, 1, 8, 16]).astype(np.float32))
dy = tf.constant(rng.normal(size=[3, 20, 20, 16]).astype(np.float32))

@tf.function
def filter_gradient():
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(layers.conv2d(x, kernel, 2) * dy)
  return tape.gradient(loss, kernel)

want = np.einsum('bhwc,bhwd->cd', x.numpy()[:, ::2, ::2].astype(np.float64),
                 dy.numpy().astype(np.float64))
print(max(np.abs(filter_gradient().numpy()[0, 0] - want).max()
          for _ in range(40)))
'''


def test_strided_1x1_filter_gradient_is_exact_on_two_threads():
  result = subprocess.run(
      [sys.executable, '-c', GRADIENT_SCRIPT], capture_output=True,
      text=True, cwd=helpers.ROOT, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2',
               TF_NUM_INTRAOP_THREADS='2'))
  assert result.returncode == 0, result.stderr[-2000:]
  assert float(result.stdout.split()[-1]) < 1e-3
