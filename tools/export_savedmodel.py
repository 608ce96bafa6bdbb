"""Exports a trained model as a SavedModel with a dynamic-batch signature.

  python -m tools.export_savedmodel --gin_file=gin/resnet_quickstart.gin \
      --checkpoint_dir=runs/quickstart --export_dir=runs/resnet_savedmodel \
      [--gin_param="COMPUTE_DTYPE='bfloat16'"]

The task, model and input shapes come from the same gin files as training;
the weights from the newest checkpoint in `<checkpoint_dir>/checkpoints`
(optimizer state is ignored). The serving signature `serving_default` is the
task's (`serving_fn`): for ResNet, float images in [0, 255] as the eval
pipeline emits them -> logits and classes. Compute precision follows the
COMPUTE_DTYPE binding, so the same checkpoint exports as float32 or bfloat16.
"""

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


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_multi_string('gin_file', [], 'Gin files used for training.')
  flags.DEFINE_list('gin_search_paths', [], gin_config.SEARCH_PATHS_HELP)
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_string('checkpoint_dir', None, 'The training --model_dir.')
  flags.DEFINE_string('export_dir', None, 'Where to write the SavedModel.')
  flags.mark_flags_as_required(['checkpoint_dir', 'export_dir'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from training import export as export_lib


def export(*, gin_files: list[str], gin_params: list[str],
           checkpoint_dir: str, export_dir: str) -> str:
  """Writes the SavedModel; returns the checkpoint it came from.

  Raises:
    FileNotFoundError: no checkpoint under checkpoint_dir.
    ValueError: the checkpoint does not match the configured model.
  """
  # The training command's bindings, maybe without its hardware file.
  gin_config.parse(gin_files, gin_params, unread_macros='known')
  task = gin_config.configured_task()
  folder = os.path.join(checkpoint_dir, 'checkpoints')
  path = tf.train.latest_checkpoint(folder)
  if path is None:
    raise FileNotFoundError(f'No checkpoint in {folder}: train first, or point '
                            '--checkpoint_dir at a training --model_dir.')
  model = task.build_model()
  try:
    tf.train.Checkpoint(model=model).restore(path).expect_partial(
    ).assert_existing_objects_matched()
  except (AssertionError, ValueError) as e:
    raise ValueError(f'{path} does not fit the model these gin files build '
                     f'({str(e).splitlines()[0][:300]}).') from e
  export_lib.save_serving(model, task, export_dir)
  return path


def main(argv):
  del argv
  # Bad input raises ValueError or FileNotFoundError: one line, exit 2
  # (entry_point.tool_main).
  path = export(gin_files=gin_config.resolve_gin_files(
      FLAGS.gin_file, FLAGS.gin_search_paths), gin_params=FLAGS.gin_param,
                checkpoint_dir=FLAGS.checkpoint_dir,
                export_dir=FLAGS.export_dir)
  print(f'exported {path} to {FLAGS.export_dir}')


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(main))
