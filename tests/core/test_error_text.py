"""core/error_text.py on TensorFlow's real error messages."""

import pytest
import tensorflow as tf

from core import error_text


def test_tensorflows_decorations_go_the_cause_stays():
  dataset = tf.data.TFRecordDataset(['/nonexistent/file-0'])
  with pytest.raises(tf.errors.NotFoundError) as e:
    next(iter(dataset))
  assert '[Op:' in str(e.value) or 'function_node' in str(e.value)
  line = error_text.one_line(e.value)
  assert '/nonexistent/file-0' in line
  assert '[Op:' not in line and 'function_node' not in line


def test_a_long_line_is_cut_at_a_word():
  line = error_text.one_line(ValueError('word ' * 100), limit=42)
  assert line.endswith('word ...') and len(line) <= 46
  assert error_text.one_line(ValueError('')) == 'ValueError'
