"""core/startup.py: TensorFlow imported without Keras, which still
loads on demand, and without its native start-up noise unless asked."""

import os
import re
import subprocess

import pytest

from core import startup
from tests import helpers

PROGRAM = """
import sys
from core import startup
tf = startup.import_tensorflow()
assert tf is sys.modules['tensorflow']
assert startup.import_tensorflow() is tf  # Again: a no-op.
held_back = [m for m in sys.modules if m.split('.')[0] in ('keras', 'sklearn')]
print('held back' if not held_back else f'loaded {held_back[:3]}')
print(float(tf.reduce_sum(tf.ones([3]))))
# Keras loads the moment something asks for it, in all three forms.
from tensorflow.keras import layers
print(type(layers.Dense(2)(tf.ones([1, 3]))).__name__)
print(tf.keras.layers.Dense is layers.Dense)
import tensorflow_text as text
print(text.FastWordpieceTokenizer(
    vocab=['a', '##b', '[UNK]'], suffix_indicator='##', token_out_type='int64',
    unknown_token='[UNK]', no_pretokenization=True).tokenize(
        tf.constant(['ab'])).to_list())
import warnings
warnings.warn('a warning of ours')
print('an error line of ours', file=sys.stderr)
"""
NATIVE_LINE = re.compile(r'^[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] ', re.M)


@pytest.mark.slow  # A process of its own: a fresh interpreter, about 12 s.
def test_tensorflow_imports_without_keras_which_loads_on_demand():
  done = subprocess.run([helpers.PYTHON, '-c', PROGRAM], cwd=helpers.ROOT,
                        capture_output=True, text=True, timeout=helpers.HANG_SECONDS)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.split('\n')[:5] == [
      'held back', '3.0', 'EagerTensor', 'True', '[[0, 1]]'], done.stdout
  # Quiet by default: no native INFO/WARNING line, no absl banner, no cuInit
  # error; our own warning and error lines still print.
  assert not NATIVE_LINE.search(done.stderr), done.stderr
  assert 'absl::InitializeLog' not in done.stderr, done.stderr
  assert 'UserWarning: a warning of ours' in done.stderr
  assert 'an error line of ours' in done.stderr
  # MLPERF_VERBOSE=1 brings TensorFlow's native lines back.
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  loud = subprocess.run(
      [helpers.PYTHON, '-c', 'from core import startup\n'
       'startup.import_tensorflow().constant(1)'], cwd=helpers.ROOT,
      capture_output=True, text=True, timeout=helpers.HANG_SECONDS,
      env=dict(env, MLPERF_VERBOSE='1'))
  assert loud.returncode == 0, loud.stderr[-3000:]
  assert NATIVE_LINE.search(loud.stderr), loud.stderr


def test_start_up_noise_is_only_native_info_and_the_cuda_probe():
  assert startup.start_up_noise(
      'I0000 00:00:1796283273.531446    2666 port.cc:153] oneDNN custom '
      'operations are on.\n')
  assert startup.start_up_noise(
      'E0000 00:00:1796283278.517103    2666 cuda_platform.cc:52] failed call '
      'to cuInit: INTERNAL: CUDA error\n')
  assert startup.start_up_noise('WARNING: All log messages before '
                                'absl::InitializeLog() is called are written '
                                'to STDERR\n')
  # Errors from anything but the CUDA probe, and Python's lines, stay.
  assert not startup.start_up_noise(
      'E0000 00:00:1796283278.517103    2666 env.cc:10] could not open '
      'file\n')
  assert not startup.start_up_noise('WARNING:absl:something of ours\n')
  assert not startup.start_up_noise('Traceback (most recent call last):\n')


@pytest.mark.parametrize('argv, environ, expected', [
    (['train.py'], {}, False),
    (['train.py', '--verbose'], {}, True),
    (['train.py', '--verbose=true'], {}, True),
    (['train.py', '--noverbose'], {}, False),
    (['train.py'], {'MLPERF_VERBOSE': '1'}, True),
])
def test_verbose_is_the_flag_or_the_variable(argv, environ, expected):
  assert startup.verbose(argv, environ) is expected


def test_tensorflows_python_info_lines_are_dropped_ours_kept():
  import logging  # pylint: disable=import-outside-toplevel
  tf_file = os.path.join(os.path.dirname(startup.import_tensorflow().__file__),
                         'python', 'checkpoint', 'functional_saver.py')
  def record(path, level):
    return logging.LogRecord('absl', level, path, 440, 'msg', (), None)
  # pylint: disable=protected-access
  assert not startup._drop_tensorflow_info(record(tf_file, logging.INFO))
  assert startup._drop_tensorflow_info(record(tf_file, logging.WARNING))
  assert startup._drop_tensorflow_info(record(__file__, logging.INFO))
  # The filter is on absl's logger in this (quiet) process.
  assert startup._drop_tensorflow_info in logging.getLogger('absl').filters
