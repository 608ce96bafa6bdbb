"""train() end to end, in process: target, MLPerf log, replicas, exact eval."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from models.common.resnet import ResNet
from tests import helpers

pytestmark = pytest.mark.slow  # End-to-end: real runs and processes.


def test_quickstart_reaches_target_and_its_log_passes_the_checker(
    quickstart_data, tmp_path):
  model_dir = str(tmp_path / 'run')
  result = helpers.run_quick(
      quickstart_data, model_dir, DETERMINISTIC=False, TARGET_ACCURACY=0.9,
      **{'TRAIN_STEPS': 0, 'STEPS_PER_LOOP': 11,
         'EVAL_EVERY_STEPS': 22, 'GLOBAL_BATCH_SIZE': 64,
         'EVAL_BATCH_SIZE': 120,
         'training.mlperf_log.Submission.division': "'closed'"})
  assert result.status == 'success'
  assert result.quality >= 0.9
  assert result.evals[-1][3]['examples'] == 360
  # Stopped at the target with no periodic checkpoints: the final state is
  # still saved (export and inference start from it).
  assert os.path.exists(os.path.join(model_dir, 'checkpoints',
                                     f'ckpt-{result.step}.index'))
  log = os.path.join(model_dir, 'mlperf.log')
  for ruleset in ('0.7.0', '4.0.0'):
    checked = helpers.run_checker(log, ruleset, str(tmp_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'SUCCESS' in checked.stdout + checked.stderr
  text = open(log).read()
  for key in ('"run_stop"', '"status": "success"', '"lars_opt_momentum"',
              '"model_bn_span"', '"eval_accuracy"', '"block_start"',
              '"key": "seed", "value": 0,'):
    assert key in text
  # TensorBoard scalars were written.
  events = glob.glob(os.path.join(model_dir, 'train', 'events.*'))
  tags = {v.tag for e in tf.compat.v1.train.summary_iterator(events[0])
          for v in e.summary.value}
  assert {'loss', 'learning_rate', 'examples_per_second'} <= tags


def test_checker_rejects_a_log_that_missed_the_target(quickstart_data,
                                                      tmp_path):
  model_dir = str(tmp_path / 'run')
  result = helpers.run_quick(
      quickstart_data, model_dir,
      **{'training.mlperf_log.Submission.division': "'closed'"})
  assert result.status == 'aborted'  # 4 steps cannot reach 0.97.
  checked = helpers.run_checker(os.path.join(model_dir, 'mlperf.log'),
                                '0.7.0', str(tmp_path))
  assert checked.returncode != 0


def test_three_replicas_train_like_one_and_count_every_eval_example_once(
    quickstart_data, tmp_path):
  # (2 replicas: the BERT, Transformer and weight-update sharding runs.)
  one = helpers.run_quick(quickstart_data, str(tmp_path / 'one'))
  three = helpers.run_quick(
      quickstart_data, str(tmp_path / 'r3'),
      extra_files=['gin/hardware/cpu_mirrored.gin'], CPU_REPLICAS=3,
      EVAL_BATCH_SIZE=42)  # 360 % 42 != 0: the last batch is padded.
  a, b = helpers.weights(one.model), helpers.weights(three.model)
  initial = helpers.weights(ResNet(depth=10, width_multiplier=0.25,
                                   num_classes=10, seed=0))
  for k in a:
    moved = np.linalg.norm(a[k] - initial[k])
    assert moved > 0, k
    # The replicas' disagreement is under 1% of how far training moved it.
    assert np.linalg.norm(b[k] - a[k]) < 0.01 * moved, k
  sums = three.evals[-1][3]
  assert sums['examples'] == 360
  # The same weights scored directly, one device, no padding, agree exactly.
  logits, labels = helpers.validation_logits(three.model, quickstart_data)
  correct = int(np.sum(np.argmax(logits, -1) == labels))
  assert sums['correct'] == correct


def test_unwritable_model_dir_fails_before_compute(quickstart_data, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('x')
  with pytest.raises(PermissionError, match='a_file'):
    helpers.run_quick(quickstart_data, str(blocker / 'run'))


def test_missing_data_names_the_glob(tmp_path):
  with pytest.raises(FileNotFoundError, match='nowhere/train-'):
    helpers.run_quick(str(tmp_path / 'nowhere'), str(tmp_path / 'run'))
  assert not glob.glob(str(tmp_path / 'run' / 'checkpoints' / '*'))


def test_batch_not_divisible_by_replicas_is_a_clear_error(quickstart_data,
                                                          tmp_path):
  with pytest.raises(ValueError, match=r'global_batch_size.*\(25\).*3'):
    helpers.run_quick(quickstart_data, str(tmp_path / 'run'),
                      extra_files=['gin/hardware/cpu_mirrored.gin'],
                      CPU_REPLICAS=3, **{'GLOBAL_BATCH_SIZE': 25})


def test_checkpoint_of_another_model_is_refused_and_kept(quickstart_data,
                                                         tmp_path):
  model_dir = str(tmp_path / 'run')
  helpers.run_quick(quickstart_data, model_dir)
  before = sorted(os.listdir(os.path.join(model_dir, 'checkpoints')))
  with pytest.raises(ValueError, match='different model'):
    helpers.run_quick(quickstart_data, model_dir, DEPTH=34)
  assert sorted(os.listdir(os.path.join(model_dir, 'checkpoints'))) == before


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(quickstart_data,
                                                           tmp_path):
  model_dir = str(tmp_path / 'run')
  helpers.run_quick(quickstart_data, model_dir,
                    **{'CHECKPOINT_EVERY_STEPS': 2})
  with pytest.raises(FloatingPointError, match='ckpt-4'):
    helpers.run_quick(quickstart_data, model_dir,
                      **{'TRAIN_STEPS': 10,
                         'CHECKPOINT_EVERY_STEPS': 2,
                         'training.schedules.PolynomialWarmup.base': 1e35})
  names = os.listdir(os.path.join(model_dir, 'checkpoints'))
  assert 'ckpt-4.index' in names
  assert not [n for n in names if n.startswith(('ckpt-6', 'ckpt-8'))]
  run_stops = [line for line in open(os.path.join(model_dir, 'mlperf.log'))
               if '"key": "run_stop"' in line]
  assert '"status": "aborted"' in run_stops[-1]


def record_files(src: str) -> list[str]:
  """The data folder's files (not the calibration folder `make data` writes
  beside them)."""
  return [f for f in os.listdir(src) if os.path.isfile(os.path.join(src, f))]


def corrupt_copy(src: str, dst: str, split: str) -> str:
  for f in record_files(src):
    with open(os.path.join(src, f), 'rb') as i, open(os.path.join(dst, f),
                                                     'wb') as o:
      o.write(i.read())
  bad = os.path.join(dst, f'{split}-00099-of-00099')
  good = tf.io.gfile.GFile(os.path.join(os.path.dirname(__file__), 'data',
                                        'tiny.jpg'), 'rb').read()
  with tf.io.TFRecordWriter(bad) as w:
    for i in range(4):
      w.write(tf.train.Example(features=tf.train.Features(feature={
          'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[b'\xff\xd8\xff garbage' if i == 2 else good])),
          'image/class/label': tf.train.Feature(
              int64_list=tf.train.Int64List(value=[1]))})).SerializeToString())
  return bad


def test_undecodable_eval_image_fails_naming_file_and_record(quickstart_data,
                                                             tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  bad = corrupt_copy(quickstart_data, str(data), 'validation')
  with pytest.raises(ValueError, match=f'{bad}, record 2.*on_bad_image'):
    helpers.run_quick(str(data), str(tmp_path / 'run'))


def test_undecodable_images_can_be_skipped_and_counted(quickstart_data,
                                                       tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  corrupt_copy(quickstart_data, str(data), 'validation')
  result = helpers.run_quick(
      str(data), str(tmp_path / 'run'),
      **{'input_pipeline.imagenet.ImageNetInput.on_bad_image': "'skip'"})
  assert result.evals[-1][3]['examples'] == 360 + 3


def copy_data(src: str, dst) -> None:
  dst.mkdir()
  for f in record_files(src):
    with open(os.path.join(src, f), 'rb') as i:
      (dst / f).write_bytes(i.read())


def test_a_damaged_train_shard_is_named_by_file_and_record(quickstart_data,
                                                          tmp_path):
  data = tmp_path / 'data'
  copy_data(quickstart_data, data)
  shard = data / 'train-00001-of-00004'
  raw = bytearray(shard.read_bytes())
  raw[len(raw) // 2] ^= 0xFF  # Inside some record's bytes: its CRC fails.
  shard.write_bytes(bytes(raw))
  with pytest.raises(ValueError,
                     match=f'Damaged TFRecord data: {shard}, record \\d+: '):
    helpers.run_quick(str(data), str(tmp_path / 'run'),
                      **{'TRAIN_STEPS': 40, 'EVAL_EVERY_STEPS': 40})


def test_a_file_that_is_not_a_tfrecord_is_named_before_compute(
    quickstart_data, tmp_path):
  data = tmp_path / 'data'
  copy_data(quickstart_data, data)
  (data / 'train-README.txt').write_text('how these shards were made\n')
  with pytest.raises(ValueError, match=f'Not TFRecord files: '
                     f'{data}/train-README.txt'):
    helpers.run_quick(str(data), str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run' / 'mlperf.log')


def test_a_png_in_a_record_is_named(quickstart_data, tmp_path):
  import io
  from PIL import Image
  data = tmp_path / 'data'
  copy_data(quickstart_data, data)
  png = io.BytesIO()
  Image.new('RGB', (40, 40), (9, 9, 9)).save(png, format='PNG')
  bad = str(data / 'validation-00099-of-00099')
  good = open(os.path.join(os.path.dirname(__file__), 'data', 'tiny.jpg'),
              'rb').read()
  with tf.io.TFRecordWriter(bad) as w:
    for i in range(3):
      w.write(tf.train.Example(features=tf.train.Features(feature={
          'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[png.getvalue() if i == 1 else good])),
          'image/class/label': tf.train.Feature(
              int64_list=tf.train.Int64List(value=[1]))})).SerializeToString())
  with pytest.raises(ValueError, match=f'{bad}, record 1: image/encoded holds '
                     'PNG bytes, not JPEG'):
    helpers.run_quick(str(data), str(tmp_path / 'run'))


def test_a_profile_window_writes_a_trace_and_the_run_a_plot(quickstart_data,
                                                            tmp_path):
  model_dir = tmp_path / 'run'
  helpers.run_quick(quickstart_data, str(model_dir), TRAIN_STEPS=8,
                    PROFILE_STEPS=(2, 4))
  traces = glob.glob(str(model_dir / 'plugins' / 'profile' / '*' /
                         '*.xplane.pb'))
  assert len(traces) == 1 and os.path.getsize(traces[0]) > 1000
  assert (model_dir / 'time_to_accuracy.png').read_bytes()[:4] == b'\x89PNG'
  with pytest.raises(ValueError, match=r'`profile_steps` \(5, 2\) must be'):
    helpers.run_quick(quickstart_data, str(tmp_path / 'bad'),
                      PROFILE_STEPS=(5, 2))


@pytest.mark.slow
def test_spatially_partitioned_quickstart_reaches_target(quickstart_data,
                                                         tmp_path):
  # Each image split in two along its height over 2 replicas (one group).
  model_dir = str(tmp_path / 'run')
  result = helpers.run_quick(
      quickstart_data, model_dir, extra_files=['gin/hardware/cpu_mirrored.gin'],
      CPU_REPLICAS=2, SPATIAL_PARTITIONS=2, BN_GROUP_SIZE=2,
      DETERMINISTIC=False, TARGET_ACCURACY=0.9,
      **{'TRAIN_STEPS': 0, 'STEPS_PER_LOOP': 11, 'EVAL_EVERY_STEPS': 22,
         'GLOBAL_BATCH_SIZE': 64, 'EVAL_BATCH_SIZE': 120})
  assert result.status == 'success', result.evals
  assert result.evals[-1][3]['examples'] == 360  # Eval on whole images.
  checked = helpers.run_checker(os.path.join(model_dir, 'mlperf.log'),
                                '0.7.0', str(tmp_path))
  assert checked.returncode == 0, checked.stdout + checked.stderr


def test_spatial_partitions_that_do_not_divide_the_replicas_are_named(
    quickstart_data, tmp_path):
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS \(3\) needs a '
                     r'task with a spatial_feature and a replica count \(4\)'):
    helpers.run_quick(quickstart_data, str(tmp_path / 'run'),
                      extra_files=['gin/hardware/cpu_mirrored.gin'],
                      CPU_REPLICAS=4, SPATIAL_PARTITIONS=3, BN_GROUP_SIZE=0)


def test_spatial_groups_across_hosts_need_deterministic_input():
  from distribution import plan as plan_lib
  options = dict(spatial_feature='image', spatial_partitions=2, replicas=2,
                 local_replicas=1, deterministic=False)
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS \(2\) spans '
                     r'hosts of 1 replicas each: set DETERMINISTIC = True'):
    plan_lib.check_spatial_options(**options)
  plan_lib.check_spatial_options(**{**options, 'deterministic': True})
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS \(0\) needs'):
    plan_lib.check_spatial_options(**{**options, 'spatial_partitions': 0})
  with pytest.raises(ValueError, match=r'needs a task with a spatial_feature'):
    plan_lib.check_spatial_options(**{**options, 'spatial_feature': None,
                                      'deterministic': True})
