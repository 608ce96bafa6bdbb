"""Gin at the entry points: parsing, `--gin.NAME=VALUE` sugar, the TASK macro.

Training (train.py), export (tools/export_savedmodel.py) and inference
(inference/run.py) read the same gin files; each model's gin file binds the
macro TASK, and all three build the task from it.
"""

import os

from absl import app
import gin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIN_SUGAR = '--gin.'


def split_gin_sugar(argv: list[str]) -> tuple[list[str], list[str]]:
  """Turns `--gin.NAME=VALUE` arguments into gin bindings `NAME=VALUE`."""
  rest, bindings = [], []
  for arg in argv:
    if arg.startswith(GIN_SUGAR):
      name, sep, value = arg[len(GIN_SUGAR):].partition('=')
      if not sep:
        raise app.UsageError(f'{arg} needs a value: --gin.NAME=VALUE')
      bindings.append(f'{name} = {value}')
    else:
      rest.append(arg)
  return rest, bindings


def parse(gin_files: list[str], bindings: list[str],
          finalize: bool = False) -> None:
  """Parses gin files (found relative to the repository too) and bindings."""
  gin.add_config_file_search_path(ROOT)
  gin.parse_config_files_and_bindings(list(gin_files), list(bindings),
                                      finalize_config=finalize)


def configured_task():
  """The task the TASK macro of the parsed gin files builds."""
  try:
    reference = gin.query_parameter('%TASK')
  except ValueError as e:
    raise ValueError('The gin files bind no TASK macro: pass the model\'s '
                     'training gin file (e.g. gin/resnet_quickstart.gin).'
                     ) from e
  return reference.scoped_configurable_fn()
