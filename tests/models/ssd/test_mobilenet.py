"""SSD-MobileNet-v1 (MLPerf Inference v0.5's `ssd-mobilenet`): the pyramid
the TF object-detection API builds, its default boxes against a NumPy port
of the API's `create_ssd_anchors`, and the backbone from a MobileNet-v1
checkpoint of this suite."""

import math

import gin
import numpy as np
import pytest
import tensorflow as tf

from core import config as gin_config
from input_pipeline import ssd_boxes
from models.common import backbone_checkpoint
from models.common import layers
from models.common import mobilenet
from models.ssd import model as ssd_lib
from models.ssd import features as ssd_features
from models.ssd import task as ssd_task

# gin/models/ssd_mobilenet.gin's geometry.
GEOMETRY = ssd_boxes.Geometry(
    image_size=300, feature_sizes=(19, 10, 5, 3, 2, 1),
    steps=(300 / 19, 30, 60, 100, 150, 300),
    scales=(60, 105, 150, 195, 240, 285, 300),
    aspect_ratios=((2,),) + ((2, 3),) * 5, reduce_lowest_layer=True)


def ssd_mobilenet(**kwargs):
  return ssd_lib.SSD(features=ssd_features.MobileNetFeatures, **kwargs)


def api_ssd_anchors(feature_sizes, num_layers=6, min_scale=0.2,
                    max_scale=0.95,
                    aspect_ratios=(1.0, 2.0, 3.0, 1.0 / 2, 1.0 / 3)):
  """The object-detection API's create_ssd_anchors (reduce_boxes_in_lowest_
  layer, interpolated ratio 1.0, base size 1) and tile_anchors in NumPy:
  per level [N, 4] (cy, cx, h, w), strides 1 / size, offsets half of it."""
  scales = [min_scale + (max_scale - min_scale) * i / (num_layers - 1)
            for i in range(num_layers)] + [1.0]
  levels = []
  for layer, (scale, scale_next) in enumerate(zip(scales[:-1], scales[1:])):
    if layer == 0:
      specs = [(0.1, 1.0), (scale, 2.0), (scale, 0.5)]
    else:
      specs = [(scale, r) for r in aspect_ratios]
      specs.append((np.sqrt(scale * scale_next), 1.0))
    size = feature_sizes[layer]
    stride = 1.0 / size
    rows = []
    for i in range(size):
      for j in range(size):
        for s, r in specs:
          rows.append((i * stride + 0.5 * stride, j * stride + 0.5 * stride,
                       s / math.sqrt(r), s * math.sqrt(r)))
    levels.append(np.array(rows))
  return levels


def test_the_model_files_default_boxes_are_the_apis_anchors():
  ours = ssd_boxes.default_boxes(GEOMETRY)
  assert GEOMETRY.boxes_per_cell == (3, 6, 6, 6, 6, 6)
  assert GEOMETRY.num_boxes == len(ours) == 1917  # The API's 1,917 anchors.
  start = 0
  for size, k, api in zip(GEOMETRY.feature_sizes, GEOMETRY.boxes_per_cell,
                          api_ssd_anchors(GEOMETRY.feature_sizes)):
    level = ours[start:start + size * size * k]
    start += size * size * k
    # Ours clips h and w to the image (the API does not): 3 of the largest.
    api[:, 2:] = np.minimum(api[:, 2:], 1.0)
    key = lambda a: np.lexsort(np.round(a, 5).T[::-1])
    np.testing.assert_allclose(level[key(level)], api[key(api)], atol=1e-6)


def test_pyramid_is_blocks_11_and_13_then_four_extra_layers():
  model = ssd_mobilenet(num_classes=91, geometry=GEOMETRY)
  assert model.features.feature_sizes(300) == (19, 10, 5, 3, 2, 1)
  assert model.out_channels == (512, 1024, 512, 256, 256, 128)
  # The API's layer names say it: 1x1 of half the depth, 3x3 stride 2.
  assert model.params['ssd/extra2-conv1x1/kernel'].shape == (1, 1, 1024, 256)
  assert model.params['ssd/extra2-conv3x3/kernel'].shape == (3, 3, 256, 512)
  assert model.params['ssd/extra5-conv3x3/kernel'].shape == (3, 3, 64, 128)
  assert 'ssd/extra5-conv3x3/bias' not in model.params  # Batch norm instead.
  assert 'ssd/extra5-conv3x3/bn/moving_mean' in model.state
  # 1x1 heads (the config's kernel_size 1): 3 boxes x 91 classes on 19x19.
  assert model.params['ssd/class_net/class-3/kernel'].shape == (1, 1, 512, 273)
  assert model.params['ssd/box_net/box-8/kernel'].shape == (1, 1, 128, 24)
  weights = sum(int(np.prod(v.shape)) for v in model.params.values())
  assert weights == 6_819_839  # MobileNet-v1's 3.2 M without its classifier.
  classes, boxes, updates = model(tf.zeros([1, 300, 300, 3]), training=True)
  assert classes.shape == (1, 1917, 91) and boxes.shape == (1, 1917, 4)
  assert set(updates) == set(model.state)


def test_maps_are_the_backbones_blocks_and_pixels_go_to_minus_one_one():
  model = ssd_mobilenet(num_classes=5, width_multiplier=0.25,
                        geometry=GEOMETRY, seed=3)
  images = tf.random.stateless_uniform([2, 300, 300, 3], [1, 2])
  normalized = model.normalize(images)
  np.testing.assert_allclose(normalized, images * 2 - 1, atol=1e-6)
  maps, _ = model.features(normalized, training=False)
  blocks, _ = model.backbone.features(normalized, training=False)
  np.testing.assert_array_equal(maps[0], blocks[11])
  np.testing.assert_array_equal(maps[1], blocks[13])
  # Width 1/4 with the API's min_depth 16: conv0's 8 channels become 16.
  assert model.backbone.channels[0] == 16
  assert [m.shape[1] for m in maps] == [19, 10, 5, 3, 2, 1]


def saved_mobilenet(tmp_path, width, min_depth=16):
  net = mobilenet.MobileNetV1(width_multiplier=width, min_depth=min_depth,
                              num_classes=10, seed=5)
  rng = np.random.default_rng(0)
  for v in net.state.values():
    v.assign(rng.uniform(0.5, 2.0, v.shape).astype(np.float32))
  return net, tf.train.Checkpoint(model=net).save(str(tmp_path / 'm'))


def test_backbone_loads_from_a_mobilenet_checkpoint_of_this_suite(tmp_path):
  net, path = saved_mobilenet(tmp_path, 0.25)
  model = ssd_mobilenet(num_classes=5, width_multiplier=0.25,
                        geometry=GEOMETRY)
  backbone = {**model.backbone.params, **model.backbone.state}
  assert model.load_backbone(path) == len(backbone)
  for name, var in backbone.items():
    np.testing.assert_array_equal(var, {**net.params, **net.state}[name])
  assert not any('logits' in name for name in model.params)


def test_a_mobilenet_of_another_min_depth_is_refused_naming_the_layer(
    tmp_path):
  _, path = saved_mobilenet(tmp_path, 0.25, min_depth=8)
  model = ssd_mobilenet(num_classes=5, width_multiplier=0.25,
                        geometry=GEOMETRY)
  before = model.params['mobilenet/conv0/kernel'].numpy()
  with pytest.raises(ValueError, match=r'mobilenet/conv0/kernel: shape .* '
                     r'in checkpoint .*min_depth'):
    model.load_backbone(path)
  np.testing.assert_array_equal(model.params['mobilenet/conv0/kernel'],
                                before)


def test_spatial_partitioning_is_refused_with_the_binding_to_change():
  with pytest.raises(ValueError, match='MobileNet-v1 has no spatial '
                     'partitioning.*SPATIAL_PARTITIONS'):
    ssd_mobilenet(num_classes=5, width_multiplier=0.25, geometry=GEOMETRY,
                  spatial_partitions=2)


def test_model_file_builds_the_v05_task_on_the_mobilenet_pyramid():
  gin.clear_config()
  try:
    gin_config.parse(['gin/run.gin', 'gin/models/ssd_mobilenet.gin',
                      'gin/hardware/cpu.gin'], ["DATA_DIR = '/nowhere'"])
    task = gin.query_parameter('%TASK').scoped_configurable_fn()
    features = gin.query_parameter('models.ssd.model.SSD.features')
  finally:
    gin.clear_config()
  assert type(task).__name__ == 'SsdMobileNetTask'
  assert task.mlperf_benchmark == task.inference_model == 'ssd-mobilenet'
  assert task.inference_performance_samples == 256
  assert task.target_quality == 0.22
  assert task.data.geometry == GEOMETRY
  assert features.selector == 'models.ssd.features.MobileNetFeatures'


def test_quantization_aware_ssd_computes_with_every_kernel_on_its_grid():
  """Every kernel, the backbone's, the extra layers' and the heads', goes
  through layers.int8_kernel: the model equals a plain one holding the
  rounded kernels (a layer left out would differ)."""
  kwargs = dict(num_classes=5, width_multiplier=0.25, geometry=GEOMETRY,
                seed=3)
  aware = ssd_mobilenet(quantization_aware=True, **kwargs)
  plain = ssd_mobilenet(**kwargs)
  kernels = 0
  for name, var in aware.params.items():
    value = var
    if name.endswith('/kernel'):
      axis = 2 if '/depthwise/' in name else -1
      value = layers.int8_kernel(var, axis)
      kernels += 1
    plain.params[name].assign(value)
  assert kernels == 27 + 8 + 12  # Backbone, extra layers, heads.
  images = tf.random.stateless_uniform([1, 300, 300, 3], [4, 5]) * 2 - 1
  got = aware(images, training=False)[:2]
  want = plain(images, training=False)[:2]
  # (Relative: the untrained network's outputs are tiny.)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-4,
                               atol=1e-5 * np.abs(w).max())
  # The rounding matters: the float kernels give other outputs.
  unrounded = ssd_mobilenet(**kwargs)(images, training=False)[0]
  assert (np.abs(unrounded - got[0]).max() >
          1e-3 * np.abs(unrounded).max())


def test_resnet_pyramid_refuses_quantization_aware_naming_the_binding():
  with pytest.raises(ValueError,
                     match='models.ssd.model.SSD.quantization_aware'):
    ssd_lib.SSD(features=ssd_features.ResNetFeatures, num_classes=5,
                quantization_aware=True, width_multiplier=0.25,
                geometry=GEOMETRY)


def test_whole_ssd_loads_from_the_model_dir_of_a_run_of_this_suite(tmp_path):
  kwargs = dict(num_classes=5, width_multiplier=0.25, geometry=GEOMETRY)
  trained = ssd_mobilenet(seed=1, **kwargs)
  rng = np.random.default_rng(0)
  for v in trained.state.values():
    v.assign(rng.uniform(0.5, 2.0, v.shape).astype(np.float32))
  # As the suite's Checkpointer lays a run out: model_dir/checkpoints/.
  tf.train.Checkpoint(model=trained).save(
      str(tmp_path / 'run' / 'checkpoints' / 'ckpt'))
  model = ssd_mobilenet(seed=2, **kwargs)
  variables = {**model.params, **model.state}
  assert backbone_checkpoint.load_model(
      model, str(tmp_path / 'run'), what='ssd-mobilenet',
      flag='INIT_CHECKPOINT') == len(variables)
  for name, var in variables.items():
    np.testing.assert_array_equal(var, {**trained.params,
                                        **trained.state}[name])
  wider = ssd_mobilenet(seed=2, **{**kwargs, 'width_multiplier': 0.5})
  with pytest.raises(ValueError, match='shape .* in checkpoint .*WIDTH'):
    backbone_checkpoint.load_model(wider, str(tmp_path / 'run'),
                                   what='ssd-mobilenet',
                                   flag='INIT_CHECKPOINT')
  with pytest.raises(ValueError, match='No checkpoint at .*INIT_CHECKPOINT'):
    backbone_checkpoint.load_model(model, str(tmp_path / 'none'),
                                   what='ssd-mobilenet',
                                   flag='INIT_CHECKPOINT')


def test_a_fine_tune_refuses_a_backbone_checkpoint_too():
  with pytest.raises(ValueError, match='BACKBONE_CHECKPOINT and '
                     'INIT_CHECKPOINT are both set'):
    ssd_task.SsdTask(model=None, data=None, backbone_checkpoint='a',
                     init_checkpoint='b')
