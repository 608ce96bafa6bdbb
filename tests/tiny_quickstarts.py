"""Each quickstart shrunk to a 4-step run on the tests' small data: the
bindings the TPU environment's tests (tests/tpu_env) and the notebooks'
(tests/test_notebook.py) train with.

`DATA[model]` names the conftest fixture that holds the model's data (its
folder, or a (folder, ...) pair); `bindings(model, data_dir)` the gin
bindings beside DATA_DIR (and VOCAB_FILE), model_dir left out.
"""

from tests import helpers

SHORT = {'STEPS_PER_LOOP': 2, 'EVAL_EVERY_STEPS': 4, 'TRAIN_STEPS': 4,
         'CHECKPOINT_EVERY_STEPS': 0}

DATA = {'resnet': 'quickstart_data', 'mobilenet': 'quickstart_data',
        'bert': 'sums_data', 'transformer': 'translation_data',
        'gnmt': 'gnmt_data', 'ssd': 'ssd_data', 'ssd_mobilenet': 'ssd_data',
        'maskrcnn': 'tiny_maskrcnn_data', 'dlrm': 'dlrm_data',
        'minigo': None}

_MASKRCNN_GEOMETRY = {
    'input_pipeline.maskrcnn.Geometry.image_size': (64, 128),
    'input_pipeline.maskrcnn.Geometry.short_side': 60,
    'input_pipeline.maskrcnn.Geometry.long_side_max': 120,
    'input_pipeline.maskrcnn.Geometry.gt_mask_size': 12,
    'input_pipeline.maskrcnn.Geometry.max_instances': 4}


def _resnet(data_dir):
  found = dict(b.split(' = ', 1) for b in helpers.quick_bindings(data_dir, ''))
  del found['train.train.model_dir'], found['DATA_DIR']
  return found


def _without(bindings: dict, *names) -> dict:
  return {k: v for k, v in bindings.items() if k not in names}


def _bert(data_dir):
  found = dict(b.split(' = ', 1) for b in helpers.sums_bindings(
      data_dir, '', FIRST_EVAL_STEP=4, **SHORT))
  return _without(found, 'train.train.model_dir', 'DATA_DIR', 'VOCAB_FILE')


TINY = {
    'resnet': _resnet,
    'mobilenet': lambda d: _without(_resnet(d), 'DEPTH'),  # A ResNet's.
    'bert': _bert,
    'transformer': lambda d: {
        'BEAM_SIZE': 2,
        'models.transformer.task.TransformerTask.extra_decode_length': 2,
        **SHORT},
    'gnmt': lambda d: {
        'UNITS': 32, 'BEAM_SIZE': 2, 'MAX_DECODE_LENGTH': 4,
        'WARMUP_STEPS': 2, 'DECAY_START_STEP': 2, **SHORT},
    'ssd': lambda d: {
        'NUM_TRAIN_EXAMPLES': 40, 'GLOBAL_BATCH_SIZE': 8,
        'EVAL_BATCH_SIZE': 8, 'models.ssd.features.ResNetFeatures.depth': 10,
        **SHORT},
    'ssd_mobilenet': lambda d: {
        'NUM_TRAIN_EXAMPLES': 40, 'GLOBAL_BATCH_SIZE': 8,
        'EVAL_BATCH_SIZE': 8, 'METRIC_PROCESSES': 0, **SHORT},
    'maskrcnn': lambda d: {
        'NUM_TRAIN_EXAMPLES': 6, 'GLOBAL_BATCH_SIZE': 2,
        'EVAL_BATCH_SIZE': 2, 'DEPTH': 10, **_MASKRCNN_GEOMETRY, **SHORT},
    'dlrm': lambda d: {
        'WARMUP_STEPS': 2, 'DECAY_START_STEP': 2, 'DECAY_STEPS': 2, **SHORT},
    'minigo': lambda d: {
        'BOARD_SIZE': 5, 'TRUNK_LAYERS': 1, 'CONV_WIDTH': 8, 'FC_WIDTH': 8,
        'GAMES_PER_GENERATION': 4, 'NUM_READOUTS': 4, 'CONCURRENT_GAMES': 2,
        'STEPS_PER_GENERATION': 4, 'STEPS_PER_LOOP': 2, 'TRAIN_EPOCHS': 1,
        'GLOBAL_BATCH_SIZE': 8, 'EVAL_GAMES': 2, 'EVAL_READOUTS': 4,
        'TARGET_SIMULATIONS': 2, 'EVAL_EVERY_STEPS': 4},
}


def data_dir(model: str, request) -> str:
  """The folder of the model's tests data ('' for MiniGo), from its
  fixture."""
  if not DATA[model]:
    return ''
  value = request.getfixturevalue(DATA[model])
  return value[0] if isinstance(value, (tuple, list)) else value


def bindings(model: str, data_dir_: str) -> dict:
  """{name: gin value text} for the model's 4-step run."""
  return {k: v if isinstance(v, str) else repr(v)
          for k, v in TINY[model](data_dir_).items()}
