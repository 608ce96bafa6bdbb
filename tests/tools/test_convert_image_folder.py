"""The class-folder converter: every image becomes an RGB JPEG, labels 1..N."""

import io

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

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
  paths = convert_image_folder.convert(input_dir=str(tmp_path / 'in'),
                                       output_prefix=str(tmp_path / 'out/tr'),
                                       num_shards=2)
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
