"""Loads a TF1 google-research/bert checkpoint (MLPerf's starting point).

The MLPerf BERT run starts from the reference TF1 checkpoint (`model.ckpt-28252`)
whose variables are named `bert/encoder/layer_0/attention/self/query/kernel`,
..., `cls/predictions/output_bias`. models/bert/model.py names its variables the
same way, so the default name map is the identity; pass another map for
checkpoints with a prefix or other names. Optimizer slots in the checkpoint
(`.../adam_m`, `.../adam_v`) and the global step are ignored.
"""

from typing import Callable

from models.common import named_checkpoint


def load_tf1_checkpoint(model, path: str, *,
                        name_map: Callable[[str], str] = lambda name: name
                        ) -> int:
  """Assigns every model weight from the checkpoint at `path`.

  Every name and shape is checked before anything is assigned.

  Args:
    model: a models.bert.model.Bert.
    path: checkpoint prefix (e.g. gs://.../model.ckpt-28252) or its folder.
    name_map: model variable name -> checkpoint variable name.

  Returns:
    The number of variables loaded.

  Raises:
    ValueError: naming the missing variables, or a variable whose shape
      differs with both shapes.
  """
  return named_checkpoint.load_named_variables(
      model.params, path, name_map=name_map,
      what='a BERT checkpoint of this layout', flag='INIT_CHECKPOINT',
      fix_shapes='Make the BERT config (size, vocab_size, '
      'max_position_embeddings) match the checkpoint.')
