"""tools/build_translation_data.py: bad input named before anything is
written; filtered pairs counted."""

import json
import os
import subprocess

import pytest

from tests import helpers
from tools import build_translation_data as build_lib


def run_tool(*args):
  return subprocess.run(
      [helpers.PYTHON, '-m', 'tools.build_translation_data', *args],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))


def test_misaligned_files_name_both_counts_and_write_nothing(tmp_path):
  (tmp_path / 'a.en').write_text('one\ntwo\nthree\n')
  (tmp_path / 'a.de').write_text('eins\nzwei\n')
  out = tmp_path / 'out'
  result = run_tool(f'--output_dir={out}', f'--train_source={tmp_path}/a.en',
                    f'--train_target={tmp_path}/a.de',
                    f'--eval_source={tmp_path}/a.en',
                    f'--eval_target={tmp_path}/a.de')
  assert result.returncode == 2
  error = [l for l in result.stderr.splitlines() if l.startswith('error:')]
  assert len(error) == 1 and 'a.en has 3 lines but' in error[0]
  assert 'a.de has 2' in result.stderr
  assert not out.exists()


def test_non_utf8_bytes_name_the_file_and_line(tmp_path):
  (tmp_path / 'b.en').write_bytes(b'fine\nna\xefve caf\xe9\n')
  with pytest.raises(ValueError, match=r'b.en, line 2: byte 2 is not UTF-8'):
    build_lib.read_lines(str(tmp_path / 'b.en'))


def test_tsv_line_without_one_tab_is_named(tmp_path):
  (tmp_path / 'c.tsv').write_text('Save\tSichern\nCancel Abbrechen\n')
  with pytest.raises(ValueError, match=r'c.tsv, line 2: 0 tabs'):
    build_lib.read_tsv(str(tmp_path / 'c.tsv'))


def test_empty_and_over_long_pairs_are_left_out_and_counted(
    tmp_path, translation_data):
  vocab = os.path.join(translation_data[0], 'vocab.txt')
  train = [('Save', 'Sichern'), ('', 'leer'), ('Cancel', '  '),
           ('Delete ' * 30, 'Löschen ' * 30), ('Close', 'Schließen')] * 3
  metadata = build_lib.build(
      output_dir=str(tmp_path / 'd'), train_pairs=train,
      eval_pairs=[('Yes', 'Ja'), ('', ''), ('No', 'Nein')],
      vocab_file=vocab, max_length=16, packed_length=32, train_shards=2)
  assert metadata['train_pairs_empty'] == 6
  assert metadata['train_pairs_too_long'] == 3
  assert metadata['train_pairs'] == 6
  assert metadata['eval_pairs'] == 2 and metadata['eval_pairs_empty'] == 1
  written = json.loads((tmp_path / 'd' / 'metadata.json').read_text())
  assert written == metadata
  assert (tmp_path / 'd' / 'eval_references.txt').read_text() == 'Ja\nNein\n'
  assert sorted(os.listdir(tmp_path / 'd')) == [
      'eval-00000-of-00001', 'eval_references.txt', 'eval_sources.txt',
      'metadata.json', 'train-00000-of-00002', 'train-00001-of-00002',
      'vocab.txt']


def test_eval_sources_longer_than_eval_length_are_refused(
    tmp_path, translation_data):
  vocab = os.path.join(translation_data[0], 'vocab.txt')
  with pytest.raises(ValueError, match='more than --eval_length'):
    build_lib.build(output_dir=str(tmp_path / 'e'),
                    train_pairs=[('Save', 'Sichern')],
                    eval_pairs=[('Delete the selected objects', 'Löschen')],
                    vocab_file=vocab, eval_length=3)
  assert not (tmp_path / 'e').exists()
