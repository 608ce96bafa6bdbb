"""Learning-rate schedules as gin bindings; optimizers against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from training import optimizers
from training import schedules


def test_warmup_in_epochs_becomes_steps_from_the_data():
  s = schedules.PolynomialWarmup(base=2.0, warmup_epochs=1.5,
                                 steps_per_epoch=10, total_steps=100)
  assert s.warmup_steps == 15 and s.decay_steps == 85
  with pytest.raises(ValueError, match='warmup_steps'):
    schedules.PolynomialWarmup(base=2.0, warmup_epochs=1, total_steps=100)


def test_inverse_square_root_schedule_values():
  s = schedules.InverseSquareRoot(base=1.875, warmup_steps=4)
  steps = np.arange(1, 20)
  expected = np.where(steps < 4, 1.875 * steps / 4,
                      1.875 * np.sqrt(4 / steps))
  np.testing.assert_allclose([float(s(i)) for i in steps], expected,
                             rtol=1e-6)


def test_piecewise_constant_schedule_values():
  s = schedules.PiecewiseConstant(boundaries_epochs=(1, 2),
                                  values=(0.1, 0.01, 0.001), total_steps=40,
                                  steps_per_epoch=10, warmup_epochs=0.5)
  got = [float(s(i)) for i in (0, 2, 5, 9, 10, 19, 20, 39)]
  np.testing.assert_allclose(got, [0.0, 0.04, 0.1, 0.1, 0.01, 0.01, 0.001,
                                   0.001], rtol=1e-6)


def test_adam_with_an_inverse_square_root_schedule_is_a_gin_change():
  # The optimizer's MLPerf keys come from whichever schedule it is given.
  keys = optimizers.Adam(beta_1=0.88, beta_2=0.92).mlperf_params(
      schedules.InverseSquareRoot(base=1.875, warmup_steps=831))
  assert keys['opt_learning_rate_warmup_steps'] == 831
  assert keys['opt_base_learning_rate'] == 1.875
  lars = optimizers.Lars(exclude=lambda n: False).mlperf_params(
      schedules.PiecewiseConstant(boundaries_epochs=(30,), values=(1.0, 0.1),
                                  total_steps=90, steps_per_epoch=1))
  assert lars['lars_opt_base_learning_rate'] == 1.0


def test_adam_matches_numpy():
  opt = optimizers.Adam(beta_1=0.9, beta_2=0.99, epsilon=1e-8)
  v = tf.Variable([1.0, -2.0], name='w')
  opt.build([v])
  w, m, s = np.array([1.0, -2.0]), 0.0, 0.0
  for t, g in enumerate(([0.5, 1.0], [-0.25, 2.0]), start=1):
    opt.update(v, tf.constant(g), opt.slots_for([v])[0], tf.constant(0.1),
               tf.constant(t - 1), decay=False)
    g = np.array(g)
    m, s = 0.9 * m + 0.1 * g, 0.99 * s + 0.01 * g * g
    w = w - 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(s / (1 - 0.99**t)) + 1e-8)
  np.testing.assert_allclose(v.numpy(), w, rtol=1e-6)


def google_gnmt_lr(step, *, base=0.0045, warmup=150, start=1924,
                   interval=241, count=4, factor=0.5):
  """Google's v0.7 GNMT learning rate (model.py), op by op in float32."""
  f32 = np.float32
  lr = f32(base)
  if step < warmup:
    warmup_factor = np.exp(np.log(f32(0.01)) / f32(warmup))
    return lr * warmup_factor**f32(warmup - step)
  if step < start:
    return lr
  # tf.train.exponential_decay(staircase=True), then the floor of the decays.
  p = np.floor(f32(step - start) / f32(interval))
  return max(lr * f32(factor)**p, lr * f32(factor)**f32(count))


def test_google_gnmt_schedule_is_their_sequence():
  lr = schedules.GoogleGnmtV07(base=0.0045, warmup_steps=150,
                               decay_start_step=1924, decay_interval=241,
                               decay_count=4)
  steps = [0, 1, 75, 149, 150, 1000, 1923, 1924, 2164, 2165, 2406, 2888,
           2889, 3000, 10000]
  got = [float(lr(s)) for s in steps]
  want = [google_gnmt_lr(s) for s in steps]
  # The warm-up is a float32 power up to 150: NumPy's and TensorFlow's exp,
  # log and pow kernels differ in the last bits, and the power magnifies it.
  np.testing.assert_allclose(got[:4], want[:4], rtol=2e-5)
  # After it, powers of 0.5 of a float32: exact.
  assert got[4:] == [float(w) for w in want[4:]]
  assert got[0] == pytest.approx(0.0045 * 0.01, rel=1e-5)  # 100x smaller.
  assert got[4] == got[6] == got[7] == pytest.approx(0.0045)
  assert got[9] == pytest.approx(0.0045 / 2)  # The first halving, at 2165.
  assert got[-1] == pytest.approx(0.0045 / 16)  # Four halvings at most.
  assert lr.describe()['remain_steps'] == 1924
  with pytest.raises(ValueError, match='before the warmup'):
    schedules.GoogleGnmtV07(base=1, warmup_steps=10, decay_start_step=5,
                            decay_interval=3, decay_count=4)


def google_maskrcnn_lr(step, base=0.24, init=0.0, warmup=2000,
                       drops=(6000, 8000)):
  """lr_policy.learning_rate_schedule, in float32, in their order."""
  f32 = np.float32
  linear = f32(init) + (f32(step) / f32(warmup) * (f32(base) - f32(init)))
  lr = linear if step < warmup else f32(base)
  for mult, start in ((1.0, warmup), (0.1, drops[0]), (0.01, drops[1])):
    lr = lr if step < start else f32(base) * f32(mult)
  return f32(lr)


def test_google_maskrcnn_schedule_is_their_sequence():
  lr = schedules.GoogleMaskRcnnV07(base=0.24, warmup_steps=2000,
                                   drop_steps=(6000, 8000))
  steps = [0, 1, 999, 1999, 2000, 5999, 6000, 7999, 8000, 12000]
  got = [float(lr(s)) for s in steps]
  assert got == [float(google_maskrcnn_lr(s)) for s in steps]
  assert got[0] == 0 and got[4] == pytest.approx(0.24)
  assert got[6] == pytest.approx(0.024) and got[8] == pytest.approx(0.0024)
  d = lr.describe()
  assert d['warmup_factor'] == pytest.approx(0.00012)  # Their log's value.
  assert d['drop_steps'] == [6000, 8000]
  warm_from = schedules.GoogleMaskRcnnV07(base=0.16, warmup_steps=1000,
                                          drop_steps=(9750, 13000),
                                          warmup_init=0.01)
  assert float(warm_from(500)) == float(google_maskrcnn_lr(
      500, 0.16, 0.01, 1000, (9750, 13000)))
  with pytest.raises(ValueError, match='two drop steps in order'):
    schedules.GoogleMaskRcnnV07(base=1, warmup_steps=10, drop_steps=(8, 20))
