"""The pod configs log Google's MLPerf v0.7 values and follow its schedule.

GOOGLE_* quote the hyper-parameter keys of Google's 4096-chip logs
(mlcommons/training_results_v0.7, Google/results/tpu-v3-8192-TF/
{resnet,bert}/result_0.txt). The configs are built here without a TPU: gin
builds the task, optimizer and schedule exactly as train.py does, and the
runtime's own mlperf_log.hyperparameters() gives the logged keys.
"""

import json

import gin
import numpy as np
import pytest
import tensorflow as tf

from core import config as gin_config
from tests import helpers
from training import mlperf_log
from training import schedules

GOOGLE_RESNET = {
    'global_batch_size': 65536, 'lars_opt_weight_decay': 0.0001,
    'lars_opt_momentum': 0.951807, 'model_bn_span': 64, 'opt_name': 'lars',
    'lars_epsilon': 0.0, 'lars_opt_base_learning_rate': 24.699,
    'lars_opt_learning_rate_warmup_epochs': 31,
    'lars_opt_end_learning_rate': 0.0001,
    'lars_opt_learning_rate_decay_steps': 1133,
    'lars_opt_learning_rate_decay_poly_power': 2.0,
    'train_samples': 1281167, 'eval_samples': 50000,
}
GOOGLE_BERT = {
    'global_batch_size': 8192, 'opt_learning_rate_warmup_steps': 287,
    'num_warmup_steps': 287, 'start_warmup_step': -76,
    'max_sequence_length': 512, 'opt_base_learning_rate': 0.00288293,
    'opt_lamb_beta_1': 0.88, 'opt_lamb_beta_2': 0.88, 'opt_epsilon': 1e-06,
    'opt_learning_rate_training_steps': 560,
    'opt_lamb_weight_decay_rate': 0.0166629,
    'opt_lamb_learning_rate_decay_poly_power': 1,
    'max_predictions_per_seq': 76, 'train_samples': 4587520,
    'eval_samples': 10000, 'opt_gradient_accumulation_steps': 0,
}


GOOGLE_TRANSFORMER = {  # Google/results/tpu-v3-8192-TF/transformer.
    'global_batch_size': 2048, 'max_sequence_length': 80, 'opt_name': 'adam',
    'opt_base_learning_rate': 1.875, 'opt_learning_rate_warmup_steps': 831,
    'opt_adam_beta_1': 0.88, 'opt_adam_beta_2': 0.92,
    'opt_adam_epsilon': 1e-09, 'train_samples': 566340, 'eval_samples': 3003,
}


@pytest.fixture
def wmt_metadata(tmp_path):
  """A DATA_DIR holding only the metadata.json that tools/
  build_translation_data.py writes for WMT14 en-de at MLPerf's lengths."""
  (tmp_path / 'metadata.json').write_text(json.dumps({
      'vocab_size': 33708, 'max_length': 80, 'packed_length': 256,
      'eval_length': 97, 'train_rows': 566340, 'eval_pairs': 3003}))
  return str(tmp_path)


def pod_hyperparameters(gin_file, num_eval_examples, build_model=False,
                        data_dir='/nowhere', num_replicas=8192):
  gin.clear_config()
  try:
    gin_config.parse([gin_file], [f"DATA_DIR = '{data_dir}'"] +
                     helpers.required_checkpoints(gin_file))
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    optimizer = gin.query_parameter(
        'train.train.optimizer').scoped_configurable_fn()
    schedule = gin.query_parameter(
        'train.train.schedule').scoped_configurable_fn()
    make_lr = gin.query_parameter(
        'train.train.learning_rate').scoped_configurable_fn
    steps_per_epoch = task.data.steps_per_epoch(schedule.global_batch_size)
    total = schedule.total_steps(steps_per_epoch)
    lr = make_lr(steps_per_epoch=steps_per_epoch, total_steps=total)
    if build_model:  # ResNet's model_bn_span comes from its model.
      task.build_model()
    return mlperf_log.hyperparameters(
        task=task, optimizer=optimizer, learning_rate=lr,
        global_batch_size=schedule.global_batch_size,
        num_replicas=num_replicas,
        num_eval_examples=num_eval_examples, total_steps=total), lr
  finally:
    gin.clear_config()


@pytest.mark.parametrize('gin_file, eval_examples, build_model, google', [
    ('gin/resnet50_pod.gin', 50000, True, GOOGLE_RESNET),
    ('gin/bert_pod.gin', 10000, False, GOOGLE_BERT),
])
def test_pod_config_logs_googles_values(gin_file, eval_examples, build_model,
                                        google):
  logged, _ = pod_hyperparameters(gin_file, eval_examples, build_model)
  for key, value in google.items():
    assert key in logged, key
    assert logged[key] == pytest.approx(value), (key, logged[key], value)


def assert_translation_keys(logged, google):
  """Every key of Google's log logged with its value; max_sequence_length
  with its method 'discard'."""
  for key, value in google.items():
    value_logged = logged[key]
    if isinstance(value_logged, mlperf_log.Logged):
      assert value_logged.metadata == {'method': 'discard'}
      value_logged = value_logged.value
    assert value_logged == pytest.approx(value), (key, value_logged, value)


def test_transformer_pod_config_logs_googles_values(wmt_metadata):
  logged, lr = pod_hyperparameters('gin/transformer_pod.gin', 3003,
                                    data_dir=wmt_metadata)
  assert_translation_keys(logged, GOOGLE_TRANSFORMER)
  # Lingvo's TransformerMLPerfSchedule with model_dim 1024.
  for step in (0, 100, 831, 2770):
    assert float(lr(step)) == pytest.approx(
        1.875 * 1024**-0.5 * min(1, step / 831) / max(step, 831)**0.5,
        rel=1e-6)
  gin.clear_config()
  try:
    gin_config.parse(['gin/transformer_pod.gin'],
                    [f"DATA_DIR = '{wmt_metadata}'"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    assert task.build_model().model_dim == 1024
    assert gin.query_parameter('%MESH_SHAPE') == (2048, 4)
  finally:
    gin.clear_config()
  # Google's result_0.txt: eval epoch_num 1, 2, ... after each 277 steps.
  assert [task.mlperf_epoch_num(s, 2048) for s in (277, 554, 1662)] == [
      1.0, 2.0, 6.0]


def numpy_google_lars(step, *, base=24.699, end=1e-4, warmup_epochs=31,
                      num_images=1281167, batch=65536, train_steps=1738):
  """lars_util.poly_rate_schedule and TF1 polynomial_decay, step by step."""
  steps_per_epoch = num_images / batch
  epoch = step / steps_per_epoch
  w_steps = warmup_epochs * num_images // batch
  if epoch <= warmup_epochs:
    return base * epoch / warmup_epochs
  decay_steps = train_steps - w_steps + 1
  done = min(max(1, step - w_steps), decay_steps)
  return (base - end) * (1 - done / decay_steps)**2 + end


def test_pod_resnet_schedule_is_googles_arithmetic():
  _, lr = pod_hyperparameters('gin/resnet50_pod.gin', 50000)
  assert isinstance(lr, schedules.GoogleLarsV07)
  steps = np.array([0, 1, 300, 605, 606, 607, 608, 1000, 1737, 1738])
  np.testing.assert_allclose([float(lr(s)) for s in steps],
                             [numpy_google_lars(s) for s in steps],
                             rtol=2e-6, atol=1e-8)  # float32, as TF1.
  # Where PolynomialWarmup would differ: step 606 is still warmup for Google
  # (epoch 30.9997 <= 31).
  assert float(lr(606)) < 24.699


def test_pod_configs_log_epoch_num_as_google_does():
  gin.clear_config()
  try:
    gin_config.parse(['gin/resnet50_pod.gin'], ["DATA_DIR = '/nowhere'"])
    resnet = gin.query_parameter('%TASK').scoped_configurable_fn()
    gin.clear_config()
    gin_config.parse(['gin/bert_pod.gin'], ["DATA_DIR = '/nowhere'",
                                           "INIT_CHECKPOINT = ''"])
    bert = gin.query_parameter('%TASK').scoped_configurable_fn()
  finally:
    gin.clear_config()
  # Google's resnet result_0.txt: eval epoch_num 4.0, 8.0 at steps 79, 158.
  assert [resnet.mlperf_epoch_num(s, 65536) for s in (0, 79, 158)] == [
      0.0, 4.0, 8.0]
  # Google's bert result_0.txt: epoch_num 62, 124 (steps; ruleset 0.7.0).
  assert [bert.mlperf_epoch_num(s, 8192) for s in (62, 124)] == [62, 124]


# Google's v3-32 TF2 logs (Google/results/tpu-v3-32-TF2.0/{resnet,bert}/
# result_0.txt; the other runs log the same values).
GOOGLE_RESNET_V3_32 = {
    'global_batch_size': 4096, 'train_samples': 1281167,
    'eval_samples': 50000, 'model_bn_span': 128, 'opt_name': 'lars',
    'lars_epsilon': 0.0, 'lars_opt_weight_decay': 0.0002,
    'lars_opt_base_learning_rate': 13.0,
    'lars_opt_learning_rate_warmup_epochs': 2,
    'lars_opt_end_learning_rate': 0.0001,
    'lars_opt_learning_rate_decay_steps': 12169,
    'lars_opt_learning_rate_decay_poly_power': 2.0, 'lars_opt_momentum': 0.9,
}
GOOGLE_BERT_V3_32 = {
    'global_batch_size': 448, 'max_sequence_length': 512,
    'max_predictions_per_seq': 76, 'opt_base_learning_rate': 0.0004,
    'opt_lamb_weight_decay_rate': 0.01, 'opt_lamb_beta_1': 0.9,
    'opt_lamb_beta_2': 0.999, 'opt_learning_rate_warmup_steps': 0,
    'num_warmup_steps': 0, 'start_warmup_step': 0, 'opt_epsilon': 1e-06,
    'eval_samples': 10000, 'opt_lamb_learning_rate_decay_poly_power': 1.0,
    'opt_learning_rate_training_steps': 8103, 'train_samples': 3630144,
    'opt_gradient_accumulation_steps': 1,
}


@pytest.mark.parametrize('gin_file, eval_examples, build_model, google', [
    ('gin/resnet50_v3_32.gin', 50000, True, GOOGLE_RESNET_V3_32),
    ('gin/bert_v3_32.gin', 10000, False, GOOGLE_BERT_V3_32),
])
def test_v3_32_configs_log_googles_submitted_values(
    gin_file, eval_examples, build_model, google):
  logged, _ = pod_hyperparameters(gin_file, eval_examples, build_model,
                                  num_replicas=32)
  for key, value in google.items():
    assert key in logged, key
    assert logged[key] == pytest.approx(value), (key, logged[key], value)


def numpy_google_tf2_lars(step, *, base=13.0, end=1e-4, warmup_epochs=2,
                          per_epoch_steps=1281167 // 4096, train_epochs=41):
  """Google's v0.7 TF2 PolynomialDecayWithWarmup (lars_util.py), as its
  v3-32 ResNet ran it: warm-up by step, Keras polynomial decay after."""
  warmup = warmup_epochs * per_epoch_steps
  decay_steps = per_epoch_steps * train_epochs - warmup + 1
  if step <= warmup:
    return base * step / warmup
  done = min(step - warmup, decay_steps)
  return (base - end) * (1 - done / decay_steps)**2 + end


def test_v3_32_resnet_schedule_and_eval_cadence_are_googles():
  _, lr = pod_hyperparameters('gin/resnet50_v3_32.gin', 50000,
                              num_replicas=32)
  steps = np.array([0, 1, 300, 623, 624, 625, 626, 5000, 12791, 12792])
  np.testing.assert_allclose([float(lr(s)) for s in steps],
                             [numpy_google_tf2_lars(s) for s in steps],
                             rtol=2e-6, atol=1e-8)
  gin.clear_config()
  try:
    gin_config.parse(['gin/resnet50_v3_32.gin'], ["DATA_DIR = '/nowhere'"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    schedule = gin.query_parameter(
        'train.train.schedule').scoped_configurable_fn()
  finally:
    gin.clear_config()
  total = schedule.total_steps(task.data.steps_per_epoch(4096))
  schedule.validate(total)
  evals = [s for s in range(312, total + 1, 312)
           if schedule.evaluates_at(s, total)]
  # --eval_offset_epochs=3 --epochs_between_evals=4 on 312-step epochs;
  # Google's result_0.txt logs eval epoch_num 2, 6, 10, ...
  assert evals[:3] == [936, 2184, 3432] and evals[-1] == total == 12792
  assert [task.mlperf_epoch_num(s, 4096) for s in evals[:3]] == [2, 6, 10]
  assert schedule.next_eval_step(0, total) == 936
  assert schedule.next_eval_step(936, total) == 2184


# Google/results/tpu-v3-8192-TF/ssd/result_0.txt and tpu-v4-16-TF/ssd.
GOOGLE_SSD = {
    'global_batch_size': 4096, 'opt_base_learning_rate': 0.00125,
    'opt_learning_rate_decay_boundary_epochs': [72, 90],
    'opt_weight_decay': 0.0005, 'model_bn_span': 64, 'max_samples': 50,
    'train_samples': 118287, 'eval_samples': 5000,
    'opt_learning_rate_warmup_factor': 128.0,
    'opt_learning_rate_warmup_steps': 721,
}
GOOGLE_SSD_V4_16 = {
    'global_batch_size': 1024, 'opt_base_learning_rate': 0.0031,
    'opt_learning_rate_decay_boundary_epochs': [40, 50],
    'opt_weight_decay': 0.0005, 'max_samples': 50, 'train_samples': 118287,
    'eval_samples': 5000, 'opt_learning_rate_warmup_factor': 32.0,
    'opt_learning_rate_warmup_steps': 577,
    # Google: 64 (16 shards of 64, statistics per shard); here 8 replicas
    # of 128 (TPUStrategy sees a v4 chip as one device), per replica.
    'model_bn_span': 128,
}
# ssd_constants.CLASS_INV_MAP: COCO 2017's 80 category ids.
COCO_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19,
            20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38,
            39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55,
            56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75,
            76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)


@pytest.mark.parametrize('gin_file, replicas, google', [
    # 8192 cores in groups of SPATIAL_PARTITIONS = 8 (Google's
    # input_partition_dims): 1024 data-parallel, Google's num_shards.
    ('gin/ssd_pod.gin', 1024, GOOGLE_SSD),
    ('gin/ssd_v4_16.gin', 8, GOOGLE_SSD_V4_16),
])
def test_ssd_pod_configs_log_googles_values(tmp_path, gin_file, replicas,
                                            google):
  (tmp_path / 'categories.json').write_text(json.dumps(
      [{'id': i, 'name': str(i)} for i in COCO_IDS]))
  gin.clear_config()
  try:
    gin_config.parse([gin_file], [f"DATA_DIR = '{tmp_path}'",
                                 "BACKBONE_CHECKPOINT = ''"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    model = task.build_model()
    assert model.num_classes == 81 and model.dtype == 'bfloat16'
  finally:
    gin.clear_config()
  logged, lr = pod_hyperparameters(gin_file, 5000, build_model=True,
                                    data_dir=str(tmp_path),
                                    num_replicas=replicas)
  for key, value in google.items():
    assert logged[key] == pytest.approx(value), (key, logged[key], value)
  # ssd_model.learning_rate_schedule in NumPy: linear warmup to base x
  # batch / 32, then x1, x0.1, x0.01 from int(epochs x steps_per_epoch).
  batch, base = google['global_batch_size'], google['opt_base_learning_rate']
  spe = 118287 / batch
  warmup = google['opt_learning_rate_warmup_steps']
  first, second = (int(e * spe) for e in
                   google['opt_learning_rate_decay_boundary_epochs'])
  peak = base * batch / 32
  for step in (0, 1, warmup - 1, warmup, first - 1, first, second, 3000):
    want = (step / warmup * peak if step < warmup else
            peak * (1 if step < first else 0.1 if step < second else 0.01))
    assert float(lr(step)) == pytest.approx(want, rel=1e-6), step
  # Google logs eval epoch_num (cur_step + 145) // 28: 5, 10, ... (pod).
  if gin_file == 'gin/ssd_pod.gin':
    assert [task.mlperf_epoch_num(s, 4096) for s in (145, 290, 2755)] == [
        5.0, 10.0, 98.0]


# Google/results/tpu-v4-128-TF/dlrm/result_0.txt, key by key.
GOOGLE_DLRM = {
    'global_batch_size': 55296, 'train_samples': 4195197692,
    'eval_samples': 89137318, 'opt_base_learning_rate': 23.949,
    'sgd_opt_base_learning_rate': 23.949,
    'sgd_opt_learning_rate_decay_poly_power': 2,
    'sgd_opt_learning_rate_decay_steps': 27772,
    'lr_decay_start_steps': 49315, 'opt_learning_rate_warmup_steps': 2750,
}
# run_and_time.sh --vocab_sizes_embed.
GOOGLE_DLRM_TABLES = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63,
                      38532951, 2953546, 403346, 10, 2208, 11938, 155, 4, 976,
                      14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36)


def test_dlrm_pod_config_logs_googles_values(tmp_path):
  from models.dlrm import task as dlrm_task
  from tools import convert_criteo
  (tmp_path / 'metadata.json').write_text(json.dumps({
      'dense_features': convert_criteo.DENSE_FEATURES,
      'sparse_features': convert_criteo.SPARSE_FEATURES,
      'vocab_sizes': GOOGLE_DLRM_TABLES, 'train_examples': 4195197692,
      'eval_examples': 89137318}))
  logged, lr = pod_hyperparameters('gin/dlrm_pod.gin', 89137318,
                                   data_dir=str(tmp_path), num_replicas=64)
  for key, value in GOOGLE_DLRM.items():
    assert logged[key] == pytest.approx(value), (key, logged[key], value)
  assert float(lr(2750)) == pytest.approx(23.949, rel=1e-6)
  gin.clear_config()
  try:
    gin_config.parse(['gin/dlrm_pod.gin'], [f"DATA_DIR = '{tmp_path}'"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    plan = gin.query_parameter('train.train.plan').scoped_configurable_fn()
    schedule = gin.query_parameter(
        'train.train.schedule').scoped_configurable_fn()
  finally:
    gin.clear_config()
  # The 13 largest of Google's 26 tables, mod-sharded; a bf16 all-reduce;
  # an evaluation every 3,793 steps, numbered as Google's log numbers them.
  assert (plan.embedding_sharding, plan.sharded_tables) == ('mod', 13)
  assert plan.gradients.allreduce_dtype == 'bfloat16'
  assert plan.distribution.accelerator == 'v4-128'
  assert (schedule.eval_every_steps, schedule.train_steps) == (3793, 75860)
  assert [task.mlperf_epoch_num(s, 55296) for s in (3793, 7586, 75860)] == [
      1.0, 2.0, 20.0]
  assert dlrm_task.check_table_sizes(
      task.table_sizes, GOOGLE_DLRM_TABLES,
      convert_criteo.SPARSE_FEATURES) == list(GOOGLE_DLRM_TABLES)


# Google/results/tpu-v3-1024-TF/gnmt/result_0.txt and tpu-v4-16-TF/gnmt,
# key by key (their logs hold no optimizer name or Adam keys).
GOOGLE_GNMT = {
    'global_batch_size': 8192, 'opt_base_learning_rate': 0.0045,
    'opt_learning_rate_alt_decay_func': 'True',
    'opt_learning_rate_alt_warmup_func': 't2t',
    'opt_learning_rate_decay_interval': 241,
    'opt_learning_rate_decay_factor': 0.5,
    'opt_learning_rate_decay_steps': 4,
    'opt_learning_rate_remain_steps': 1924,
    'opt_learning_rate_warmup_steps': 150, 'max_sequence_length': 48,
    'train_samples': 3442299, 'eval_samples': 3003,
}
GOOGLE_GNMT_V4_16 = dict(
    GOOGLE_GNMT, global_batch_size=4096, opt_base_learning_rate=0.003,
    opt_learning_rate_decay_interval=300, opt_learning_rate_remain_steps=3000)


@pytest.fixture
def wmt16_pairs_metadata(tmp_path):
  """A DATA_DIR holding only the metadata.json of WMT16 en-de pairs at
  MLPerf's 48 ids (made-up bucket shares of Google's 3,442,299 pairs)."""
  buckets = [[18, 1400000], [24, 800000], [30, 550000], [36, 350000],
             [42, 200000], [48, 142299]]
  (tmp_path / 'metadata.json').write_text(json.dumps({
      'vocab_size': 32317, 'max_length': 48, 'eval_length': 160,
      'train_pairs': 3442299, 'eval_pairs': 3003, 'layout': 'pairs',
      'buckets': buckets}))
  return str(tmp_path)


@pytest.mark.parametrize('gin_file, replicas, batch, google', [
    ('gin/gnmt_pod.gin', 1024, 8192, GOOGLE_GNMT),
    ('gin/gnmt_v4_16.gin', 8, 4096, GOOGLE_GNMT_V4_16),
])
def test_gnmt_configs_log_googles_values(wmt16_pairs_metadata, gin_file,
                                         replicas, batch, google):
  logged, lr = pod_hyperparameters(gin_file, 3003, num_replicas=replicas,
                                   data_dir=wmt16_pairs_metadata)
  assert_translation_keys(logged, google)
  gin.clear_config()
  try:
    gin_config.parse([gin_file], [f"DATA_DIR = '{wmt16_pairs_metadata}'"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    model = task.build_model()
    every = gin.query_parameter('%EVAL_EVERY_STEPS')
    gradients = gin.query_parameter(
        'distribution.gradients.GradientOptions.clip_norm')
    assert gin.query_parameter(
        'distribution.gradients.GradientOptions.allreduce_dtype') == 'bfloat16'
  finally:
    gin.clear_config()
  assert (model.units, model.dtype, task.beam_size) == (1024, tf.bfloat16, 5)
  assert (task.length_penalty, task.coverage_penalty,
          task.max_decode_length) == (0.6, 0.1, 160)
  assert gradients == 5.0
  # An epoch is 3442299 // batch steps; eval after each logs epoch_num 1, 2.
  assert every == 3442299 // batch == task.data.steps_per_epoch(batch)
  assert [task.mlperf_epoch_num(s, batch) for s in (every, 2 * every)] == [
      1.0, 2.0]
  # Google's learning rate at their warm-up's start and end and decays.
  start = google['opt_learning_rate_remain_steps']
  interval = google['opt_learning_rate_decay_interval']
  base = google['opt_base_learning_rate']
  for step, want in ((0, base * 0.01), (150, base), (start - 1, base),
                     (start, base), (start + interval, base / 2),
                     (start + 10 * interval, base / 16)):
    assert float(lr(step)) == pytest.approx(want, rel=1e-5), step


# Google/results/tpu-v4-16-TF/maskrcnn/result_0.txt, key by key.
GOOGLE_MASKRCNN_V4_16 = {
    'global_batch_size': 128, 'train_samples': 118287, 'eval_samples': 5000,
    'min_image_size': 800, 'max_image_size': 1333,
    'num_image_candidates': 1000, 'opt_base_learning_rate': 0.16,
    'opt_learning_rate_warmup_steps': 1000,
    'opt_learning_rate_warmup_factor': 0.00016,
    'opt_learning_rate_decay_steps': [9750, 13000],
    'opt_learning_rate_decay_factor': 0.1,
}


def numpy_google_maskrcnn_lr(step, *, base, warmup, drops, init=0.0):
  """lr_policy.learning_rate_schedule in NumPy float32."""
  f = np.float32
  lr = (f(init) + f(step) / f(warmup) * (f(base) - f(init)) if step < warmup
        else f(base))
  for mult, start in ((1.0, warmup), (0.1, drops[0]), (0.01, drops[1])):
    if step >= start:
      lr = f(base) * f(mult)
  return lr


# Google/results/tpu-v3-1024-TF/maskrcnn/result_1.txt, key by key.
GOOGLE_MASKRCNN_V3_1024 = dict(
    GOOGLE_MASKRCNN_V4_16, global_batch_size=256, opt_base_learning_rate=0.24,
    opt_learning_rate_warmup_steps=2000,
    opt_learning_rate_warmup_factor=0.00012,
    opt_learning_rate_decay_steps=[6000, 8000])


@pytest.mark.parametrize('gin_file, replicas, google, epoch_steps, total', [
    # 1024 cores in groups of SPATIAL_PARTITIONS = 8: 128 data-parallel.
    ('gin/maskrcnn_pod.gin', 1024, GOOGLE_MASKRCNN_V3_1024, 462, 13861),
    ('gin/maskrcnn_v4_16.gin', 8, GOOGLE_MASKRCNN_V4_16, 924, 18482),
])
def test_maskrcnn_configs_log_googles_values(tmp_path, gin_file, replicas,
                                             google, epoch_steps, total):
  (tmp_path / 'categories.json').write_text(json.dumps(
      [{'id': i, 'name': str(i)} for i in COCO_IDS]))
  logged, lr = pod_hyperparameters(gin_file, 5000, data_dir=str(tmp_path),
                                   num_replicas=replicas)
  for key, value in google.items():
    assert logged[key] == pytest.approx(value), (key, logged[key], value)
  base = google['opt_base_learning_rate']
  warmup = google['opt_learning_rate_warmup_steps']
  drops = google['opt_learning_rate_decay_steps']
  for step in (0, 1, warmup - 1, warmup, drops[0] - 1, drops[0],
               drops[1] - 1, drops[1], total - 1):
    assert float(lr(step)) == numpy_google_maskrcnn_lr(
        step, base=base, warmup=warmup, drops=drops), step
  gin.clear_config()
  try:
    gin_config.parse([gin_file], [
        f"DATA_DIR = '{tmp_path}'", "BACKBONE_CHECKPOINT = ''"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    schedule = gin.query_parameter(
        'train.train.schedule').scoped_configurable_fn()
  finally:
    gin.clear_config()
  # Google's 91 classes (COCO's ids are the classes), 832x1344 inputs,
  # their sampling and detection counts.
  assert task.data.num_classes == 91
  geometry = task.data.geometry
  assert geometry.image_size == (832, 1344) and geometry.max_instances == 100
  assert geometry.gt_mask_size == 112
  assert task.settings == maskrcnn_task_settings()
  # An evaluation every epoch (118287 // batch steps), epoch_num 1, 2, ...
  batch = google['global_batch_size']
  assert schedule.eval_every_steps == epoch_steps
  assert [task.mlperf_epoch_num(s, batch) for s in (
      epoch_steps, 2 * epoch_steps, 18 * epoch_steps)] == [1.0, 2.0, 18.0]
  assert schedule.total_steps(task.data.steps_per_epoch(batch)) == total


def maskrcnn_task_settings():
  from models.maskrcnn import task as maskrcnn_task
  return maskrcnn_task.Settings(
      rpn_batch_size_per_im=256, rpn_pre_nms_topn=2000,
      rpn_post_nms_topn=1000, rpn_nms_threshold=0.7, batch_size_per_im=512,
      fg_fraction=0.25, fg_thresh=0.5, bg_thresh_hi=0.5, test_nms=0.5,
      test_detections_per_image=100, test_rpn_pre_nms_topn=1000,
      test_rpn_post_nms_topn=1000)


# Google/results/tpu-v4-128-TF/minigo/result_0.txt, key by key (their
# train_batch_size is per core; train_samples and eval_samples are the
# games a generation, as their log has them).
GOOGLE_MINIGO = {
    'train_batch_size': 512, 'filter_amount': 1.0, 'window_size': 5,
    'lr_boundaries': '128, 10000, 20000',
    'lr_rates': '0.016, 0.16, 0.016, 0.0016', 'opt_weight_decay': 0.0001,
    'min_selfplay_games_per_generation': 8192, 'train_samples': 8192,
    'eval_samples': 8192, 'num_readouts': 800, 'value_init_penalty': 0.2,
    'holdout_pct': 0.0, 'disable_resign_pct': 0.0, 'resign_threshold': -0.95,
    'parallel_games': 64, 'virtual_losses': 4, 'gating_win_rate': 0.5,
    'eval_games': 100,
}


def test_minigo_pod_config_logs_googles_values():
  logged, lr = pod_hyperparameters('gin/minigo_pod.gin', 8192,
                                   num_replicas=8)
  for key, want in GOOGLE_MINIGO.items():
    assert logged[key] == want, key
  assert logged['global_batch_size'] == 4096
  # tf.train.piecewise_constant: a rate holds through its boundary step.
  for step, want in ((0, 0.016), (128, 0.016), (129, 0.16), (10000, 0.16),
                     (10001, 0.016), (20001, 0.0016)):
    assert float(lr(step)) == pytest.approx(want), step
  gin.clear_config()
  try:
    gin_config.parse(['gin/minigo_pod.gin'], [])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    model = task.build_model()
    optimizer = gin.query_parameter(
        'train.train.optimizer').scoped_configurable_fn()
  finally:
    gin.clear_config()
  options = task.data.selfplay
  assert (task.data.board_size, model.trunk_layers, model.dtype) == (
      19, 6, tf.bfloat16)
  assert (options.fastplay_frequency, options.fastplay_readouts,
          options.dirichlet_alpha, options.noise_mix,
          options.target_pruning) == (0.75, 80, 0.03, 0.3, True)
  assert (task.value_cost_weight, task.match.readouts) == (0.5, 100)
  # Self-play's leaves on the TPU cores, as their TpuDualNet.
  assert task.data.inference == 'device'
  # L2 on kernels and batch norm's gammas, not biases or betas.
  decayed = sorted(v.name for v in model.trainable_variables
                   if optimizer.takes_decay(v))
  assert decayed and all(n.endswith(('/kernel:0', '/gamma:0'))
                         for n in decayed)
  assert any(n.endswith('/gamma:0') for n in decayed)


def test_minigo_9x9_config_is_the_reference_flags():
  """mlcommons/training@373dfed reinforcement/tensorflow/minigo/ml_perf/
  flags/9/*.flags, value by value."""
  logged, lr = pod_hyperparameters('gin/minigo_9x9.gin', 4096,
                                   num_replicas=1)
  assert (logged['train_batch_size'], logged['filter_amount'],
          logged['window_size'], logged['num_readouts'],
          logged['virtual_losses'], logged['disable_resign_pct'],
          logged['min_selfplay_games_per_generation']) == (
              4096, 0.3, 5, 240, 2, 1.0, 4096)
  assert logged['resign_threshold'] == pytest.approx(-0.9)
  assert (logged['lr_boundaries'], logged['lr_rates']) == (
      '25000, 37500', '0.16, 0.016, 0.0016')
  assert float(lr(25001)) == pytest.approx(0.016)
  gin.clear_config()
  try:
    gin_config.parse(['gin/minigo_9x9.gin'], [])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    model = task.build_model()
  finally:
    gin.clear_config()
  options = task.data.selfplay
  assert (task.data.board_size, model.trunk_layers) == (9, 9)
  assert (options.fastplay_frequency, options.dirichlet_alpha,
          options.search.value_init_penalty, task.match.readouts) == (
              0.0, 0.135, 0.2, 240)
