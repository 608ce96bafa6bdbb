"""Backbones initialised from checkpoints this suite wrote: a ResNet's for
SSD-ResNet34 and Mask R-CNN, a MobileNet-v1's for SSD-MobileNet-v1; and
whole models, the start of a fine-tune.

Every name and shape is checked before anything is assigned
(models/common/named_checkpoint.py); a classifier in the checkpoint is not read.
"""

from models.common import named_checkpoint
from models.common import resnet as resnet_lib


def suite_checkpoint_path(name: str, collection: str) -> str:
  """Where `model.<collection>[name]` sits in a checkpoint this suite's
  Checkpointer wrote (tf.train.Checkpoint escapes '/' in dict keys); a
  name's prefix gives the prefix of every key under it."""
  return f'model/{collection}/{name.replace("/", ".S")}'


def suite_checkpoint_key(name: str, collection: str) -> str:
  """The key of `model.<collection>[name]`'s value in such a checkpoint."""
  return (f'{suite_checkpoint_path(name, collection)}/.ATTRIBUTES/'
          'VARIABLE_VALUE')


def _suite_name_map(state: dict):
  return lambda name: suite_checkpoint_key(
      name, 'state' if name in state else 'params')


def load_resnet(model, path: str, *, name_map=None,
                depth_binding: str = 'models.ssd.features.ResNetFeatures.depth'
                ) -> int:
  """Initialises a ResNet backbone's weights and moving statistics.

  Args:
    model: has the ResNet as `backbone` and its `width_multiplier` (SSD's
      ResNetFeatures, Mask R-CNN).
    path: a checkpoint prefix or folder: by default one this suite wrote for
      a ResNet of the backbone's depth (its `model/params/...` and
      `model/state/...` entries; the classifier and the fourth stage are not
      read; a deeper ResNet's is refused).
    name_map: backbone variable name (`resnet/stem/conv/kernel`) -> the
      checkpoint's name, for checkpoints of another source.
    depth_binding: the gin binding of the backbone's depth, for the error.

  Returns:
    The number of variables loaded.
  """
  backbone = model.backbone
  params, state = backbone.params, backbone.state
  depth = backbone.depth
  refuse = None
  if name_map is None:
    name_map = _suite_name_map(state)
    # A deeper ResNet's names include a shallower one's: its first blocks
    # would load without a word.
    past = tuple(suite_checkpoint_path(f'resnet/stage{s + 1}/block{n}/', c)
                 for s, n in enumerate(resnet_lib.STAGE_BLOCKS[depth][:3])
                 for c in ('params', 'state'))
    refuse = lambda key: (
        f'a deeper ResNet than the backbone, a ResNet-{depth}: set '
        f'{depth_binding} to the depth it was trained at.'
        if key.startswith(past) else None)
  return named_checkpoint.load_named_variables(
      {**params, **state}, path, name_map=name_map,
      what=f'a ResNet-{depth} checkpoint of this suite',
      flag='BACKBONE_CHECKPOINT', refuse=refuse,
      fix_shapes=f'The backbone is a ResNet-{depth} of width_multiplier '
      f'{model.width_multiplier}: train the ResNet with the same depth and '
      'width.')


def load_mobilenet(backbone, path: str) -> int:
  """Initialises a MobileNet-v1 backbone (models/common/mobilenet.py, without
  its classifier) from a checkpoint this suite wrote for a MobileNet-v1 of the
  same width (gin/mobilenet_quickstart.gin's, say); returns the variables
  loaded."""
  return named_checkpoint.load_named_variables(
      {**backbone.params, **backbone.state}, path,
      name_map=_suite_name_map(backbone.state),
      what='a MobileNet-v1 checkpoint of this suite',
      flag='BACKBONE_CHECKPOINT',
      fix_shapes='Train the MobileNet-v1 with the same width_multiplier and '
      'min_depth as the SSD backbone.')


def load_model(model, path: str, *, what: str, flag: str) -> int:
  """Initialises every variable of `model` (its `params` and `state`) from
  a checkpoint this suite wrote for the same model (a fine-tune's start);
  returns the variables loaded.

  Args:
    model: has `params` and `state` (models/ssd/model.py's SSD, say).
    path: a checkpoint prefix or folder of a run of this suite.
    what: the model, for the messages ('an SSD-MobileNet-v1').
    flag: the setting that named `path` (INIT_CHECKPOINT).
  """
  return named_checkpoint.load_named_variables(
      {**model.params, **model.state}, path,
      name_map=_suite_name_map(model.state),
      what=f'a checkpoint of this suite for {what}', flag=flag,
      fix_shapes='Start from a run of the same model file and sizes '
      '(WIDTH, image size, classes).')
