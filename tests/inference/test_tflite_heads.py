"""inference/tflite_heads.py and tools/quantize_tflite.py's float_outputs:
the layers that make a named output, and only they, stay float in INT8."""

from ai_edge_litert import interpreter as litert
import numpy as np
import pytest
import tensorflow as tf

from inference import tflite_heads
from tools import quantize_tflite


class TwoHeads(tf.Module):
  """A conv trunk, then two 1x1 conv heads, `wide` (reshaped) and `narrow`."""

  def __init__(self, rng):
    super().__init__()
    normal = lambda *s: tf.Variable(rng.normal(size=s).astype(np.float32))
    self.trunk, self.wide, self.narrow = (normal(3, 3, 3, 8),
                                          normal(1, 1, 8, 12),
                                          normal(1, 1, 8, 4))

  @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3])])
  def __call__(self, x):
    x = tf.nn.relu(tf.nn.conv2d(x, self.trunk, 1, 'SAME'))
    wide = tf.nn.conv2d(x, self.wide, 1, 'SAME') * 20.0  # A wide range.
    return {'wide': tf.reshape(wide, [-1, 8 * 8 * 3, 4]),
            'narrow': tf.nn.conv2d(x, self.narrow, 1, 'SAME')}


def _filters(content):
  """{TFLite filter shape: its dtype} of every 4-D weight tensor."""
  interpreter = litert.Interpreter(
      model_content=content, experimental_op_resolver_type=(
          litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
  interpreter.allocate_tensors()
  return {tuple(t['shape']): np.dtype(t['dtype'])
          for t in interpreter.get_tensor_details()
          if len(t['shape']) == 4 and t['shape'][0] in (8, 12, 4)
          and t['shape'][1] in (1, 3)}


def test_only_the_named_outputs_layers_stay_float(tmp_path):
  rng = np.random.default_rng(0)
  net = TwoHeads(rng)
  saved = str(tmp_path / 'saved')
  tf.saved_model.save(net, saved,
                      signatures=net.__call__.get_concrete_function())
  calibration = [{'x': rng.uniform(-1, 1, [1, 8, 8, 3]).astype(np.float32)}
                 for _ in range(10)]
  plain, mixed = str(tmp_path / 'plain.tflite'), str(tmp_path / 'mixed.tflite')
  quantize_tflite.convert(saved, calibration, 'int8', plain)
  quantize_tflite.convert(saved, calibration, 'int8', mixed,
                          float_outputs=('wide',))
  content = open(plain, 'rb').read()
  ops = tflite_heads.head_ops(content, 'serving_default', ['wide'])
  # The head's convolution and what follows it, not the trunk's.
  assert [op['op'] for op in ops].count('CONV_2D') == 1
  assert ops[-1]['op'] == 'CONV_2D' and 'RESHAPE' in [op['op'] for op in ops]
  assert _filters(content) == {(8, 3, 3, 3): np.int8, (12, 1, 1, 8): np.int8,
                               (4, 1, 1, 8): np.int8}
  assert _filters(open(mixed, 'rb').read()) == {
      (8, 3, 3, 3): np.int8, (12, 1, 1, 8): np.float32,
      (4, 1, 1, 8): np.int8}
  with pytest.raises(ValueError, match=r"no output \['logits'\]; it has "
                     r"\['narrow', 'wide'\]"):
    tflite_heads.head_ops(content, 'serving_default', ['logits'])
