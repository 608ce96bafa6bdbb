"""The class-folder converter: every image becomes an RGB JPEG, labels 1..N;
shards appear whole or not at all; unreadable images stop it or are skipped."""

import io
import os
import subprocess

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from core import staged_files
from tests import helpers
from tools import convert_image_folder


def encode(image: Image.Image, fmt: str) -> bytes:
  out = io.BytesIO()
  image.save(out, format=fmt)
  return out.getvalue()


@pytest.mark.parametrize('mode,fmt', [('RGB', 'PNG'), ('CMYK', 'JPEG'),
                                      ('L', 'JPEG'), ('L', 'PNG'),
                                      ('RGBA', 'PNG'), ('P', 'PNG')])
def test_non_rgb_jpeg_inputs_become_rgb_jpeg(mode, fmt):
  rng = np.random.default_rng(0)
  rgb = Image.fromarray(rng.integers(0, 255, (12, 10, 3), np.uint8), 'RGB')
  data = encode(rgb.convert(mode), fmt)
  jpeg, height, width = convert_image_folder.to_rgb_jpeg(data)
  decoded = tf.io.decode_jpeg(jpeg)  # TF's own decoder accepts it.
  assert decoded.shape == (12, 10, 3)
  assert (height, width) == (12, 10)
  assert Image.open(io.BytesIO(jpeg)).mode == 'RGB'


def test_rgb_jpeg_is_copied_byte_for_byte():
  data = encode(Image.new('RGB', (8, 8), (10, 20, 30)), 'JPEG')
  assert convert_image_folder.to_rgb_jpeg(data)[0] == data


def test_unreadable_file_error_names_it():
  with pytest.raises(ValueError, match='broken.jpg'):
    convert_image_folder.to_rgb_jpeg(b'not an image', 'cats/broken.jpg')


def test_convert_writes_tpu_schema_with_labels_from_one(tmp_path):
  for cls, color in (('ant', 'red'), ('bee', 'blue')):
    (tmp_path / 'in' / cls).mkdir(parents=True)
    for i in range(3):
      Image.new('L' if i else 'RGB', (9, 7), color if not i else 128).save(
          tmp_path / 'in' / cls / f'{i}.png')
  done = convert_image_folder.convert(input_dir=str(tmp_path / 'in'),
                                      output_prefix=str(tmp_path / 'out/tr'),
                                      num_shards=2)
  paths = done.paths
  assert done.examples == 6 and done.skipped == []
  assert [p.rsplit('/', 1)[1] for p in paths] == ['tr-00000-of-00002',
                                                 'tr-00001-of-00002']
  labels = {}
  for raw in tf.data.TFRecordDataset(paths):
    ex = tf.train.Example.FromString(raw.numpy()).features.feature
    synset = ex['image/class/synset'].bytes_list.value[0].decode()
    labels.setdefault(synset, set()).add(
        ex['image/class/label'].int64_list.value[0])
    assert tf.io.decode_jpeg(ex['image/encoded'].bytes_list.value[0]).shape[
        -1] == 3
  assert labels == {'ant': {1}, 'bee': {2}}


def image_folder(root, *, broken=()):
  """Two classes of four small JPEGs; `broken` names files to damage."""
  rng = np.random.default_rng(1)
  for cls in ('ant', 'bee'):
    (root / cls).mkdir(parents=True)
    for i in range(4):
      Image.fromarray(rng.integers(0, 255, (16, 16, 3), np.uint8)).save(
          root / cls / f'{i}.jpg', quality=90)
  for name in broken:
    data = (root / name).read_bytes()
    (root / name).write_bytes(data[:len(data) // 3])  # Truncated.
  return root


def count_records(paths):
  return sum(1 for _ in tf.data.TFRecordDataset(paths))


def test_a_failed_conversion_leaves_nothing_under_the_final_names(tmp_path):
  images = image_folder(tmp_path / 'in', broken=['bee/2.jpg'])
  out = tmp_path / 'out'
  out.mkdir()
  (out / 'tr-00000-of-00002').write_bytes(b'an earlier conversion')
  with pytest.raises(ValueError, match='bee/2.jpg.*--on_bad_image=skip'):
    convert_image_folder.convert(input_dir=str(images),
                                 output_prefix=str(out / 'tr'), num_shards=2,
                                 shuffle_seed=None)
  # No partial shard, no staging folder; the earlier file is untouched.
  assert os.listdir(out) == ['tr-00000-of-00002']
  assert (out / 'tr-00000-of-00002').read_bytes() == b'an earlier conversion'


def test_unreadable_images_can_be_skipped_and_listed(tmp_path):
  images = image_folder(tmp_path / 'in', broken=['bee/2.jpg', 'ant/0.jpg'])
  (images / 'ant' / 'notes.png').write_bytes(b'not an image at all')
  done = convert_image_folder.convert(
      input_dir=str(images), output_prefix=str(tmp_path / 'out/tr'),
      num_shards=2, on_bad_image='skip')
  assert sorted(os.path.relpath(p, images) for p, _ in done.skipped) == [
      'ant/0.jpg', 'ant/notes.png', 'bee/2.jpg']
  assert all(reason for _, reason in done.skipped)
  assert done.examples == 6 == count_records(done.paths)
  assert sorted(os.listdir(tmp_path / 'out')) == ['tr-00000-of-00002',
                                                  'tr-00001-of-00002']


def test_the_command_line_lists_skipped_images_with_a_count(tmp_path):
  images = image_folder(tmp_path / 'in', broken=['ant/1.jpg'])
  done = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.convert_image_folder',
       f'--input_dir={images}', f'--output_prefix={tmp_path / "out/tr"}',
       '--num_shards=2', '--on_bad_image=skip'],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=120,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))
  assert done.returncode == 0, done.stderr[-2000:]
  assert f'skipped {images}/ant/1.jpg: ' in done.stdout
  assert 'wrote 7 images to 2 files' in done.stdout
  assert 'skipped 1 unreadable images' in done.stdout
  failed = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.convert_image_folder',
       f'--input_dir={images}', f'--output_prefix={tmp_path / "out2/tr"}'],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=120,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))
  assert failed.returncode == 2 and 'Traceback' not in failed.stderr
  assert failed.stderr.strip().splitlines()[-1].startswith(
      f'error: Cannot read image {images}/ant/1.jpg')
  assert not os.path.exists(tmp_path / 'out2') or not os.listdir(
      tmp_path / 'out2')


def test_staged_files_appear_only_when_the_block_succeeds(tmp_path):
  paths = [str(tmp_path / 'a' / 'x'), str(tmp_path / 'b' / 'y')]
  with staged_files.staged(paths) as temporaries:
    for t in temporaries:
      assert '.staging-' in t
      with open(t, 'w') as f:
        f.write(os.path.basename(t))
    assert not any(os.path.exists(p) for p in paths)
  assert [open(p).read() for p in paths] == ['x', 'y']
  assert os.listdir(tmp_path / 'a') == ['x']
  with pytest.raises(RuntimeError):
    with staged_files.staged([str(tmp_path / 'a' / 'z')]) as [t]:
      open(t, 'w').write('partial')
      raise RuntimeError('the converter failed')
  assert os.listdir(tmp_path / 'a') == ['x']
  # write_bytes (the TFLite and ONNX files) replaces a file whole.
  staged_files.write_bytes(paths[0], b'\x00\xffnew')
  assert open(paths[0], 'rb').read() == b'\x00\xffnew'
  assert os.listdir(tmp_path / 'a') == ['x']


def test_a_flat_validation_folder_takes_its_labels_from_a_file(tmp_path):
  # As ImageNet ships it: class folders for training, one flat folder of
  # validation images with a synset a line in sorted file-name order.
  for cls in ('n01', 'n02', 'n03'):
    (tmp_path / 'train' / cls).mkdir(parents=True)
    Image.new('RGB', (8, 8)).save(tmp_path / 'train' / cls / 'a.JPEG')
  (tmp_path / 'val').mkdir()
  names = ['n03', 'n01', 'n03', 'n02']
  for i, name in enumerate(names):
    Image.new('RGB', (8, 6), (i * 60, 0, 0)).save(
        tmp_path / 'val' / f'ILSVRC2012_val_{i + 1:08d}.JPEG')
  labels = tmp_path / 'synset_labels.txt'
  labels.write_text('\n'.join(names) + '\n')
  done = convert_image_folder.convert(
      input_dir=str(tmp_path / 'val'), output_prefix=str(tmp_path / 'out/v'),
      num_shards=1, shuffle_seed=None, labels_file=str(labels),
      classes_from=str(tmp_path / 'train'))
  assert done.examples == 4
  got = []
  for record in tf.data.TFRecordDataset(done.paths):
    example = tf.train.Example.FromString(record.numpy())
    feature = example.features.feature
    got.append((int(feature['image/class/label'].int64_list.value[0]),
                feature['image/class/synset'].bytes_list.value[0].decode()))
  # The training set's numbering: n01 -> 1, n02 -> 2, n03 -> 3.
  assert got == [(3, 'n03'), (1, 'n01'), (3, 'n03'), (2, 'n02')]


def test_a_labels_file_that_does_not_fit_is_named(tmp_path):
  (tmp_path / 'train' / 'n01').mkdir(parents=True)
  (tmp_path / 'val').mkdir()
  for i in range(2):
    Image.new('RGB', (8, 8)).save(tmp_path / 'val' / f'{i}.JPEG')
  labels = tmp_path / 'labels.txt'
  labels.write_text('n01\n')
  with pytest.raises(ValueError, match=r'labels.txt has 1 labels for the 2 '
                     r'images in .*val: one line an image'):
    convert_image_folder.convert(
        input_dir=str(tmp_path / 'val'), output_prefix=str(tmp_path / 'o/v'),
        num_shards=1, labels_file=str(labels))
  labels.write_text('n01\nn09\n')
  with pytest.raises(ValueError, match=r"labels.txt, line 2: class 'n09' is "
                     r'not one of the 1 class folders'):
    convert_image_folder.convert(
        input_dir=str(tmp_path / 'val'), output_prefix=str(tmp_path / 'o/v'),
        num_shards=1, labels_file=str(labels),
        classes_from=str(tmp_path / 'train'))
  assert not (tmp_path / 'o').exists() or not os.listdir(tmp_path / 'o')
