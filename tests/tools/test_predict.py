"""The time-to-train model (tools/predictor, tools/predict.py): XLA's counts, the
torus sums against their formula, convergence from the published points,
the fitted constant reproducing its row, the comparison table in
docs/benchmarks.md as the command prints it, and one-line errors."""

import dataclasses
import glob
import math
import os
import re
import subprocess

import pytest

from tests import helpers
from tools.predictor import collectives
from tools.predictor import compare
from tools.predictor import convergence
from tools.predictor import cost as cost_lib
from tools.predictor import costs_file
from tools.predictor import hardware
from tools.predictor import model
from tools.predictor import xla_cost


def run_predict(*args):
  return subprocess.run(
      [helpers.PYTHON, '-m', 'tools.predict', *args], cwd=helpers.ROOT,
      capture_output=True, text=True, check=False, timeout=600,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT))


def test_every_chip_names_its_public_source():
  for chip in hardware.CHIPS.values():
    assert chip.sources and all(s.startswith('https://') for s in chip.sources)
    assert chip.peak_flops > 1e13 and chip.allreduce_bytes_per_s > 1e10
  # The v3 page's pod figures: 123 TFLOP/s a chip, 340 TB/s over 1,024.
  assert hardware.chip('v3').allreduce_bytes_per_s == pytest.approx(332e9,
                                                                    rel=0.01)
  with pytest.raises(ValueError, match=r"No public specification of 'v7'.*"
                     r'v2, v3, v4, v5e, v5p, v6e, v100'):
    hardware.chip('v7')


def test_a_ring_sum_is_the_bandwidth_optimal_formula():
  v100 = hardware.chip('v100')
  megabytes = 100e6
  # One ring of 8: a reduce-scatter and an all-gather of 7/8 of the bytes.
  expected = 2 * (7 / 8) * megabytes / v100.allreduce_bytes_per_s
  assert collectives.all_reduce_seconds(v100, 8, megabytes) == pytest.approx(
      expected)
  v3 = hardware.chip('v3')
  assert collectives.torus_shape(v3, 4096) == (128, 32)
  assert collectives.torus_shape(v3, 16) == (4, 4)
  assert collectives.torus_shape(hardware.chip('v4'), 64) == (4, 4, 4)
  # 2-D: 127/128 of B on the long side at half the chip's bandwidth, then
  # 31/32 of B/128 on the short side.
  per_dim = v3.allreduce_bytes_per_s / 2
  two_d = 2 * ((127 / 128) * megabytes / per_dim +
               (31 / 32) * megabytes / 128 / per_dim)
  assert collectives.all_reduce_seconds(v3, 4096, megabytes) == pytest.approx(
      two_d)
  # A v4 side of 2 has no wraparound: its ring runs at half the bandwidth.
  v4 = hardware.chip('v4')
  assert collectives.describe(v4, 8) == '2x2x2 mesh'
  per_line = v4.allreduce_bytes_per_s / 3 / 2
  assert collectives.all_reduce_seconds(v4, 8, megabytes) == pytest.approx(
      2 * (1 / 2) * megabytes * (1 + 1 / 2 + 1 / 4) / per_line)


def test_a_small_sum_costs_its_hops():
  # 2 (n - 1) hops a side of the group's most balanced grid, a microsecond
  # each (the published TPU-v3 link latency, cited beside the constant).
  v3, v4 = hardware.chip('v3'), hardware.chip('v4')
  assert collectives.HOP_SECONDS == 1e-6
  with open(collectives.__file__) as f:
    assert 'astra-sim.github.io/astra-sim-docs/validation/hardware/' in (
        f.read())
  assert collectives.latency_seconds(v3, 1) == 0
  assert collectives.latency_seconds(v3, 0.5) == 0  # Two cores of a chip.
  assert collectives.latency_seconds(v3, 4096) == pytest.approx(
      2 * (127 + 31) * 1e-6)  # The Multipod's 128x32.
  assert collectives.latency_seconds(v4, 8) == pytest.approx(6e-6)  # 2x2x2
  assert collectives.latency_seconds(v4, 64) == pytest.approx(18e-6)
  assert collectives.latency_seconds(v4, 3) == pytest.approx(4e-6)  # As 4.


def test_batch_norm_and_halo_sums_come_from_the_config():
  """The group sums of Google's SSD and ResNet-50 recipes, by hand."""
  from tools.predictor import configs

  def group_sums(path, accelerator, bindings=(), global_batch=None):
    run, _ = configs.read([path], list(bindings))
    # Another slice's batch keeps the config's span (as compare's rows).
    run = dataclasses.replace(run, global_batch=global_batch or
                              run.global_batch)
    return model.predict(cost=costs_file.lookup([path], []),
                         machine_=model.machine(accelerator), run=run,
                         efficiency=0.5, samples=1e7).group_sums

  # The built models' layers: ResNet-50's 53 convolutions each with a batch
  # norm, 17 wider than a row (the 7x7 stem, sixteen 3x3); SSD's ResNet-34
  # features 29 and 42 (with the heads' 3x3s); Mask R-CNN's batch norms
  # are frozen (moving statistics, no sums).
  resnet = costs_file.lookup(['gin/resnet50_pod.gin'], [])
  ssd = costs_file.lookup(['gin/ssd_pod.gin'], [])
  assert (resnet.bn_layers, resnet.window_convs) == (53, 17)
  assert (ssd.bn_layers, ssd.window_convs) == (29, 42)
  assert costs_file.lookup(['gin/maskrcnn_pod.gin'], []).bn_layers == 0
  # SSD on the Multipod: 4 images a replica of 8 cores (4 chips), batch
  # norms over 16 replicas (64 images, 64 chips: 8x8, 28 hops), halos
  # within a replica's 4 chips (2x2, 4 hops); two sums a layer a step.
  run, _ = configs.read(['gin/ssd_pod.gin'], [])
  assert run.bn_span == 64 and run.spatial_partitions == 8
  assert group_sums('gin/ssd_pod.gin', 'v3-8192') == pytest.approx(
      2 * 29 * 28e-6 + 2 * 42 * 4e-6)
  # ResNet-50's span of 64 images: 8 replicas (cores: 4 chips, 2x2) on the
  # Multipod; on a v4-512 at 8,192 images, 32 a chip, groups of 2 chips.
  assert group_sums('gin/resnet50_pod.gin', 'v3-8192') == pytest.approx(
      2 * 53 * 4e-6)
  assert group_sums('gin/resnet50_pod.gin', 'v4-512',
                    global_batch=8192) == pytest.approx(2 * 53 * 2e-6)
  # 128 images a chip on a v4-128: each its own statistics, no sums; and
  # none for BN_GROUP_SIZE 1; all replicas (a 4x4x4 torus) for 0.
  assert group_sums('gin/resnet50_pod.gin', 'v4-128',
                    global_batch=8192) == 0
  assert group_sums('gin/resnet50_v3_32.gin', 'v3-32') == 0
  assert group_sums('gin/resnet50_pod.gin', 'v4-128', ['BN_GROUP_SIZE = 0'],
                    global_batch=8192) == pytest.approx(2 * 53 * 18e-6)


def test_layer_counts_are_trained_batch_norms_and_wide_windows():
  import tensorflow as tf
  module = tf.Module()
  module.vars = [
      tf.Variable(tf.ones([4]), name='a/gamma'),
      tf.Variable(tf.zeros([4]), name='a/moving_mean', trainable=False),
      tf.Variable(tf.ones([4]), name='b/gamma', trainable=False),  # Frozen.
      tf.Variable(tf.zeros([4]), name='b/moving_mean', trainable=False),
      tf.Variable(tf.zeros([3, 3, 4, 4]), name='c/kernel'),
      tf.Variable(tf.zeros([1, 1, 4, 4]), name='d/kernel'),
      tf.Variable(tf.zeros([7, 7, 4, 4]), name='e/kernel', trainable=False),
  ]
  # A frozen convolution still exchanges its halo; a frozen norm no sums.
  assert cost_lib.layer_counts(module) == {'bn_layers': 1, 'window_convs': 2}


def test_xla_counts_a_matmul_as_two_flops_a_multiply_add():
  from core import startup
  startup.import_tensorflow()
  import tensorflow as tf
  a = tf.zeros([128, 256])
  b = tf.zeros([256, 512])
  step = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x, y: tf.matmul(x, y), (a, b), batch=128)
  assert step.flops == 2 * 128 * 256 * 512
  assert step.kernels >= 1
  # Without the compile (the smaller batches of a measure): no kernels.
  flops_only = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x, y: tf.matmul(x, y), (a, b), batch=128, kernels=False)
  assert (flops_only.flops, flops_only.kernels) == (step.flops, 0)


def test_kernels_are_counted_after_fusion():
  # Ten elementwise ops fuse into the kernel one does; a second matmul is a
  # kernel more.
  from core import startup
  startup.import_tensorflow()
  import tensorflow as tf
  a = tf.zeros([64, 64])

  def chain(x, y, n):
    z = tf.matmul(x, y)
    for _ in range(n):
      z = tf.nn.relu(z * 1.5 + 0.5)
    return z

  one = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x, y: chain(x, y, 1), (a, a), batch=64)
  ten = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x, y: chain(x, y, 10), (a, a), batch=64)
  two = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x, y: tf.matmul(chain(x, y, 1), y), (a, a), batch=64)
  assert ten.flops > one.flops
  assert ten.kernels == one.kernels >= 1
  assert two.kernels > one.kernels
  # The count ignores what launches nothing.
  text = ('HloModule m\n\nENTRY %main (p: f32[2]) -> f32[2] {\n'
          '  %p = f32[2]{0} parameter(0)\n'
          '  %c = f32[] constant(1)\n'
          '  %f = f32[2]{0} fusion(f32[2]{0} %p), kind=kLoop\n'
          '  ROOT %d = f32[2]{0} copy(f32[2]{0} %f)\n}\n')
  assert xla_cost.kernels(text) == 2
  # A conditional launches its larger branch (Mask R-CNN's step is a
  # conditional of its two orientations): XLA's compile of one.
  p = tf.constant(True)
  both = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x, y, p: tf.cond(p, lambda: chain(x, y, 1),
                              lambda: tf.matmul(chain(x, y, 1), y)),
      (a, a, p), batch=64)
  assert both.kernels > two.kernels


def test_the_stored_costs_agree_with_the_textbook_counts():
  """The only FLOP formulas here: a cross-check of XLA's counts."""
  resnet = costs_file.lookup(['gin/resnet50_pod.gin'], [])
  per_image = resnet.train_flops(16) - resnet.train_flops(15)
  # ResNet-50 v1.5: 4.1 G multiply-adds forward; training about 3x.
  assert per_image == pytest.approx(3 * 2 * 4.1e9, rel=0.05)
  assert resnet.parameters == 25557032
  bert = costs_file.lookup(['gin/bert_pod.gin'], [])
  per_sequence = bert.train_flops(2) - bert.train_flops(1)
  # BERT-large: 6 FLOPs a non-embedding parameter a token (forward and
  # backward), attention's 12 x layers x seq^2 x hidden, and the masked-LM
  # output layer (the word embeddings) at the 76 masked positions.
  embeddings = (30522 + 512 + 2) * 1024
  expected = (6 * (bert.parameters - embeddings) * 512 +
              12 * 24 * 512**2 * 1024 + 6 * 76 * 1024 * 30522)
  assert per_sequence == pytest.approx(expected, rel=0.05)


def test_the_transformer_and_dlrm_costs_agree_with_the_textbook_counts():
  d, ff, vocab = 1024, 4096, 33708
  encoder, decoder = 6 * (4 * d * d + 2 * d * ff), 6 * (8 * d * d + 2 * d * ff)
  mt = costs_file.lookup(['gin/transformer_pod.gin'], [])
  assert mt.parameters == pytest.approx(encoder + decoder + vocab * d,
                                        rel=0.001)
  # A packed row: 256 source and 256 target positions, 6 FLOPs a weight a
  # token, attention's 12 s^2 d in 18 attention layers.
  per_row = mt.train_flops(2) - mt.train_flops(1)
  assert per_row == pytest.approx(
      6 * 256 * (encoder + decoder + vocab * d) + 18 * 12 * 256**2 * d,
      rel=0.05)
  # A sentence's beam search, every one of its 97 + 50 steps counted (XLA
  # counts the loop's body once; cost.SearchingEval adds the rest): the
  # encoder once, then 4 hypotheses a step through the decoder and softmax.
  per_sentence = mt.eval_flops(2) - mt.eval_flops(1)
  steps = 97 + 50
  assert per_sentence == pytest.approx(
      2 * 97 * encoder + steps * 4 * (2 * (decoder + vocab * d) +
                                      4 * 6 * d * (steps + 97)), rel=0.1)
  # DLRM all-reduces its MLPs and the 13 tables Google kept whole (the 13
  # largest are split over the replicas: EMBEDDING_SHARDING).
  from input_pipeline import clicks
  dlrm = costs_file.lookup(['gin/dlrm_pod.gin'], [])
  layers = [(13, 512), (512, 256), (256, 128), (128 + 27 * 26 // 2, 1024),
            (1024, 1024), (1024, 512), (512, 256), (256, 1)]
  whole = sorted(clicks.CRITEO_TERABYTE_VOCAB_SIZES)[:13]
  assert dlrm.dense_parameters == (sum(a * b + b for a, b in layers) +
                                   128 * sum(whole))


def test_gnmts_cost_counts_every_step_of_every_bucket():
  """GNMT's count against the textbook: XLA counts a while loop's body
  once, so the stored count must be of the loops written out (every step
  of a bucket) and of every bucket at its share of the pairs, not the
  longest's alone."""
  from input_pipeline import length_buckets
  u, vocab = 1024, 32317
  shares = [(length, pairs) for length, pairs in
            length_buckets.SYNTHETIC_METADATA['buckets']]
  mean_length = sum(l * p for l, p in shares) / sum(p for _, p in shares)
  assert mean_length == pytest.approx(28.68, abs=0.01)
  # A position's forward multiply-adds (x 2 FLOPs): the encoder's five
  # layers' (input + recurrent) widths 11 u x 4 u, the attention layer's
  # three 4 u kernels, query and memory kernels, the decoder's three layers
  # on [h, context] (9 u x 4 u), the output projection; training takes
  # three times the forward (the input's, the kernels' and the state's
  # gradients).
  forward = 2 * (11 * u * 4 * u + 3 * u * 4 * u + 2 * u * u +
                 9 * u * 4 * u + u * vocab)
  for config in ('gin/gnmt_pod.gin', 'gin/gnmt_v4_16.gin'):
    gnmt = costs_file.lookup([config], [])
    low, high = sorted(p.batch for p in gnmt.train)
    per_pair = (gnmt.train_flops(high) - gnmt.train_flops(low)) / (
        high - low)
    assert per_pair == pytest.approx(3 * forward * mean_length, rel=0.1)
    # A sentence's eval: the encoder over 160 ids, then 160 decoder steps of
    # 5 hypotheses (cost.SearchingEval adds the 159 XLA does not count).
    encoder = 2 * 11 * u * 4 * u * 160
    step = 2 * (3 * u * 4 * u + u * u + 9 * u * 4 * u + u * vocab)
    per_sentence = (gnmt.eval_flops(high) - gnmt.eval_flops(low)) / (
        high - low)
    assert per_sentence == pytest.approx(encoder + 160 * 5 * step, rel=0.1)


def test_minigo_is_priced_from_measured_rates_not_fitted(tmp_path):
  from tools import predict
  from tools.predictor import configs
  from tools.predictor import minigo
  # The step model still refuses it, with the reason.
  with pytest.raises(configs.SelfPlayConfig, match='self-play'):
    configs.read(['gin/minigo_pod.gin'], [])
  out = predict.predict_one(['gin/minigo_pod.gin'], [], 'v4-128')
  assert out.startswith('gin/minigo_pod.gin on v4-128: 64 chips, 16 hosts; '
                        'built from measured rates, not fitted'), out
  # The arithmetic: 8,192 games x 250 moves over the measured rate on 16
  # hosts' 120 cores; the network's FLOPs over 64 chips' peak.
  rates = minigo.load_rates()
  positions = 8192 * 250
  search = positions / (rates['search_positions_a_second_a_core'] * 120 * 16)
  assert f'search         {search / 60:.1f} min on 16 hosts' in out
  flops = minigo.network_flops(19, 6, 64)
  network = positions * rates['leaves_a_position'] * flops / (64 * 275e12)
  assert f'network        {network:.1f} s on 64 chips at peak' in out
  # Fewer readouts than the rates' are said.
  fewer = predict.predict_one(['gin/minigo_pod.gin'], ['NUM_READOUTS = 100'],
                              'v4-128')
  assert 'warning        the rates were measured at 800 readouts' in fewer
  # Without the rates, the command that measures them.
  with pytest.raises(FileNotFoundError, match='minigo_pod_selfplay'):
    minigo.load_rates(str(tmp_path / 'none.json'))
  # A damaged or partial file: one line naming it and the fix.
  bad = tmp_path / 'rates.json'
  bad.write_text('{"search_positions_a_second_a_core": 8.3')
  with pytest.raises(ValueError, match='rates.json is not JSON .*--store'):
    minigo.load_rates(str(bad))
  bad.write_text('{"search_positions_a_second_a_core": 8.3}')
  with pytest.raises(ValueError, match='rates.json lacks leaves_a_position'):
    minigo.load_rates(str(bad))


def test_minigos_network_flops_are_xlas_count():
  from core import startup
  startup.import_tensorflow()
  import tensorflow as tf
  from models.minigo import model as minigo_model
  from tools.predictor import minigo
  net = minigo_model.DualNet(board_size=9, trunk_layers=2, conv_width=16,
                             fc_width=16, seed=0)
  x = tf.zeros([8, 9, 9, 13])
  step = cost_lib._step_cost(  # pylint: disable=protected-access
      lambda x: net(x, training=False)[:2], (x,), batch=8)
  assert step.flops / 8 == pytest.approx(
      minigo.network_flops(9, 2, 16, fc=16), rel=0.05)


def test_every_pod_and_slice_config_is_answered():
  from tools import predict
  configs = sorted(glob.glob(os.path.join(helpers.ROOT, 'gin', '*_pod.gin')) +
                   glob.glob(os.path.join(helpers.ROOT, 'gin', '*_v3_32.gin')) +
                   glob.glob(os.path.join(helpers.ROOT, 'gin', '*_v4_16.gin')))
  # MiniGo's is priced from measured rates; every other one predicted.
  assert len(configs) == 14
  answered = 0
  for path in configs:
    config = os.path.relpath(path, helpers.ROOT)
    benchmark = os.path.basename(config).split('_')[0]
    out = predict.predict_one([config], [], '')
    assert out.startswith(f'{config} on v'), out
    if benchmark == 'minigo':
      assert 'built from measured rates, not fitted' in out
      continue
    assert re.search(r'time to train  \d', out), out
    assert 'fitted: efficiency' in out
    answered += 1
  assert answered == 13


def test_no_fit_names_the_true_reason():
  from tools.predictor import compare
  fitted = compare.load_fit()
  # A generation Google did not run the benchmark on.
  assert compare.no_fit_reason('ssd', 'v5e', fitted).startswith(
      'Google ran no ssd on v5e in v0.7 (its ssd folders: v3-4096-JAX, '
      'v3-8192-TF, v4-128-TF, v4-16-TF, v4-512-TF; fitted on v3, v4)')
  # One it ran but the suite fits nowhere yet.
  unfitted = {k: v for k, v in fitted.items() if not k.startswith('ssd ')}
  assert compare.no_fit_reason('ssd', 'v4', unfitted).startswith(
      'No efficiency is fitted for ssd yet, although Google ran it in v0.7')
  # One it ran on that generation, fitted elsewhere: refit.
  v3_only = {k: v for k, v in fitted.items() if k != 'ssd v4'}
  assert 'although Google ran v4-128-TF, v4-16-TF, v4-512-TF: refit' in (
      compare.no_fit_reason('ssd', 'v4', v3_only))
  assert compare.no_fit_reason('minigo', 'v3', fitted).startswith(
      'No efficiency is fitted for minigo yet, although Google ran it')
  # A config whose step was never counted: the command that counts it.
  with pytest.raises(ValueError, match=r'No XLA cost of gin/gnmt_quickstart'
                     r'.gin .*measure it first \(python -m tools.predict '
                     r'--measure --gin_file=gin/gnmt_quickstart.gin'):
    costs_file.lookup(['gin/gnmt_quickstart.gin'], [])


@pytest.mark.slow
def test_a_step_is_linear_in_the_batch_as_interpolated(tmp_path):
  """XLA's count at a third batch against the line through two (the
  quickstart ResNet, small)."""
  files = ['gin/resnet_quickstart.gin']
  params = [helpers.SMALL_RESNET]
  program = cost_lib.measure(files, params, (2, 8))
  third = cost_lib.measure(files, params, (4, 6))
  for point in third.train:
    assert program.train_flops(point.batch) == pytest.approx(point.flops,
                                                             rel=1e-3)
  assert program.train_flops(2) < program.train_flops(8)
  assert program.parameters > 0


def test_convergence_points_come_from_their_sources():
  points = {p.global_batch: p for p in convergence.points_for('resnet')}
  assert 'Google v0.7' in points[65536].source
  assert points[65536].samples == pytest.approx(88 * 1281167, rel=0.03)
  assert 'MLCommons RCP' in points[32768].source
  between = convergence.samples_to_target('resnet', 16384)
  assert points[13056].samples < between.samples < points[32768].samples
  assert len(between.sources) == 2 and not between.warning
  outside = convergence.samples_to_target('bert', 65536)
  assert 'outside the bert convergence data (256..8192)' in outside.warning
  with pytest.raises(ValueError, match="No convergence data for 'minigo'"):
    convergence.samples_to_target('minigo', 0)
  dlrm = convergence.samples_to_target('dlrm', 55296)
  # Google's v4-128 runs: the 18th eval, each 5% of the 4.2 billion clicks.
  assert dlrm.samples == pytest.approx(18 * 0.05 * 4195197692)


def _program(flops_per_example=1e9, update=1e8, parameters=1000000,
             kernels=0.0, bn_layers=0, window_convs=0):
  points = [cost_lib.StepCost(b, update + flops_per_example * b, 0.0, 0.0,
                              kernels) for b in (1, 2)]
  return cost_lib.ProgramCost(config={}, train=points, eval=points,
                              parameters=parameters,
                              dense_parameters=parameters,
                              bn_layers=bn_layers, window_convs=window_convs)


def _run(**overrides):
  fields = dict(benchmark='resnet', global_batch=1024, eval_batch=1024,
                eval_every_steps=100, eval_samples=50000)
  fields.update(overrides)
  return model.Run(**fields)


def test_a_prediction_is_its_parts():
  machine = model.machine('v3-32')
  assert (machine.chips, machine.replicas) == (16, 32)
  p = model.predict(cost=_program(), machine_=machine, run=_run(),
                    efficiency=0.5, samples=1024 * 1000)
  speed = hardware.chip('v3').peak_flops / 2 * 0.5
  assert p.per_replica_batch == 32
  assert p.compute == pytest.approx(32e9 / speed)
  assert p.update == pytest.approx(1e8 / speed)
  # The bytes over the bandwidth, and a 4x4 torus's 2 x (3 + 3) hops.
  assert p.gradient_sum == pytest.approx(collectives.all_reduce_seconds(
      hardware.chip('v3'), 16, 4e6) + 12e-6)
  assert p.group_sums == 0
  assert p.steps == 1000 and p.evals == 10
  assert p.eval_steps == math.ceil(50000 / 1024)
  assert p.time_to_train == pytest.approx(1000 * p.step + 10 * p.eval)
  bf16 = model.predict(cost=_program(), machine_=machine,
                       run=_run(allreduce_bytes=2), efficiency=0.5,
                       samples=1024 * 1000)
  assert bf16.gradient_sum - 12e-6 == pytest.approx(
      (p.gradient_sum - 12e-6) / 2)
  sharded = model.predict(cost=_program(), machine_=machine,
                          run=_run(weight_update_sharding=True),
                          efficiency=0.5, samples=1024 * 1000)
  assert sharded.update == pytest.approx(p.update / 32)
  assert sharded.compute == pytest.approx(p.compute)
  # Each kernel of the train and eval steps costs the generation's time.
  launched = model.predict(cost=_program(kernels=2000), machine_=machine,
                           run=_run(), efficiency=0.5, samples=1024 * 1000,
                           kernel_seconds=2e-6)
  assert p.kernels == 0
  assert launched.kernels == pytest.approx(2000 * 2e-6)
  assert launched.step == pytest.approx(p.step + 4e-3)
  assert launched.eval_step == pytest.approx(p.eval_step + 4e-3)


def test_the_fitted_efficiency_reproduces_its_row():
  machine = model.machine('v4-128')
  efficiency = model.fit_efficiency(cost=_program(), machine_=machine,
                                    run=_run(), samples=1024 * 5000, evals=7,
                                    measured_seconds=90.0)
  p = model.predict(cost=_program(), machine_=machine, run=_run(),
                    efficiency=efficiency, samples=1024 * 5000, evals=7)
  assert p.time_to_train == pytest.approx(90.0)
  kernels = dict(kernel_seconds=3e-6)
  efficiency = model.fit_efficiency(
      cost=_program(kernels=1500), machine_=machine, run=_run(),
      samples=1024 * 5000, evals=7, measured_seconds=90.0, **kernels)
  p = model.predict(cost=_program(kernels=1500), machine_=machine,
                    run=_run(), efficiency=efficiency, samples=1024 * 5000,
                    evals=7, **kernels)
  assert p.time_to_train == pytest.approx(90.0)
  with pytest.raises(ValueError, match='group sums and kernels .* exceed the '
                     'measured'):
    model.fit_efficiency(cost=_program(parameters=10**10), machine_=machine,
                         run=_run(), samples=1024 * 5000, evals=7,
                         measured_seconds=1.0)


def test_the_step_fit_reproduces_its_step_and_the_eval_takes_the_rest():
  machine = model.machine('v4-128')
  kernels = dict(kernel_seconds=3e-6)
  efficiency = model.fit_step_efficiency(
      cost=_program(kernels=1500), machine_=machine, run=_run(),
      step_seconds=0.05, **kernels)
  p = model.predict(cost=_program(kernels=1500), machine_=machine,
                    run=_run(), efficiency=efficiency, samples=1024 * 5000,
                    evals=7, eval_overhead=12.0, **kernels)
  assert p.step == pytest.approx(0.05)
  without = model.predict(cost=_program(kernels=1500), machine_=machine,
                          run=_run(), efficiency=efficiency,
                          samples=1024 * 5000, evals=7, **kernels)
  assert p.time_to_train - without.time_to_train == pytest.approx(7 * 12.0)
  with pytest.raises(ValueError, match='exceed the logged step'):
    model.fit_step_efficiency(cost=_program(parameters=10**10),
                              machine_=machine, run=_run(), step_seconds=1e-3)


def test_bad_slices_and_batches_are_one_line():
  with pytest.raises(ValueError, match='v3 slices are'):
    model.machine('v3-48')
  with pytest.raises(ValueError, match='a V100 server has 1, 2, 4 or 8'):
    model.machine('v100-16')
  with pytest.raises(ValueError, match='GLOBAL_BATCH_SIZE=1000 does not '
                     'split over the 32 data-parallel replicas of v3-32'):
    model.predict(cost=_program(), machine_=model.machine('v3-32'),
                  run=_run(global_batch=1000), efficiency=0.5, samples=1e6)
  # A batch-norm group of replicas on a slice the config does not name.
  from tools.predictor import configs
  with pytest.raises(ValueError, match='BN_GROUP_SIZE = 8 spans 8 replicas '
                     'of a slice the config does not name'):
    configs.read(['gin/resnet50_pod.gin'], ["ACCELERATOR = ''"])


def test_the_docs_table_is_the_comparison_the_command_prints():
  from core import startup
  startup.import_tensorflow()
  rows = compare.out_of_sample(compare.google_rows())
  table = compare.markdown(rows)
  with open(os.path.join(helpers.ROOT, 'docs', 'benchmarks.md')) as f:
    docs = f.read()
  assert table in docs
  assert compare.minigo_line() in docs
  # Every row predicted but the V100 server's and Mask R-CNN's and GNMT's
  # v3-1024 (one folder a benchmark and generation), none from its own
  # folder's constants.
  predicted = [r for r in rows if r.prediction is not None]
  assert {(r.system, r.benchmark) for r in rows if r.prediction is None} == {
      ('gpu-v100-8-TF2.0', 'bert'), ('gpu-v100-8-TF2.0', 'resnet'),
      ('tpu-v3-1024-TF', 'maskrcnn'), ('tpu-v3-1024-TF', 'gnmt')}
  assert len(predicted) == len(rows) - 4 and not any(r.fitted for r in rows)
  # Mask R-CNN's (fitted on a step and its eval's host time) and GNMT's
  # (its loops counted out, its buckets weighted), within bounds.
  for benchmark in ('maskrcnn', 'gnmt'):
    ours = [r for r in predicted if r.benchmark == benchmark]
    assert len(ours) == 3
    assert all(abs(r.error) <= compare.TARGET_MAX for r in ours), ours
  for r in predicted:
    efficiency_from, kernel_from = r.constants_from.split('; a kernel: ')
    assert efficiency_from != f'efficiency: {r.system}'
    own = f'{r.benchmark} on '
    assert not any(part.startswith(own) and r.system.removeprefix('tpu-')
                   in part for part in kernel_from.split('; ')), r
  summary = compare.summary(rows)
  assert summary['rows'] == len(predicted)
  assert re.search(rf'median absolute error {summary["median"]:.0%}', docs)


def test_no_row_is_predicted_from_its_own_folders_data():
  # A fifth more on a folder's step times and time to train: its own
  # prediction does not move; the rows whose constants it gave do.
  from core import startup
  startup.import_tensorflow()
  before = {r.folder: r.predicted_minutes
            for r in compare.out_of_sample(compare.google_rows())}
  for folder in (('tpu-v4-512-TF', 'resnet'), ('tpu-v3-32-TF2.0', 'bert')):
    rows = compare.google_rows()
    for r in rows:
      if r.folder == folder:
        r.measured_minutes *= 1.2
        r.block_step_ms *= 1.2
    after = {r.folder: r.predicted_minutes
             for r in compare.out_of_sample(rows)}
    assert after[folder] == pytest.approx(before[folder], rel=1e-12)
    moved = [f for f in before if f != folder and before[f] is not None
             and after[f] != pytest.approx(before[f], rel=1e-6)]
    assert moved, folder


def test_the_time_a_kernel_comes_from_resnets_step_times():
  # Google's ResNet-50 steps less the modelled sums are kernels x k + batch
  # x b: the least-squares k of each generation (numpy's here) is the
  # stored time a kernel, and the line holds the steps within 5%.
  from core import startup
  startup.import_tensorflow()
  import numpy as np
  rows = compare.google_rows()
  stored = compare.load_kernel_seconds()
  assert set(stored) == {'v3', 'v4'}  # The V100 ran one batch only.
  for generation in ('v3', 'v4'):
    x, y = [], []
    for row in rows:
      if row.benchmark != 'resnet' or row.generation != generation:
        continue
      program, run, machine, samples = compare._inputs(row)  # pylint: disable=protected-access
      p = model.predict(cost=program, machine_=machine, run=run,
                        efficiency=1.0, samples=samples)
      x.append([program.train_kernels(), p.per_replica_batch])
      y.append(row.block_step_ms / 1e3 - p.gradient_sum - p.group_sums)
    (k, b), *_ = np.linalg.lstsq(np.array(x), np.array(y), rcond=None)
    assert stored[generation] == pytest.approx(k)
    assert 0.5e-6 < k < 5e-6
    assert np.allclose(np.array(x) @ [k, b], y, rtol=0.05)
  assert compare.kernel_seconds(rows) == pytest.approx(stored)


def test_the_command_predicts_a_pod_config_and_says_what_was_fitted():
  result = run_predict('--gin_file=gin/bert_pod.gin')
  assert result.returncode == 0, result.stderr
  out = result.stdout
  assert 'gin/bert_pod.gin on v3-8192: 4,096 chips, 8,192 replicas' in out
  assert '128x32 torus' in out
  assert 'fitted: efficiency' in out and 'bert v3, on tpu-v3-8192-TF' in out
  # The step's kernels cost the v3 time a kernel, and the output says so.
  assert re.search(r'\+ kernels \d[\d.]* ms \+ gradient sum', out)
  assert re.search(r'the time a kernel \(\d\.\d\d us on v3: Google\'s '
                   r'ResNet-50 step times\)', out)
  assert 'a step\'s cost that does not grow' not in out
  from tools import predict
  v100 = predict.predict_one(['gin/bert_pod.gin'], [], 'v100-8')
  assert 'kernels' not in v100.split('\n')[2]  # No time a kernel.
  assert 'no time a kernel for this generation' in v100
  assert re.search(r'time to train  \d', out)
  sweep = run_predict('--gin_file=gin/resnet50_pod.gin', '--sweep=accelerator')
  assert sweep.returncode == 0, sweep.stderr
  assert 'v3-8192' in sweep.stdout and 'v3-32' in sweep.stdout


def test_a_generation_without_data_is_one_line():
  result = run_predict('--gin_file=gin/bert_pod.gin', '--accelerator=v5e-8')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith(
      "error: --accelerator='v5e-8' is not a Cloud TPU type")
  result = run_predict('--gin_file=gin/bert_pod.gin',
                       '--accelerator=v5litepod-256')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      'error: Google ran no bert on v5e in v0.7 (its bert folders: '
      'gpu-v100-8-TF2.0, v3-32-TF2.0, v3-8192-JAX, v3-8192-TF, v4-128-TF, '
      'v4-16-TF, v4-512-TF; fitted on v100, v3, v4): pass '
      '--efficiency=F (a fraction of peak) to predict anyway.')


def test_a_batch_far_from_the_fitted_one_is_warned_about():
  from tools import predict
  out = predict.predict_one(['gin/ssd_v4_16.gin'], [], '')
  assert ("warning        128 examples a replica against the fitted row's 8: "
          'expect this prediction too slow') in out
  assert 'warning' not in predict.predict_one(['gin/ssd_pod.gin'], [], '')
  assert 'too fast' in predict.batch_warning(1, 8)
  # Mask R-CNN: fitted on a step, its eval's host time its own line.
  out = predict.predict_one(['gin/maskrcnn_v4_16.gin'], [], '')
  assert 'expect this prediction to lean (Mask R-CNN' in out
  assert re.search(r'and [\d.]+ s on the hosts that training does not hide '
                   r'\(fitted\)', out), out
  pod = predict.predict_one(['gin/maskrcnn_pod.gin'], [], '')
  assert 'the hosts\' metric that training does not hide' in pod
  assert predict.batch_warning(16, 8) == predict.batch_warning(5, None) == ''


def test_host_input_hides_behind_the_step_or_sets_its_pace():
  machine = model.machine('v3-32')  # 4 hosts.
  fast = model.predict(cost=_program(), machine_=machine, run=_run(),
                       efficiency=0.5, samples=1024 * 1000,
                       host_input_rate=1e9)
  device = fast.compute + fast.update + fast.gradient_sum
  assert fast.host_input == pytest.approx(1024 / 4 / 1e9)
  assert fast.step == pytest.approx(device) and fast.bound == 'compute'
  # A host's 256 examples take longer than the device's step: it waits.
  rate = 256 / (2 * device)
  slow = model.predict(cost=_program(), machine_=machine, run=_run(),
                       efficiency=0.5, samples=1024 * 1000,
                       host_input_rate=rate)
  assert slow.step == pytest.approx(2 * device) and slow.bound == 'input'
  assert slow.time_to_train == pytest.approx(1000 * 2 * device +
                                             slow.evals * slow.eval)
  from tools import predict
  out = predict.predict_one(['gin/resnet50_pod.gin'], [], '',
                            host_input_rate=2533)
  assert "host input     25.3 ms a step for a host's 64 examples" in out
  assert 'bound          input; the device waits' in out
  assert 'host input     not modelled' in predict.predict_one(
      ['gin/resnet50_pod.gin'], [], '')


def test_the_tables_embedding_sharding_splits_are_not_all_reduced():
  from core import startup
  startup.import_tensorflow()
  import tensorflow as tf
  from distribution import plan
  rows = [5, 50, 7, 40]
  with tf.name_scope('dlrm'):
    tables = [tf.Variable(tf.zeros([r, 2]), name=f'embedding/table{t}')
              for t, r in enumerate(rows)]
  dense = tf.Variable(tf.zeros([3]), name='dense/kernel')
  variables = tables + [dense]
  options = plan.PlanOptions(embedding_sharding='mod', sharded_tables=2)
  assert cost_lib.all_reduced(variables, options) == [tables[0], tables[2],
                                                      dense]
  assert cost_lib.all_reduced(variables, plan.PlanOptions()) == variables
