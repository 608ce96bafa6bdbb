"""Post-training quantization of an exported model to an INT8 TFLite model,
the INT8 backend of the LoadGen harness (`inference.run --tflite=`).

  python -m tools.quantize_tflite --gin_file=gin/mobilenet_quickstart.gin \
      --saved_model=runs/mobilenet_saved \
      --calibration_dataset=data/quickstart/calibration \
      --dataset=data/quickstart --output=runs/mobilenet_int8.tflite

TensorFlow's converter (`tf.lite.TFLiteConverter`) rewrites the SavedModel's
`serving_default` with INT8 weights and activations (TFLITE_BUILTINS_INT8),
the activations' ranges calibrated on `--calibration_count` samples of
`--calibration_dataset`, preprocessed as the model's eval pipeline
preprocesses (its eval files: for the quickstarts, a folder of training
images `make data` writes; for ImageNet, MLPerf's calibration list of
training images converted with tools/convert_image_folder.py). The inputs
and outputs stay float, as the SavedModel's. MLPerf v0.5 allowed
post-training quantization calibrated on its calibration sets and never on
the accuracy set: the tool refuses calibration samples that are also
samples of `--dataset`'s eval set (the accuracy set), by their preprocessed
bytes.

`--precision=float32` writes the same signature unquantized (the FP32
TFLite baseline of the INT8 speed-up).

A SavedModel with a `network` signature (SSD's: the network without its
box decoding and NMS; training.task.QuantizedServing) has that signature
converted instead: the harness's TFLite backend runs the task's float
post-processing on its outputs, as the TF object-detection API's INT8 SSDs
keep their post-processing in float. The layers making the outputs the
task names in `float_outputs` (SSD's class logits) stay float too
(inference/tflite_heads.py; the converter's QuantizationDebugger
denylists them).
"""

import hashlib
import os
import sys

from absl import app
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # Run as a script from anywhere.

# pylint: disable=wrong-import-position
from core import config as gin_config
from core import entry_point
from core import startup


def define_flags():
  flags.DEFINE_multi_string('gin_file', [], 'The model\'s training gin files.')
  flags.DEFINE_list('gin_search_paths', [], gin_config.SEARCH_PATHS_HELP)
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_string('saved_model', None, 'tools/export_savedmodel.py output.')
  flags.DEFINE_string('calibration_dataset', None,
                      'Folder whose eval-pattern TFRecords are the '
                      'calibration samples.')
  flags.DEFINE_string('dataset', None, 'The accuracy set\'s folder (its eval '
                      'TFRecords): calibration must not overlap it.')
  flags.DEFINE_integer('calibration_count', 500,
                       'Calibration samples (MLPerf\'s lists hold 500).')
  flags.DEFINE_enum('precision', 'int8', ['int8', 'float32'],
                    'INT8 weights and activations, or float32.')
  flags.DEFINE_string('output', None, 'Where to write the .tflite file.')
  flags.mark_flags_as_required(['saved_model', 'dataset', 'output'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import gin
import tensorflow as tf

from core import staged_files
from inference import run as inference_run
from inference import sample_library
from inference import tflite_heads
from training import export as export_lib


def first_samples(task, count: int) -> list[dict]:
  """The first `count` eval samples of the task's data, one a dict of
  model inputs with a batch of 1."""
  library = sample_library.EvalSampleLibrary(task=task, count=count)
  library.load(range(library.total))
  return [library.get([i]) for i in range(library.total)]


def _digest(inputs: dict) -> str:
  h = hashlib.sha256()
  for key in sorted(inputs):
    h.update(key.encode())
    h.update(inputs[key].tobytes())
  return h.hexdigest()


def check_held_out(calibration: list[dict], accuracy_task) -> None:
  """Raises ValueError if a calibration sample is an accuracy-set one."""
  seen = {_digest(s): i for i, s in enumerate(calibration)}
  library = sample_library.EvalSampleLibrary(task=accuracy_task)
  for start in range(0, library.total, 256):
    ids = range(start, min(start + 256, library.total))
    library.load(ids)
    for i in ids:
      found = seen.get(_digest(library.get([i])))
      if found is not None:
        raise ValueError(
            f'Calibration sample {found} is accuracy-set sample {i}: '
            'calibrate on held-out samples (training images), never on '
            'the accuracy set.')
    library.unload(ids)


def convert(saved_model: str, calibration: list[dict], precision: str,
            output: str, float_outputs=()) -> int:
  """Writes the TFLite model (atomically); returns its bytes.

  float_outputs: in INT8, outputs of the converted signature whose last
  layers stay float (inference/tflite_heads.py: from each output back to
  its convolutions; training.task.QuantizedServing.float_outputs).
  """
  if not tf.io.gfile.exists(saved_model):
    raise FileNotFoundError(f'No SavedModel at {saved_model}; make one with '
                            'tools/export_savedmodel.py.')
  # A task with float post-processing (SSD's NMS) exports the part to
  # quantize as its own signature (training.task.QuantizedServing).
  signatures = tf.saved_model.load(saved_model).signatures
  signature = (export_lib.NETWORK_SIGNATURE
               if export_lib.NETWORK_SIGNATURE in signatures
               else 'serving_default')

  def converter(kind, *ops):
    c = tf.lite.TFLiteConverter.from_saved_model(saved_model,
                                                 signature_keys=[signature])
    if kind == 'int8':
      c.optimizations = [tf.lite.Optimize.DEFAULT]
      c.representative_dataset = lambda: iter(calibration)
      c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                     *ops]
    return c

  if precision == 'int8' and not calibration:
    raise ValueError('INT8 needs calibration samples: give '
                     '--calibration_dataset.')
  if precision == 'int8' and float_outputs:
    # The heads' ops, found in a float conversion (uncalibrated, seconds):
    # the INT8 conversion names its ops alike, and adds only the outputs'
    # dequantize ops.
    head = tflite_heads.head_ops(converter('float32').convert(), signature,
                                 float_outputs)
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter(precision, tf.lite.OpsSet.TFLITE_BUILTINS),
        debug_dataset=lambda: iter(calibration[:1]),
        debug_options=tf.lite.experimental.QuantizationDebugOptions(
            denylisted_nodes=[op['name'] for op in head]))
    content = debugger.get_nondebug_quantized_model()
  else:
    content = converter(precision).convert()
  staged_files.write_bytes(output, content)
  return len(content)


def held_out_calibration(*, gin_files: list[str], gin_params: list[str],
                         calibration_dataset: str, dataset: str,
                         count: int) -> tuple[list[dict], tuple]:
  """The first `count` samples of `calibration_dataset` (the eval files'
  format), checked to be none of `dataset`'s accuracy samples, and the
  task's float_outputs; main and the notebooks' INT8 step use it.

  Raises:
    ValueError: no calibration records, or one is an accuracy sample.
  """
  gin.clear_config()
  cal_task = inference_run.load_task(gin_files, gin_params,
                                     calibration_dataset)
  if not tf.io.gfile.glob(cal_task.data.eval_files):
    raise ValueError(f'No calibration records match '
                     f'{cal_task.data.eval_files}: --calibration_dataset '
                     'holds them in the eval files\' format (`make data` '
                     'writes data/quickstart/calibration).')
  calibration = first_samples(cal_task, count)
  gin.clear_config()
  accuracy_task = inference_run.load_task(gin_files, gin_params, dataset)
  accuracy_task.data.check()
  check_held_out(calibration, accuracy_task)
  return calibration, getattr(cal_task, 'float_outputs', ())


def main(argv):
  del argv
  f = flags.FLAGS
  gin_files = gin_config.resolve_gin_files(f.gin_file, f.gin_search_paths)
  calibration, float_outputs = [], ()
  if f.precision == 'int8':
    if not f.calibration_dataset:
      raise ValueError('--precision=int8 needs --calibration_dataset (a '
                       'folder of held-out samples, e.g. training images).')
    if f.calibration_count < 1:
      raise ValueError('--calibration_count must be >= 1, got '
                       f'{f.calibration_count}.')
    calibration, float_outputs = held_out_calibration(
        gin_files=gin_files, gin_params=f.gin_param,
        calibration_dataset=f.calibration_dataset, dataset=f.dataset,
        count=f.calibration_count)
  size = convert(f.saved_model, calibration, f.precision, f.output,
                 float_outputs)
  print(f'Wrote {f.output}: {f.precision}, {size / 1e6:.2f} MB'
        + (f', calibrated on {len(calibration)} samples of '
           f'{f.calibration_dataset}' if calibration else '')
        + (f'; float: the layers making {", ".join(float_outputs)}'
           if float_outputs else ''))
  return 0


if __name__ == '__main__':
  app.run(entry_point.tool_main(main))
