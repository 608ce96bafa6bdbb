"""TFRecord validation: files that are not TFRecords, damaged records named
by file and record number (real files, real corruption)."""

import os

import pytest
import tensorflow as tf

from input_pipeline import records


def write_records(path, n=10, size=200):
  with tf.io.TFRecordWriter(str(path)) as w:
    for i in range(n):
      w.write(bytes([i]) * size)


def test_files_that_are_not_tfrecords_are_named_before_any_compute(tmp_path):
  good = tmp_path / 'train-00000-of-00002'
  write_records(good)
  text = tmp_path / 'train-notes.txt'
  text.write_text('shard list, written by hand\n' * 20)
  with pytest.raises(ValueError) as e:
    records.check_record_files([str(good), str(text)])
  message = str(e.value)
  assert message.startswith(f'Not TFRecord files: {text} (')
  assert str(good) not in message and 'narrow the file pattern' in message
  records.check_record_files([str(good)])
  empty = tmp_path / 'train-empty'
  empty.write_bytes(b'')
  records.check_record_files([str(empty)])  # No records is still a TFRecord.


@pytest.mark.parametrize('record', [0, 6, 9])
def test_a_damaged_record_is_named_by_file_and_number(tmp_path, record):
  files = [tmp_path / f'train-{i}' for i in range(3)]
  for f in files:
    write_records(f)
  # Each record is 8 (length) + 4 (crc) + 200 (data) + 4 (crc) bytes.
  offset = record * 216 + 12 + 100
  data = bytearray(files[1].read_bytes())
  data[offset] ^= 0xFF
  files[1].write_bytes(bytes(data))
  where = records.find_damaged_record([str(f) for f in files])
  assert where.startswith(f'{files[1]}, record {record}: ')
  assert 'corrupted record' in where.lower() or 'checksum' in where.lower()


def test_a_truncated_file_is_named_at_its_last_record(tmp_path):
  path = tmp_path / 'train-0'
  write_records(path)
  os.truncate(path, 216 * 7 + 50)
  assert records.find_damaged_record([str(path)]).startswith(
      f'{path}, record 7: ')
  assert records.find_damaged_record([str(tmp_path / 'train-0')[:-1] + '0']
                                     ) is not None


def test_data_loss_errors_are_explained_others_are_not(tmp_path):
  path = tmp_path / 'train-0'
  write_records(path, n=3)
  data = bytearray(path.read_bytes())
  data[216 + 20] ^= 0xFF
  path.write_bytes(bytes(data))
  with pytest.raises(tf.errors.DataLossError) as e:
    records.count_records([str(path)])
  message = records.explain_data_loss(e.value, [str(tmp_path / 'train-*')])
  assert message.startswith(
      f'Damaged TFRecord data: {path}, record 1: the record at byte 228 '
      'fails its checksum (the bytes were changed). Rebuild or replace')
  assert 'function_node' not in message and '[Op:' not in message
  assert records.explain_data_loss(ValueError('x'), [str(path)]) is None


@pytest.mark.parametrize('damage, cause', [
    (lambda d: d[:300], 'record 1: the file ends inside the record at byte '
     '216 (truncated)'),
    (lambda d: bytes([d[0], d[1], d[2], d[3] ^ 0xFF]) + d[4:],
     'record 0: not a TFRecord file (no valid record header at byte 0)'),
])
def test_damage_is_named_in_our_words(tmp_path, damage, cause):
  path = tmp_path / 'train-0'
  write_records(path, n=3)
  path.write_bytes(damage(path.read_bytes()))
  assert records.find_damaged_record([str(path)]) == f'{path}, {cause}'
