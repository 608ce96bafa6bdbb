"""Gin values of the wrong type are named (binding, macro, expected type)
before anything runs; every experiment's own values pass the check; gin
files are found by name from any folder, and a missing one is one line."""

import os

import gin
import pytest

from core import config as gin_config


@pytest.fixture(autouse=True)
def fresh_gin():
  gin.clear_config()
  yield
  gin.clear_config()


@pytest.mark.parametrize('binding,message', [
    ("GLOBAL_BATCH_SIZE = 'abc'",
     "Gin binding training.controller.RunSchedule.global_batch_size (set "
     "through the macro GLOBAL_BATCH_SIZE) is 'abc', a str; it must be int."),
    ('training.controller.RunSchedule.steps_per_loop = 2.5',
     'RunSchedule.steps_per_loop is 2.5, a float; it must be int.'),
    ('models.common.resnet.ResNet.depth = True',
     'ResNet.depth is True, a bool; it must be int.'),
    ('STOP_AT_TARGET = 1', 'stop_at_target (set through the macro '
     'STOP_AT_TARGET) is 1, an int; it must be bool.'),
])
def test_a_value_of_the_wrong_type_names_its_binding(binding, message):
  with pytest.raises(ValueError) as e:
    gin_config.parse(['gin/resnet_quickstart.gin'], [binding])
  assert message in str(e.value)


def test_ints_for_floats_pass():
  gin_config.parse(['gin/resnet_quickstart.gin'], [
      'training.schedules.PolynomialWarmup.base = 3',
      'TRAIN_EPOCHS = 2'])
  assert gin.query_parameter('%TRAIN_EPOCHS') == 2


@pytest.mark.parametrize('binding,message', [
    ('TRAIN_STEP = 30', 'Gin macro TRAIN_STEP is set but no binding reads it, '
     'so it would change nothing: did you mean TRAIN_STEPS?'),
    ('INIT_CHECKPOINT = "x"', 'Gin macro INIT_CHECKPOINT is set but no '
     'binding reads it'),
    ('ZZZ_QQQ = 1', 'Gin macro ZZZ_QQQ is set but no binding reads it, so it '
     'would change nothing: see the macro table'),
])
def test_a_macro_nothing_reads_is_refused_naming_the_nearest(binding,
                                                              message):
  with pytest.raises(ValueError) as e:
    gin_config.parse(['gin/resnet_quickstart.gin'], [binding])
  assert message in str(e.value)


def test_the_macros_a_model_reads_pass():
  gin_config.parse(['gin/bert_quickstart.gin'], ["INIT_CHECKPOINT = ''"])
  assert gin.query_parameter('%INIT_CHECKPOINT') == ''


def test_a_misspelt_macro_stops_train_py_before_compute(tmp_path):
  import subprocess  # pylint: disable=import-outside-toplevel
  from tests import helpers  # pylint: disable=import-outside-toplevel
  done = subprocess.run(
      [helpers.PYTHON, 'train.py', '--gin_file=gin/resnet_quickstart.gin',
       f'--model_dir={tmp_path}/run', '--gin.TRAIN_STEP=30'],
      cwd=helpers.ROOT, capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS)
  assert done.returncode == 2, done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1] == (
      'error: Gin macro TRAIN_STEP is set but no binding reads it, so it '
      'would change nothing: did you mean TRAIN_STEPS?')
  assert not (tmp_path / 'run' / 'mlperf.log').exists()


def test_a_binding_that_replaces_a_macros_reader_is_no_typo():
  # The command line binds the parameter TRAIN_STEPS fed: TRAIN_STEPS is
  # unread now, but known to the files, so not refused.
  gin_config.parse(['gin/resnet_quickstart.gin'], [
      'training.controller.RunSchedule.train_steps = 4'])
  assert gin.query_parameter('training.controller.RunSchedule.train_steps') == 4


def test_a_new_macro_read_by_another_command_line_binding_passes():
  gin_config.parse(['gin/resnet_quickstart.gin'], [
      'MY_STEPS = 6', 'training.controller.RunSchedule.train_steps = %MY_STEPS'])


def test_gin_config_text_reads_without_module_aliases():
  gin_config.parse(['gin/resnet_quickstart.gin'], [])
  text = gin.config_str()
  assert ' as training' in text  # gin's own text aliases modules...
  readable = gin_config.readable(text)
  assert ' as ' not in ''.join(l for l in readable.splitlines()
                               if l.startswith('import '))
  assert 'distribution.gradients.GradientOptions' in readable
  gin.clear_config()
  gin.parse_config(readable)  # ...ours parses the same.
  assert gin.query_parameter('%DEPTH') == 18


def test_tools_reusing_a_training_command_accept_its_hardware_macros():
  # The export parses the model's files without the hardware file that
  # reads CPU_REPLICAS: known to the repository's gin files, so accepted...
  gin_config.parse(['gin/resnet_quickstart.gin'], ['CPU_REPLICAS = 2'],
                   unread_macros='known')
  gin.clear_config()
  # ...where training refuses it, and a typo stays a typo for the tools.
  with pytest.raises(ValueError, match='CPU_REPLICAS is set but no binding'):
    gin_config.parse(['gin/resnet_quickstart.gin'], ['CPU_REPLICAS = 2'])
  gin.clear_config()
  with pytest.raises(ValueError, match='TRAIN_STEP is set'):
    gin_config.parse(['gin/resnet_quickstart.gin'], ['TRAIN_STEP = 2'],
                     unread_macros='known')


# -- Finding gin files by name (T5X's --gin_search_paths) ---------------------


@pytest.mark.parametrize('name,found', [
    ('bert_pod.gin', 'gin/bert_pod.gin'),
    ('gin/bert_pod.gin', 'gin/bert_pod.gin'),
    ('hardware/tpu.gin', 'gin/hardware/tpu.gin'),
    ('tpu.gin', 'gin/hardware/tpu.gin'),        # A subfolder's, by its name.
    ('models/ssd.gin', 'gin/models/ssd.gin'),
])
def test_gin_files_are_found_by_name_from_any_folder(name, found, tmp_path,
                                                     monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert gin_config.resolve_gin_file(name) == found


def test_a_file_in_the_working_directory_or_a_search_path_comes_first(
    tmp_path, monkeypatch):
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'bert_pod.gin').write_text("include 'base.gin'\n")
  (mine / 'base.gin').write_text('TRAIN_STEPS = 3\n')
  monkeypatch.chdir(tmp_path)
  assert gin_config.resolve_gin_file('mine/bert_pod.gin') == str(
      mine / 'bert_pod.gin')
  found = gin_config.resolve_gin_files(['bert_pod.gin'], [str(mine)])
  assert found == [str(mine / 'bert_pod.gin')]
  gin.parse_config_files_and_bindings(found, [])  # Its include: from mine/.
  assert gin.query_parameter('%TRAIN_STEPS') == 3


@pytest.mark.parametrize('name,nearest', [
    ('bert_pd.gin', 'nearest: gin/bert_pod.gin, gin/models/bert.gin.'),
    ('resnet_quickstar.gin', 'nearest: gin/resnet_quickstart.gin'),
    ('gin/hardware/tpu_v3_23.gin', 'nearest: gin/hardware/tpu_v3_32.gin'),
])
def test_a_gin_file_not_found_is_one_line_naming_the_nearest(name, nearest):
  with pytest.raises(ValueError) as e:
    gin_config.resolve_gin_file(name)
  message = str(e.value)
  assert message.startswith(f'--gin_file={name}: no such file in the working '
                            "directory, the repository's gin/ and its "
                            'subfolders; ')
  assert nearest in message and '\n' not in message


@pytest.mark.slow  # Three train.py processes (about 18 s).
def test_the_design_card_command_resolves_and_stops_at_the_no_tpu_line(
    tmp_path):
  """`python train.py --gin_file=bert_pod.gin`, verbatim, from the
  repository and from another folder: the file is found, the run stops in
  one line because this machine has no TPU (exit 4), before asking for
  DATA_DIR, with nothing left behind and none of gin's lookup noise."""
  import subprocess  # pylint: disable=import-outside-toplevel
  from core import exit_codes  # pylint: disable=import-outside-toplevel
  from tests import helpers  # pylint: disable=import-outside-toplevel
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  for cwd, train_py in ((helpers.ROOT, 'train.py'),
                        (str(elsewhere), f'{helpers.ROOT}/train.py')):
    env = {k: v for k, v in os.environ.items() if k != 'TPU_NAME'}
    done = subprocess.run(
        [helpers.PYTHON, train_py, '--gin_file=bert_pod.gin'], cwd=cwd,
        capture_output=True, text=True, timeout=helpers.HANG_SECONDS,
        env=dict(env, GCE_METADATA_HOST=f'127.0.0.1:{helpers.free_port()}'))
    assert done.returncode == exit_codes.NO_TPU, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(
        'error: this experiment trains on a TPU (its hardware file is a TPU '
        "one) and, without --tpu or $TPU_NAME, uses this VM's own: no TPU on "
        'this machine')
    assert done.stdout.startswith('model_dir: runs/bert_pod_')
    assert not os.path.exists(os.path.join(cwd, 'runs')) or not [
        d for d in os.listdir(os.path.join(cwd, 'runs'))
        if d.startswith('bert_pod_')]
  done = subprocess.run(
      [helpers.PYTHON, f'{helpers.ROOT}/train.py', '--gin_file=bert_pd.gin'],
      cwd=str(elsewhere), capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS)
  assert done.returncode == exit_codes.USER_ERROR
  assert done.stderr.strip() == (
      '''error: --gin_file=bert_pd.gin: no such file in the working '''
      '''directory, the repository's gin/ and its subfolders; nearest: '''
      '''gin/bert_pod.gin, gin/models/bert.gin. Add a folder with '''
      '''--gin_search_paths.''')
