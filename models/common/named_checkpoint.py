"""Assigns model variables from a checkpoint by name, all checks first.

BERT starts from the reference TF1 checkpoint and SSD's backbone from a
ResNet-34: both read variables by name (through a name map) and must not
half-load a wrong checkpoint, so every name and shape is checked before
anything is assigned.
"""

from typing import Callable, Mapping

import tensorflow as tf


def load_named_variables(variables: Mapping[str, tf.Variable], path: str, *,
                         name_map: Callable[[str], str], what: str,
                         fix_shapes: str, flag: str,
                         refuse: Callable[[str], str | None] = None) -> int:
  """Assigns every variable from the checkpoint at `path`.

  Args:
    variables: model name -> variable.
    path: checkpoint prefix, its folder, or the model_dir of the run that
      wrote it (local or gs://).
    name_map: model variable name -> checkpoint variable name.
    what: the checkpoint expected, for the messages ('a BERT checkpoint').
    fix_shapes: what to change when a shape differs.
    flag: the setting that named `path` (INIT_CHECKPOINT).
    refuse: checkpoint variable name -> why a checkpoint holding it is the
      wrong one (None: it may be there), for a checkpoint whose names are a
      superset of the model's.

  Returns:
    The number of variables loaded.

  Raises:
    ValueError: no checkpoint at `path`; missing variables (a few named);
      a variable whose shape differs (both shapes named); a variable that
      `refuse` refuses.
  """
  if tf.io.gfile.isdir(path):
    # A folder of checkpoints, or a run's model_dir (checkpoints/ in it).
    path = (tf.train.latest_checkpoint(path) or
            tf.train.latest_checkpoint(f'{path.rstrip("/")}/checkpoints') or
            path)
  try:
    reader = tf.train.load_checkpoint(path)
  except (tf.errors.NotFoundError, ValueError) as e:
    raise ValueError(f'No checkpoint at {path} ({e}). Check {flag}.') from e
  shapes = reader.get_variable_to_shape_map()
  for name in sorted(shapes) if refuse else ():
    why = refuse(name)
    if why:
      raise ValueError(f'{path} holds {name}: {why}')
  missing = [name_map(n) for n in variables if name_map(n) not in shapes]
  if missing:
    raise ValueError(
        f'{path} lacks {len(missing)} of the model\'s variables, e.g. '
        f'{missing[:3]}. It is not {what}, or the name map is wrong.')
  for name, var in variables.items():
    want, have = tuple(var.shape), tuple(shapes[name_map(name)])
    if want != have:
      raise ValueError(f'Variable {name}: shape {have} in checkpoint {path} '
                       f'but {want} in the model. {fix_shapes}')
  for name, var in variables.items():
    var.assign(reader.get_tensor(name_map(name)))
  return len(variables)
