"""benchmarks/versus_mlcommons.py's own parts (the run itself needs a
checkout of mlcommons/inference and its venv: docs/benchmarks.md has its
figures): the shared images as both harnesses read them, and the one-line
refusals when the peer is missing."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import versus_mlcommons
from tests import helpers


def test_images_are_written_as_the_reference_and_ours_read_them(tmp_path):
  from PIL import Image
  from tools import convert_image_folder
  folder = str(tmp_path / 'images')
  versus_mlcommons.write_images(folder, 6)
  lines = open(os.path.join(folder, 'val_map.txt')).read().splitlines()
  assert len(lines) == 6
  shapes = set()
  for line in lines:
    # r0.5's imagenet.py: re.split(r"\s+", line.strip()) -> name, label.
    name, label = re.split(r'\s+', line.strip())
    assert label == str(int(name.startswith('class1')))
    with Image.open(os.path.join(folder, name)) as image:
      assert image.format == 'JPEG' and image.mode == 'RGB'
      assert all(256 <= side <= 427 for side in image.size)
      shapes.add(image.size)
      assert np.asarray(image).std() > 10  # A photograph, not a blank.
  assert len(shapes) > 1  # Crops of many sizes.
  os.remove(os.path.join(folder, 'val_map.txt'))
  done = convert_image_folder.convert(
      input_dir=folder, output_prefix=str(tmp_path / 'data' / 'validation'),
      num_shards=2)
  assert done.examples == 6 and not done.skipped


def test_a_missing_checkout_or_venv_is_one_line_naming_the_fix(tmp_path):
  with pytest.raises(FileNotFoundError, match='checkout of mlcommons/'
                     'inference at branch r0.5'):
    versus_mlcommons.check_peer(str(tmp_path), sys.executable)
  main = tmp_path / versus_mlcommons.MAIN
  main.parent.mkdir(parents=True)
  main.write_text('')
  (tmp_path / versus_mlcommons.CONF).write_text('')
  with pytest.raises(FileNotFoundError, match='make mlcommons_venv'):
    versus_mlcommons.check_peer(str(tmp_path), str(tmp_path / 'no_python'))
  # This venv's LoadGen is today's, not r0.5's 0.5.
  with pytest.raises(ValueError, match=r'is not ready .*mlperf_loadgen is '
                     r'not LoadGen 0.5\): run `make mlcommons_venv'):
    versus_mlcommons.check_peer(str(tmp_path), sys.executable)
  done = subprocess.run(
      [sys.executable, '-m', 'benchmarks.versus_mlcommons',
       f'--reference_dir={tmp_path / "nothing"}'], cwd=helpers.ROOT,
      capture_output=True, text=True)
  assert done.returncode == 2 and 'Traceback' not in done.stderr
  assert [l for l in done.stderr.splitlines() if l.startswith('error:')] \
      == [l for l in done.stderr.splitlines() if l.strip()][-1:]
