"""The DLRM quickstart reads MovieLens-100k from the recbole wheel as a zip
file (make dlrm_data downloads it; recbole is never installed), the same
rows as from a folder, and a source without it is one line."""

import zipfile

import pytest

from tools import build_dlrm_quickstart_data as builder


def test_the_wheel_is_read_as_a_zip_with_movielens_100k(tmp_path):
  wheel = builder.movielens_source()
  assert wheel.endswith('recbole-1.2.1-py3-none-any.whl'), wheel
  folder = tmp_path / 'ml-100k'
  folder.mkdir()
  with zipfile.ZipFile(wheel) as z:
    for name in ('ml-100k.user', 'ml-100k.item', 'ml-100k.inter'):
      (folder / name).write_bytes(z.read(f'{builder.IN_WHEEL}/{name}'))
  assert len(builder._table(wheel, 'ml-100k.user')) == 943  # pylint: disable=protected-access
  assert len(builder._table(wheel, 'ml-100k.item')) == 1682  # pylint: disable=protected-access
  from_wheel = builder.impressions(wheel)
  assert from_wheel == builder.impressions(str(folder))
  # 100,000 ratings less the 27,145 threes.
  assert len(from_wheel['label']) == 72855


def test_a_source_without_movielens_is_one_line(tmp_path):
  empty = tmp_path / 'recbole-0.0-py3-none-any.whl'
  with zipfile.ZipFile(empty, 'w') as z:
    z.writestr('recbole/__init__.py', '')
  with pytest.raises(ValueError, match='holds no MovieLens-100k ml-100k.user'):
    builder.impressions(str(empty))
  with pytest.raises(FileNotFoundError, match='--movielens=/nope: no such'):
    builder.movielens_source('/nope')
