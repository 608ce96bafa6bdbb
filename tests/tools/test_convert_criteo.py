"""tools.convert_criteo: Criteo TSV lines to click records as Google's v0.7
preprocessing, and bad lines named by file and line."""

import gzip
import math
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import clicks
from tests import helpers
from tools import convert_criteo


def line(label, counts, cats):
  return '\t'.join([str(label), *[str(c) for c in counts], *cats]) + '\n'


def lines(n, seed):
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    counts = [int(c) for c in rng.integers(-2, 50, 13)]
    counts[3] = ''  # Empty counts and categories happen.
    cats = [f'{int(v):08x}' for v in rng.choice([7, 0xabcdef01, 42, 9], 26)]
    cats[5] = ''
    out.append(line(int(rng.integers(0, 2)), counts, cats))
  return out


def read_records(data_dir, name):
  meta = clicks.read_metadata(data_dir)
  spec = clicks.features(13, 26)
  files = sorted(tf.io.gfile.glob(os.path.join(data_dir, f'{name}-*')))
  rows = [tf.io.parse_single_example(r, spec)
          for r in tf.data.TFRecordDataset(files)]
  return meta, files, rows


def test_frequency_vocabularies_and_log_counts_as_googles(tmp_path):
  train, held = lines(30, 0), lines(10, 1)
  (tmp_path / 'day_0.gz').write_bytes(gzip.compress(''.join(train).encode()))
  (tmp_path / 'eval.tsv').write_text(''.join(held))
  out = str(tmp_path / 'out')
  convert_criteo.convert(train_files=[str(tmp_path / 'day_0.gz')],
                         eval_files=[str(tmp_path / 'eval.tsv')],
                         output_dir=out, train_shards=3, eval_shards=2)
  meta, files, rows = read_records(out, 'train')
  assert len(files) == 3 and meta['train_examples'] == 30
  assert meta['eval_examples'] == 10 and meta['vocabulary'] == 'frequency'
  # Shards take lines in turn: the first shard holds lines 0, 3, 6, ...
  first = [tf.io.parse_single_example(r, clicks.features(13, 26))
           for r in tf.data.TFRecordDataset(files[0])]
  parsed = [convert_criteo.parse_line(l, 'x') for l in train]
  assert [int(r['label'][0]) for r in first] == [p[0] for p in parsed[::3]]
  # Counts: empty is 0, negative is 0, then log(x + 1), as NegsToZeroLog.
  fields = train[0].rstrip('\n').split('\t')
  want = [math.log(max(int(v or 0), 0) + 1) for v in fields[1:14]]
  np.testing.assert_allclose(first[0]['dense'].numpy(), want, rtol=1e-6)
  # Each feature's rows by frequency over train and eval lines, ties the
  # larger value first; an empty category is the value 0.
  for feature in (0, 5):
    values = [int(l.rstrip('\n').split('\t')[14 + feature] or '0', 16)
              % convert_criteo.MAX_IND_RANGE for l in train + held]
    counts = {v: values.count(v) for v in set(values)}
    order = sorted(counts, key=lambda v: (counts[v], v), reverse=True)
    assert meta['vocab_sizes'][feature] == len(order)
    assert int(first[0]['sparse'][feature]) == order.index(values[0])


def test_hash_vocabulary_takes_values_mod_the_table_sizes(tmp_path):
  (tmp_path / 'a.tsv').write_text(''.join(lines(8, 2)))
  out = str(tmp_path / 'out')
  convert_criteo.convert(train_files=[str(tmp_path / 'a.tsv')],
                         eval_files=[str(tmp_path / 'a.tsv')],
                         output_dir=out, vocab='hash',
                         sizes=convert_criteo.table_sizes('5'),
                         train_shards=1, eval_shards=1)
  meta, _, rows = read_records(out, 'train')
  assert meta['vocab_sizes'] == [5] * 26
  cats = lines(8, 2)[0].rstrip('\n').split('\t')[14:]
  assert rows[0]['sparse'].numpy().tolist() == [
      int(c or '0', 16) % 40_000_000 % 5 for c in cats]
  with pytest.raises(ValueError, match='26 positive sizes'):
    convert_criteo.table_sizes('3,4')


@pytest.mark.parametrize('bad, message', [
    (line(1, [1] * 13, ['00ab'] * 25), r'bad.tsv line 3: 39 fields'),
    (line(1, [1] * 12 + ['x2'], ['00ab'] * 26),
     r"line 3: int-feature-13 is 'x2', not an integer count"),
    (line(1, [1] * 13, ['00ab'] * 25 + ['zz']),
     r"line 3: categorical-feature-39 is 'zz', not hexadecimal"),
    (line(2, [1] * 13, ['00ab'] * 26), r"line 3: the label is '2'"),
])
def test_bad_lines_are_named_and_nothing_is_written(tmp_path, bad, message):
  good = lines(2, 3)
  (tmp_path / 'bad.tsv').write_text(''.join(good) + bad + good[0])
  out = tmp_path / 'out'
  out.mkdir()
  with pytest.raises(convert_criteo.BadLine, match=message):
    convert_criteo.convert(train_files=[str(tmp_path / 'bad.tsv')],
                           eval_files=[str(tmp_path / 'bad.tsv')],
                           output_dir=str(out))
  assert os.listdir(out) == []
  # Skipped and counted instead: every pass meets it, it counts once a file
  # it is read from (train and eval here).
  meta = convert_criteo.convert(
      train_files=[str(tmp_path / 'bad.tsv')],
      eval_files=[str(tmp_path / 'bad.tsv')], output_dir=str(out),
      on_bad_line='skip', train_shards=1, eval_shards=1)
  assert meta['train_examples'] == 3 and meta['skipped_lines'] == 2
  assert 'bad.tsv line 3' in meta['first_skipped']


def test_command_line_errors_are_one_line(tmp_path):
  (tmp_path / 'empty.tsv').write_text('')
  run = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.convert_criteo',
       f'--input={tmp_path}/empty.tsv', f'--eval_input={tmp_path}/empty.tsv',
       f'--output_dir={tmp_path}/out'], capture_output=True, text=True,
      cwd=helpers.ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert run.returncode == 2  # Bad input (core/exit_codes.py).
  assert run.stderr.strip().splitlines() == [
      f'error: {tmp_path}/empty.tsv is empty: no Criteo lines.']
  missing = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.convert_criteo', '--input=nowhere*.tsv',
       '--eval_input=x', f'--output_dir={tmp_path}/out'],
      capture_output=True, text=True, cwd=helpers.ROOT)
  assert missing.returncode == 2
  assert missing.stderr.strip().splitlines() == [
      "error: --input: no files match 'nowhere*.tsv'."]
