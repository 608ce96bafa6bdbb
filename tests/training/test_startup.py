"""training/startup.py: TensorFlow imported without Keras, which still
loads on demand."""

import subprocess

import pytest

from tests import helpers

PROGRAM = """
import sys
from training import startup
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
"""


@pytest.mark.slow  # A process of its own: a fresh interpreter, about 12 s.
def test_tensorflow_imports_without_keras_which_loads_on_demand():
  done = subprocess.run([helpers.PYTHON, '-c', PROGRAM], cwd=helpers.ROOT,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.split('\n')[:5] == [
      'held back', '3.0', 'EagerTensor', 'True', '[[0, 1]]'], done.stdout
