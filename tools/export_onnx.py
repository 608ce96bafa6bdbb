"""An exported model as ONNX, the ONNX Runtime backend of the LoadGen harness
(`inference.run --onnx=`).

  python -m tools.export_onnx --saved_model=runs/mbn/saved \
      --output=runs/mbn/model.onnx

tf2onnx converts the SavedModel's `serving_default` signature (float32, the
batch dimension left dynamic); the inputs and outputs keep the signature's
names. ONNX Runtime is the runtime MLCommons' reference harness serves
MobileNet-v1 and ResNet-50 with on CPUs (benchmarks/versus_mlcommons.py).
The file appears whole or not at all (core/staged_files.py).
"""

import os
import sys

from absl import app
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # Run as a script from anywhere.

# pylint: disable=wrong-import-position
from core import entry_point
from core import startup

# ONNX's opset 13: what ONNX Runtime, tf2onnx and the reference's ONNX
# models all support.
OPSET = 13


def define_flags():
  flags.DEFINE_string('saved_model', None, 'tools/export_savedmodel.py output.')
  flags.DEFINE_string('output', None, 'Where to write the .onnx file.')
  flags.DEFINE_integer('opset', OPSET, 'The ONNX opset.')
  flags.mark_flags_as_required(['saved_model', 'output'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

tf = startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
from core import staged_files


def convert(saved_model: str, output: str, opset: int = OPSET) -> int:
  """Writes the ONNX model (atomically); returns its bytes."""
  import tf2onnx  # Only this tool.
  if not tf.io.gfile.exists(saved_model):
    raise FileNotFoundError(f'No SavedModel at {saved_model}; make one with '
                            'tools/export_savedmodel.py.')
  loaded = tf.saved_model.load(saved_model)  # Holds the variables.
  signatures = loaded.signatures
  if 'serving_default' not in signatures:
    raise ValueError(f'The SavedModel at {saved_model} has no '
                     'serving_default signature: export it with '
                     'tools/export_savedmodel.py.')
  serving = signatures['serving_default']
  specs = serving.structured_input_signature[1]
  names = sorted(specs)
  signature = [tf.TensorSpec(specs[k].shape, specs[k].dtype, name=k)
               for k in names]

  @tf.function(input_signature=signature)
  def serve(*args):
    return serving(**dict(zip(names, args)))

  model, _ = tf2onnx.convert.from_function(serve, input_signature=signature,
                                           opset=opset)
  del loaded
  content = model.SerializeToString()
  staged_files.write_bytes(output, content)
  return len(content)


def main(argv):
  del argv
  f = flags.FLAGS
  size = convert(f.saved_model, f.output, f.opset)
  print(f'Wrote {f.output}: ONNX opset {f.opset}, {size / 1e6:.2f} MB')
  return 0


if __name__ == '__main__':
  app.run(entry_point.tool_main(main))
