"""Loads a TF1 google-research/bert checkpoint (MLPerf's starting point).

The MLPerf BERT run starts from the reference TF1 checkpoint (`model.ckpt-28252`)
whose variables are named `bert/encoder/layer_0/attention/self/query/kernel`,
..., `cls/predictions/output_bias`. models/bert.py names its variables the
same way, so the default name map is the identity; pass another map for
checkpoints with a prefix or other names. Optimizer slots in the checkpoint
(`.../adam_m`, `.../adam_v`) and the global step are ignored.
"""

from typing import Callable

import tensorflow as tf


def load_tf1_checkpoint(model, path: str, *,
                        name_map: Callable[[str], str] = lambda name: name
                        ) -> int:
  """Assigns every model weight from the checkpoint at `path`.

  Every name and shape is checked before anything is assigned.

  Args:
    model: a models.bert.Bert.
    path: checkpoint prefix (e.g. gs://.../model.ckpt-28252) or its folder.
    name_map: model variable name -> checkpoint variable name.

  Returns:
    The number of variables loaded.

  Raises:
    ValueError: naming the missing variables, or a variable whose shape
      differs with both shapes.
  """
  if tf.io.gfile.isdir(path):
    path = tf.train.latest_checkpoint(path) or path
  try:
    reader = tf.train.load_checkpoint(path)
  except (tf.errors.NotFoundError, ValueError) as e:
    raise ValueError(f'No checkpoint at {path} ({e}). Check INIT_CHECKPOINT.'
                     ) from e
  shapes = reader.get_variable_to_shape_map()
  missing = [name_map(n) for n in model.params if name_map(n) not in shapes]
  if missing:
    raise ValueError(
        f'{path} lacks {len(missing)} of the model\'s variables, e.g. '
        f'{missing[:3]}. It is not a BERT checkpoint of this layout, or the '
        'name map is wrong.')
  for name, var in model.params.items():
    want, have = tuple(var.shape), tuple(shapes[name_map(name)])
    if want != have:
      raise ValueError(
          f'Variable {name}: shape {have} in checkpoint {path} but {want} in '
          'the model. Make the BERT config (size, vocab_size, '
          'max_position_embeddings) match the checkpoint.')
  for name, var in model.params.items():
    var.assign(reader.get_tensor(name_map(name)))
  return len(model.params)
