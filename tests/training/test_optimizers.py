"""LARS and SGD against NumPy references; the warmup-poly schedule."""

import numpy as np
import pytest
import tensorflow as tf

from models.common.layers import is_decay_exempt
from training import optimizers
from training import schedules


def numpy_lars(w, v, g, lr, *, momentum, wd, eeta, eps, decay):
  if decay:
    w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
    trust = eeta * w_norm / (g_norm + wd * w_norm + eps) if (
        w_norm > 0 and g_norm > 0) else 1.0
    scaled = lr * trust
    g = g + wd * w
  else:
    scaled = lr
  v = momentum * v + scaled * g
  return w - v, v


def run_updates(opt, schedule, names_shapes, steps, seed=0):
  rng = np.random.default_rng(seed)
  variables = [tf.Variable(rng.standard_normal(shape).astype(np.float32),
                           name=name) for name, shape in names_shapes]
  init = [v.numpy() for v in variables]
  opt.build(variables)
  slots = opt.slots_for(variables)
  grads_seq = [[rng.standard_normal(v.shape).astype(np.float32)
                for v in variables] for _ in range(steps)]
  lrs = []
  for step, grads in enumerate(grads_seq):
    lr = float(schedule(step))
    lrs.append(lr)
    for v, s, g in zip(variables, slots, grads):
      opt.update(v, tf.constant(g), s, tf.constant(lr), tf.constant(step),
                 decay=opt.takes_decay(v))
  return init, grads_seq, lrs, [v.numpy() for v in variables]


def test_lars_matches_numpy_reference_for_weights_and_excluded_bn():
  opt = optimizers.Lars(exclude=is_decay_exempt, momentum=0.9,
                        weight_decay=2e-4, eeta=0.001, epsilon=0.0)
  schedule = schedules.PolynomialWarmup(base=3.0, warmup_epochs=0.5,
                                        steps_per_epoch=10, total_steps=100)
  names = [('net/conv/kernel', (3, 3, 4, 8)), ('net/bn/gamma', (8,)),
           ('net/fc/bias', (5,))]
  init, grads_seq, lrs, final = run_updates(opt, schedule, names, steps=4)
  for i, (name, _) in enumerate(names):
    w, v = init[i].astype(np.float64), np.zeros_like(init[i], np.float64)
    for grads, lr in zip(grads_seq, lrs):
      w, v = numpy_lars(w, v, grads[i].astype(np.float64), lr, momentum=0.9,
                        wd=2e-4, eeta=0.001, eps=0.0,
                        decay=not name.endswith(('gamma', 'bias')))
    np.testing.assert_allclose(final[i], w, rtol=2e-5, atol=1e-6,
                               err_msg=name)
  # The excluded variables moved by plain momentum: far more than LARS-scaled.
  assert np.abs(final[1] - init[1]).max() > 10 * np.abs(final[0] -
                                                        init[0]).max()


def test_lars_trust_ratio_is_one_for_zero_weights():
  opt = optimizers.Lars(exclude=is_decay_exempt)
  v = tf.Variable(tf.zeros([4]), name='w/kernel')
  opt.build([v])
  opt.update(v, tf.ones([4]), opt.slots_for([v])[0], tf.constant(0.5),
             tf.constant(0), decay=True)
  np.testing.assert_allclose(v.numpy(), -0.5 * np.ones(4))


def test_sgd_momentum_matches_numpy_reference():
  opt = optimizers.SgdMomentum(exclude=is_decay_exempt, momentum=0.9,
                               weight_decay=1e-4)
  schedule = schedules.PolynomialWarmup(base=0.4, warmup_epochs=1,
                                        steps_per_epoch=10, total_steps=100)
  names = [('net/conv/kernel', (2, 3))]
  init, grads_seq, lrs, final = run_updates(opt, schedule, names, steps=3)
  w, v = init[0].astype(np.float64), 0.0
  for grads, lr in zip(grads_seq, lrs):
    v = 0.9 * v + grads[0]
    w = w - lr * v
  np.testing.assert_allclose(final[0], w, rtol=1e-5)


def test_polynomial_warmup_schedule_values():
  s = schedules.PolynomialWarmup(base=10.0, end=1e-4, warmup_steps=4,
                                 total_steps=14, power=2.0)
  assert float(s(0)) == 0.0
  assert float(s(2)) == pytest.approx(5.0)
  assert float(s(4)) == pytest.approx(10.0)
  assert float(s(9)) == pytest.approx((10 - 1e-4) * 0.25 + 1e-4)
  assert float(s(14)) == pytest.approx(1e-4)
  assert float(s(20)) == pytest.approx(1e-4)
  assert s.decay_steps == 10


def test_schedule_rejects_warmup_longer_than_training():
  with pytest.raises(ValueError, match='must exceed the warmup'):
    schedules.PolynomialWarmup(base=1, end=0, warmup_steps=10, total_steps=5,
                               power=2)


def test_mlperf_keys_of_lars():
  keys = optimizers.Lars(exclude=is_decay_exempt).mlperf_params(
      schedules.PolynomialWarmup(base=1.0, total_steps=7))
  assert keys['opt_name'] == 'lars'
  assert keys['lars_opt_learning_rate_decay_steps'] == 7
  assert keys['lars_epsilon'] == 0.0


def test_l2_term_follows_the_optimizers_exclusion_rule():
  from training import step as step_lib
  kernel = tf.Variable(tf.ones([2, 2]), name='m/conv/kernel')
  gamma = tf.Variable(tf.ones([3]), name='m/bn/gamma')
  default = optimizers.SgdMomentum(exclude=is_decay_exempt)
  decays = [default.takes_decay(v) for v in (kernel, gamma)]
  assert float(step_lib.l2_loss([kernel, gamma], decays)) == 2.0
  everything = optimizers.SgdMomentum(exclude=lambda name: False)
  decays = [everything.takes_decay(v) for v in (kernel, gamma)]
  assert float(step_lib.l2_loss([kernel, gamma], decays)) == 3.5


def numpy_lamb(w, m, v, g, lr, t, *, b1, b2, eps, wd, decay, adapt=None):
  """Google's v0.7 lamb_optimizer.py: variables excluded from weight decay
  are excluded from the layer adaptation too (ratio 1) unless `adapt`."""
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  u = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
  if decay:
    u = u + wd * w
  ratio = 1.0
  if decay if adapt is None else adapt:
    wn, un = np.linalg.norm(w), np.linalg.norm(u)
    ratio = wn / un if wn > 0 and un > 0 else 1.0
  return w - lr * ratio * u, m, v


@pytest.mark.parametrize('adapt_excluded', [False, True])
def test_lamb_matches_numpy_reference_with_layernorm_excluded(adapt_excluded):
  opt = optimizers.Lamb(beta_1=0.88, beta_2=0.88, adapt_excluded=adapt_excluded,
                        epsilon=1e-6, weight_decay=0.0166629,
                        exclude=lambda n: 'LayerNorm' in n or n.endswith(
                            'bias:0'))
  schedule = schedules.WarmupPolynomialDecay(
      base=0.002, warmup_steps=2, start_warmup_step=-1, total_steps=100)
  names = [('bert/encoder/layer_0/attention/self/query/kernel', (6, 4)),
           ('bert/encoder/layer_0/output/LayerNorm/gamma', (4,)),
           ('bert/encoder/layer_0/output/dense/bias', (4,))]
  init, grads_seq, lrs, final = run_updates(opt, schedule, names, steps=4)
  for i, (name, _) in enumerate(names):
    w = init[i].astype(np.float64)
    m = v = np.zeros_like(w)
    for t, (grads, lr) in enumerate(zip(grads_seq, lrs), start=1):
      w, m, v = numpy_lamb(w, m, v, grads[i].astype(np.float64), lr, t,
                           b1=0.88, b2=0.88, eps=1e-6, wd=0.0166629,
                           decay=i == 0, adapt=True if adapt_excluded else None)
    np.testing.assert_allclose(final[i], w, rtol=1e-5, atol=1e-7,
                               err_msg=name)


def test_bert_schedule_warms_up_from_start_step_and_decays_from_zero():
  s = schedules.WarmupPolynomialDecay(base=1.0, end=0.0, warmup_steps=4,
                                      start_warmup_step=-2, total_steps=10,
                                      power=1.0)
  assert float(s(0)) == pytest.approx(0.5)  # (0 - -2) / 4
  assert float(s(1)) == pytest.approx(0.75)
  assert float(s(2)) == pytest.approx(0.8)  # Warmup over: decay 1 - 2/10.
  assert float(s(10)) == pytest.approx(0.0)
  assert float(s(20)) == pytest.approx(0.0)


def test_mlperf_keys_of_mask_rcnn_are_googles_log():
  # Google's tpu-v3-1024 maskrcnn result_*.txt: these five optimizer keys.
  opt = optimizers.SgdMomentum(exclude=lambda name: False,
                               mlperf_keys='maskrcnn')
  keys = opt.mlperf_params(schedules.GoogleMaskRcnnV07(
      base=0.24, warmup_steps=2000, drop_steps=(6000, 8000)))
  assert keys == {'opt_base_learning_rate': 0.24,
                  'opt_learning_rate_warmup_steps': 2000,
                  'opt_learning_rate_warmup_factor': 0.24 / 2000,
                  'opt_learning_rate_decay_factor': 0.1,
                  'opt_learning_rate_decay_steps': [6000, 8000]}
