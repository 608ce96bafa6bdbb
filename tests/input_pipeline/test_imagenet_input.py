"""The ImageNet-schema pipeline: sharding, checks, resume position, exact eval."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import imagenet
from input_pipeline import records


def make_input(data_dir, **kwargs):
  args = dict(data_dir=data_dir, image_size=32, num_classes=10,
              deterministic=True, shuffle_buffer=200, interleave_cycle=4,
              flip=False)
  args.update(kwargs)
  return imagenet.ImageNetInput(**args)


def context(num_pipelines=1, pipeline_id=0, replicas=1):
  return tf.distribute.InputContext(num_input_pipelines=num_pipelines,
                                    input_pipeline_id=pipeline_id,
                                    num_replicas_in_sync=replicas)


def labels_of(dataset, n):
  return [b['label'].numpy().tolist() for b in dataset.take(n)]


def test_missing_files_error_names_the_glob(tmp_path):
  with pytest.raises(FileNotFoundError, match=str(tmp_path / 'train-\\*')):
    make_input(str(tmp_path)).check()


def test_record_without_label_feature_is_named(tmp_path):
  path = str(tmp_path / 'train-0')
  with tf.io.TFRecordWriter(path) as w:
    w.write(tf.train.Example(features=tf.train.Features(feature={
        'image/encoded': tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[b'x']))})).SerializeToString())
  with pytest.raises(ValueError, match="'image/class/label'.*train-0|"
                     "train-0.*'image/class/label'"):
    make_input(str(tmp_path), eval_pattern='train-*').check()


def test_host_shard_by_file_and_by_record_when_files_are_few():
  files = ['a', 'b', 'c', 'd']
  assert records.host_shard(files, context(2, 1, 2)) == (['b', 'd'], None)
  assert records.host_shard(files, context(8, 3, 8)) == (files, (8, 3))
  assert records.host_shard(files, None) == (files, None)


def test_per_host_counts_cover_every_record(quickstart_data):
  files = records.list_files(os.path.join(quickstart_data, 'validation-*'))
  for hosts in (1, 2, 3, 5):
    counts = records.per_host_counts(files, hosts)
    assert sum(counts) == 360 and len(counts) == hosts


def test_labels_are_shifted_to_zero_based(quickstart_data):
  ds = make_input(quickstart_data).train_dataset(context(),
                                                 global_batch_size=64)
  labels = np.concatenate(labels_of(ds, 20))
  assert labels.min() == 0 and labels.max() == 9


def test_deterministic_train_stream_resumes_at_the_same_position(
    quickstart_data):
  data = make_input(quickstart_data)
  full = data.train_dataset(context(), global_batch_size=16)
  resumed = data.train_dataset(context(), global_batch_size=16, start_step=5)
  full_batches = list(full.take(12))
  resumed_batches = list(resumed.take(7))
  for a, b in zip(full_batches[5:], resumed_batches):
    np.testing.assert_array_equal(a['label'], b['label'])
    np.testing.assert_array_equal(a['image'], b['image'])


@pytest.mark.parametrize('cache', ['raw', 'none'])
def test_resume_two_epochs_later_matches_and_epochs_differ(quickstart_data,
                                                          cache):
  # 1437 records, batches of 100: step 31 lies in the third epoch.
  data = make_input(quickstart_data, cache=cache)
  full = list(data.train_dataset(context(), global_batch_size=100).take(33))
  resumed = list(data.train_dataset(context(), global_batch_size=100,
                                    start_step=31).take(2))
  for a, b in zip(full[31:], resumed):
    np.testing.assert_array_equal(a['label'], b['label'])
    np.testing.assert_array_equal(a['image'], b['image'])
  # Each epoch has its own order and its own crops.
  labels = np.concatenate([b['label'].numpy() for b in full])
  assert not np.array_equal(labels[:1437], labels[1437:2874])


def test_one_epoch_of_training_sees_each_example_once(quickstart_data):
  data = make_input(quickstart_data, shuffle_buffer=2000)
  files = records.list_files(data.train_files)
  truth = collections.Counter(
      int(tf.io.parse_single_example(r, imagenet.FEATURES)[
          imagenet.LABEL_KEY]) - 1 for r in tf.data.TFRecordDataset(files))
  ds = data.train_dataset(context(), global_batch_size=1)
  first_epoch = collections.Counter(
      int(b['label'][0]) for b in ds.take(sum(truth.values())))
  assert first_epoch == truth


def test_synthetic_mode_needs_no_files():
  data = imagenet.ImageNetInput(synthetic=True, image_size=16, num_classes=7)
  data.check()
  batch = next(iter(data.train_dataset(context(), global_batch_size=4)))
  assert batch['image'].shape == (4, 16, 16, 3)
  assert int(tf.reduce_max(batch['label'])) < 7


def test_eval_covers_each_example_once_across_hosts_and_replicas(
    quickstart_data):
  data = make_input(quickstart_data)
  hosts, replicas_per_host, global_batch = 2, 3, 42  # 360 % 42 != 0
  steps = data.eval_steps(num_pipelines=hosts, global_batch_size=global_batch)
  seen = collections.Counter()
  masked = 0
  for host in range(hosts):
    ds = data.eval_dataset(context(hosts, host, hosts * replicas_per_host),
                           global_batch_size=global_batch, steps=steps)
    batches = list(ds)
    # Each replica of this host gets `steps` equal-sized batches.
    assert len(batches) == steps * replicas_per_host
    for b in batches:
      assert b['image'].shape[0] == global_batch // (hosts * replicas_per_host)
      keep = b['mask'].numpy() == 1
      masked += int((~keep).sum())
      for img in b['image'].numpy()[keep]:
        seen[img.tobytes()] += 1
  assert sum(seen.values()) == 360
  assert masked == steps * global_batch - 360


def test_undecodable_image_is_found_and_named(quickstart_data, tmp_path):
  import shutil
  for f in os.listdir(quickstart_data):
    if os.path.isfile(os.path.join(quickstart_data, f)):  # Not calibration/.
      shutil.copy(os.path.join(quickstart_data, f), tmp_path)
  bad = str(tmp_path / 'validation-00009-of-00009')
  with tf.io.TFRecordWriter(bad) as w:
    for i in range(3):
      w.write(tf.train.Example(features=tf.train.Features(feature={
          'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[b'\xff\xd8 not a jpeg' if i == 1 else open(
                  os.path.join(os.path.dirname(os.path.dirname(__file__)),
                               'data', 'tiny.jpg'), 'rb').read()])),
          'image/class/label': tf.train.Feature(
              int64_list=tf.train.Int64List(value=[1]))})).SerializeToString())
  data = make_input(str(tmp_path))
  found = data.find_undecodable()
  assert len(found) == 1 and found[0].startswith(f'{bad}, record 1')


def test_decoded_image_cache_gives_the_same_crops_as_fused_decode(
    quickstart_data):
  raw = make_input(quickstart_data, cache='raw').train_dataset(
      context(), global_batch_size=32)
  decoded = make_input(quickstart_data, cache='decoded').train_dataset(
      context(), global_batch_size=32)
  for a, b in zip(raw.take(3), decoded.take(3)):
    np.testing.assert_array_equal(a['label'], b['label'])
    np.testing.assert_allclose(a['image'], b['image'], atol=1.0)  # of 255


def test_label_out_of_range_names_the_bindings(quickstart_data):
  ds = make_input(quickstart_data, num_classes=5).train_dataset(
      context(), global_batch_size=64)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r'label_offset \(1\).*num_classes=5'):
    for _ in ds.take(10):
      pass


def test_eval_order_is_fixed_even_when_training_is_not_deterministic(
    quickstart_data):
  data = make_input(quickstart_data, deterministic=False)

  def labels():
    ds = data.eval_dataset(context(), global_batch_size=40,
                           steps=data.eval_steps(num_pipelines=1,
                                                 global_batch_size=40))
    return np.concatenate([b['label'].numpy() for b in ds])

  first = labels()
  for _ in range(3):
    np.testing.assert_array_equal(labels(), first)


def test_bicubic_resize_is_tf1_resize_bicubic_as_google_calls_it(
    quickstart_data):
  from input_pipeline import image_preprocessing
  raw = next(iter(tf.data.TFRecordDataset(records.list_files(
      os.path.join(quickstart_data, 'validation-*')))))
  image_bytes = tf.io.parse_single_example(raw, imagenet.FEATURES)[
      imagenet.IMAGE_KEY]
  ours = image_preprocessing.eval_image(image_bytes, image_size=24,
                                        resize='bicubic')
  # Google's imagenet_input.py: decode_and_crop_jpeg, then TF1
  # tf.image.resize_bicubic with its defaults.
  shape = tf.image.extract_jpeg_shape(image_bytes)
  crop = tf.cast(224 / 256 * tf.cast(
      tf.minimum(shape[0], shape[1]), tf.float32), tf.int32)
  window = tf.stack([(shape[0] - crop + 1) // 2, (shape[1] - crop + 1) // 2,
                     crop, crop])
  cropped = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
  google = tf.compat.v1.image.resize_bicubic([cropped], [24, 24])[0]
  np.testing.assert_array_equal(ours.numpy(), google.numpy())
  bilinear = image_preprocessing.eval_image(image_bytes, image_size=24)
  assert np.abs(bilinear.numpy() - ours.numpy()).max() > 1.0
  with pytest.raises(ValueError, match="`resize` must be one of"):
    make_input(quickstart_data, resize='lanczos')


def png_bytes() -> bytes:
  import io
  from PIL import Image
  out = io.BytesIO()
  Image.new('RGB', (8, 8), (1, 2, 3)).save(out, format='PNG')
  return out.getvalue()


def write_images(path, images):
  with tf.io.TFRecordWriter(str(path)) as w:
    for image in images:
      w.write(tf.train.Example(features=tf.train.Features(feature={
          'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[image])),
          'image/class/label': tf.train.Feature(
              int64_list=tf.train.Int64List(value=[1]))})).SerializeToString())


def tiny_jpeg() -> bytes:
  return open(os.path.join(os.path.dirname(os.path.dirname(__file__)), 'data',
                           'tiny.jpg'), 'rb').read()


def test_png_bytes_in_image_encoded_are_named_by_their_magic(tmp_path):
  # decode_jpeg accepts PNG; the magic bytes tell.
  write_images(tmp_path / 'train-0', [tiny_jpeg(), tiny_jpeg(), png_bytes()])
  found = make_input(str(tmp_path), eval_pattern='train-*').find_undecodable()
  assert found == [f'{tmp_path}/train-0, record 2: image/encoded holds PNG '
                   'bytes, not JPEG']


def test_a_dataset_of_pngs_fails_its_check_naming_file_and_record(tmp_path):
  write_images(tmp_path / 'train-0', [png_bytes()])
  with pytest.raises(ValueError, match=f'{tmp_path}/train-0, record 0: '
                     'image/encoded holds PNG bytes, not JPEG'):
    make_input(str(tmp_path), eval_pattern='train-*').check()


def test_magic_bytes_name_the_format():
  assert imagenet.not_jpeg(tiny_jpeg()) is None
  assert imagenet.not_jpeg(b'GIF89a...') == 'GIF bytes, not JPEG'
  assert imagenet.not_jpeg(b'') == 'not JPEG bytes (starts empty)'
  assert imagenet.not_jpeg(b'\x00\x01') == 'not JPEG bytes (starts 00 01)'
