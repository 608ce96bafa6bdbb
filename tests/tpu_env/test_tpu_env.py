"""A TPU VM's Python environment, built here as the launcher builds it
(tools/tpu_venv.py), and run: `make tpu_check`, CI's second step.

TPU_VENV names the venv (`make tpu_venv` builds .venv-tpu); without it this
folder is not collected (tests/conftest.py). tensorflow-tpu installs on an
x86 CPU and, with TPU_LOAD_LIBRARY=0, runs TensorFlow's CPU kernels: each
model's quickstart trains a few steps under the TPU build through train.py's
command line, with the data the main environment built.
"""

import os
import subprocess
import sys

from tests import helpers
from tools import tpu_venv

VENV = os.environ.get('TPU_VENV', '')
if not VENV:
  raise RuntimeError('Set TPU_VENV to the TPU environment (make tpu_check).')
PYTHON = tpu_venv.venv_python(VENV)


def test_the_environment_passes_its_check():
  """tensorflow-tpu is the only TensorFlow, the pinned libtpu loads at
  `import tensorflow` without aborting, every module of the suite imports."""
  done = subprocess.run(
      [sys.executable, 'tools/tpu_venv.py', f'--venv={VENV}', '--check_only'],
      cwd=helpers.ROOT, capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS)
  assert done.returncode == 0, done.stderr[-3000:]
  assert 'import tensorflow 2.20.0 with libtpu loaded: ok' in done.stdout
  found = tpu_venv.installed(PYTHON)
  assert found['tensorflow-tpu'] == '2.20.0'
  assert not set(tpu_venv.OTHER_TENSORFLOWS) & set(found)


def train(gin_file, model_dir, bindings):
  """`python train.py` in the TPU environment, TensorFlow's CPU kernels."""
  args = [f'--gin_param={k} = {v}' for k, v in bindings.items()]
  return subprocess.run(
      [PYTHON, 'train.py', f'--gin_file={gin_file}',
       f'--model_dir={model_dir}', *args],
      cwd=helpers.ROOT, capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, TPU_LOAD_LIBRARY='0', PYTHONPATH=helpers.ROOT))


def assert_trained(done, model_dir, steps):
  assert done.returncode in (0, 1), (done.stdout + done.stderr)[-3000:]
  with open(os.path.join(model_dir, 'mlperf.log')) as f:
    log = f.read()
  assert '"key": "run_stop"' in log
  assert f'eval at step {steps}' in done.stdout


SHORT = {'STEPS_PER_LOOP': 2, 'EVAL_EVERY_STEPS': 4, 'TRAIN_STEPS': 4,
         'CHECKPOINT_EVERY_STEPS': 0}


def without_model_dir(bindings: list[str]) -> dict:
  """The tests' binding lists as a dict, model_dir left to --model_dir."""
  found = dict(b.split(' = ', 1) for b in bindings)
  del found['train.train.model_dir']
  return found


def test_resnet_quickstart_trains_under_the_tpu_build(quickstart_data,
                                                      tmp_path):
  model_dir = str(tmp_path / 'resnet')
  done = train('resnet_quickstart.gin', model_dir, without_model_dir(
      helpers.quick_bindings(quickstart_data, model_dir)))
  assert_trained(done, model_dir, 4)


def test_mobilenet_quickstart_trains_under_the_tpu_build(quickstart_data,
                                                         tmp_path):
  model_dir = str(tmp_path / 'mobilenet')
  bindings = without_model_dir(helpers.quick_bindings(quickstart_data,
                                                      model_dir))
  del bindings['DEPTH']  # A ResNet's.
  done = train('mobilenet_quickstart.gin', model_dir, bindings)
  assert_trained(done, model_dir, 4)


def test_bert_quickstart_trains_under_the_tpu_build(sums_data, tmp_path):
  model_dir = str(tmp_path / 'bert')
  done = train('bert_quickstart.gin', model_dir, without_model_dir(
      helpers.sums_bindings(sums_data, model_dir, FIRST_EVAL_STEP=4,
                            **SHORT)))
  assert_trained(done, model_dir, 4)


def test_transformer_quickstart_trains_under_the_tpu_build(translation_data,
                                                           tmp_path):
  data_dir, _ = translation_data
  model_dir = str(tmp_path / 'transformer')
  done = train('transformer_quickstart.gin', model_dir, {
      'DATA_DIR': repr(data_dir), 'BEAM_SIZE': 2,
      'models.transformer.task.TransformerTask.extra_decode_length': 2,
      **SHORT})
  assert_trained(done, model_dir, 4)


def test_ssd_quickstart_trains_under_the_tpu_build(ssd_data, tmp_path):
  model_dir = str(tmp_path / 'ssd')
  done = train('ssd_quickstart.gin', model_dir, {
      'DATA_DIR': repr(ssd_data), 'NUM_TRAIN_EXAMPLES': 40,
      'GLOBAL_BATCH_SIZE': 8, 'EVAL_BATCH_SIZE': 8,
      'models.ssd.features.ResNetFeatures.depth': 10, **SHORT})
  assert_trained(done, model_dir, 4)


def test_dlrm_quickstart_trains_under_the_tpu_build(dlrm_data, tmp_path):
  model_dir = str(tmp_path / 'dlrm')
  done = train('dlrm_quickstart.gin', model_dir, {
      'DATA_DIR': repr(dlrm_data), 'WARMUP_STEPS': 2, 'DECAY_START_STEP': 2,
      'DECAY_STEPS': 2, **SHORT})
  assert_trained(done, model_dir, 4)


def test_gnmt_quickstart_trains_under_the_tpu_build(gnmt_data, tmp_path):
  data_dir, _ = gnmt_data
  model_dir = str(tmp_path / 'gnmt')
  done = train('gnmt_quickstart.gin', model_dir, {
      'DATA_DIR': repr(data_dir), 'UNITS': 32, 'BEAM_SIZE': 2,
      'MAX_DECODE_LENGTH': 4, 'WARMUP_STEPS': 2, 'DECAY_START_STEP': 2,
      **SHORT})
  assert_trained(done, model_dir, 4)


def test_maskrcnn_quickstart_trains_under_the_tpu_build(tmp_path):
  from tests.input_pipeline import test_maskrcnn_input as records
  data_dir, _ = records.build(tmp_path / 'data')
  model_dir = str(tmp_path / 'maskrcnn')
  done = train('maskrcnn_quickstart.gin', model_dir, {
      'DATA_DIR': repr(data_dir), 'NUM_TRAIN_EXAMPLES': 6,
      'GLOBAL_BATCH_SIZE': 2, 'EVAL_BATCH_SIZE': 2, 'DEPTH': 10,
      'input_pipeline.maskrcnn.Geometry.image_size': (64, 128),
      'input_pipeline.maskrcnn.Geometry.short_side': 60,
      'input_pipeline.maskrcnn.Geometry.long_side_max': 120,
      'input_pipeline.maskrcnn.Geometry.gt_mask_size': 12,
      'input_pipeline.maskrcnn.Geometry.max_instances': 4, **SHORT})
  assert_trained(done, model_dir, 4)


def test_minigo_quickstart_trains_under_the_tpu_build(tmp_path):
  # Self-play's searches in host processes spawned from the TPU build's
  # Python, their leaves evaluated by the training process (the default
  # SELFPLAY_INFERENCE = 'device'); the games against the target
  # (OpenSpiel's MCTS, from requirements-tpu.txt) in NumPy in host
  # processes; training on the device.
  model_dir = str(tmp_path / 'minigo')
  done = train('minigo_quickstart.gin', model_dir, {
      'BOARD_SIZE': 5, 'TRUNK_LAYERS': 1, 'CONV_WIDTH': 8, 'FC_WIDTH': 8,
      'GAMES_PER_GENERATION': 4, 'NUM_READOUTS': 4, 'CONCURRENT_GAMES': 2,
      'STEPS_PER_GENERATION': 4, 'STEPS_PER_LOOP': 2, 'TRAIN_EPOCHS': 1,
      'GLOBAL_BATCH_SIZE': 8, 'EVAL_GAMES': 2, 'EVAL_READOUTS': 4,
      'TARGET_SIMULATIONS': 2, 'EVAL_EVERY_STEPS': 4})
  assert_trained(done, model_dir, 4)
  assert os.path.exists(os.path.join(model_dir, 'generations', '000000',
                                     'done-w0.json'))
