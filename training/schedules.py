"""Learning-rate schedules as functions of the global step.

Each is its own gin binding (`train.train.learning_rate`): gin sets the
hyper-parameters and the runtime passes the run's lengths, `steps_per_epoch`
and `total_steps`, when it builds the schedule. Swapping LARS's warmup-poly
for a step schedule, or giving Adam an inverse square root, is a gin change.
Implements training.task.LearningRateSchedule.
"""

import math

import tensorflow as tf


class PolynomialWarmup:
  """Linear warmup to `base`, then polynomial decay to `end` by `total_steps`.

  lr(s) = base * s / warmup_steps                          for s < warmup_steps
        = (base - end) * (1 - p) ** power + end            otherwise,
  with p = min(s - warmup_steps, decay_steps) / decay_steps and
  decay_steps = total_steps - warmup_steps (the MLPerf ResNet LARS schedule).
  The warmup is given in steps or, as MLPerf ResNet gives it, in epochs.
  """

  def __init__(self, *, base: float, total_steps: int, end: float = 1e-4,
               power: float = 2.0, warmup_steps: int = 0,
               warmup_epochs: float = 0.0, steps_per_epoch: float = 0.0):
    if warmup_epochs:
      if not steps_per_epoch:
        raise ValueError('`warmup_epochs` needs the data to know its epoch '
                         'size; give `warmup_steps` instead.')
      warmup_steps = int(round(warmup_epochs * steps_per_epoch))
    if total_steps <= warmup_steps:
      raise ValueError(f'Training steps ({total_steps}) must exceed the '
                       f'warmup steps ({warmup_steps}).')
    self.base, self.end, self.power = base, end, power
    self.warmup_steps, self.warmup_epochs = warmup_steps, warmup_epochs
    self.decay_steps = total_steps - warmup_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    warmup = self.base * step / max(self.warmup_steps, 1)
    progress = tf.minimum(step - self.warmup_steps,
                          self.decay_steps) / self.decay_steps
    decay = (self.base - self.end) * (1.0 - progress)**self.power + self.end
    return tf.where(step < self.warmup_steps, warmup, decay)

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'end_learning_rate': self.end,
            'decay_power': self.power, 'decay_steps': self.decay_steps,
            'warmup_steps': self.warmup_steps,
            'warmup_epochs': self.warmup_epochs}


class WarmupPolynomialDecay:
  """The MLPerf BERT schedule: poly decay from step 0, linear warmup from
  `start_warmup_step` overriding it while it lasts.

  decay(s)  = (base - end) * (1 - min(s, total_steps) / total_steps) ** power
              + end
  warmup(s) = base * (s - start_warmup_step) / warmup_steps
  lr(s)     = warmup(s) while s - start_warmup_step < warmup_steps, else
              decay(s).
  """

  def __init__(self, *, base: float, total_steps: int, end: float = 0.0,
               power: float = 1.0, warmup_steps: int = 0,
               start_warmup_step: int = 0, steps_per_epoch: float = 0.0):
    del steps_per_epoch  # Counted in steps only.
    if total_steps <= 0:
      raise ValueError(f'Training steps must be positive, got {total_steps}.')
    self.base, self.end, self.power = base, end, power
    self.warmup_steps, self.start_warmup_step = warmup_steps, start_warmup_step
    self.decay_steps = total_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    progress = tf.minimum(step, self.decay_steps) / self.decay_steps
    decay = (self.base - self.end) * (1.0 - progress)**self.power + self.end
    if not self.warmup_steps:
      return decay
    since = step - self.start_warmup_step
    warmup = self.base * since / self.warmup_steps
    return tf.where(since < self.warmup_steps, warmup, decay)

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'end_learning_rate': self.end,
            'decay_power': self.power, 'decay_steps': self.decay_steps,
            'warmup_steps': self.warmup_steps,
            'start_warmup_step': self.start_warmup_step}


class InverseSquareRoot:
  """Linear warmup, then base * sqrt(warmup_steps / step) (Transformer-style).

  lr(s) = base * s / warmup_steps              for s < warmup_steps
        = base * sqrt(warmup_steps / s)        otherwise.
  """

  def __init__(self, *, base: float, warmup_steps: int, total_steps: int = 0,
               steps_per_epoch: float = 0.0):
    del steps_per_epoch
    if warmup_steps <= 0:
      raise ValueError(f'`warmup_steps` must be positive, got {warmup_steps}.')
    self.base, self.warmup_steps = base, warmup_steps
    self.decay_steps = total_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    warmup = self.base * step / self.warmup_steps
    decay = self.base * tf.sqrt(self.warmup_steps / tf.maximum(step, 1.0))
    return tf.where(step < self.warmup_steps, warmup, decay)

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'decay_steps': self.decay_steps,
            'warmup_steps': self.warmup_steps}


class TransformerMlperf:
  """Google's v0.7 Transformer schedule (Lingvo TransformerMLPerfSchedule
  times the learning rate):

    lr(s) = base * model_dim^-0.5 * min(1, s / warmup_steps)
                 * rsqrt(max(s, warmup_steps))

  with s the number of updates already applied (0 for the first, which
  therefore applies none, as Lingvo's global step does).
  """

  def __init__(self, *, base: float, model_dim: int, warmup_steps: int,
               total_steps: int = 0, steps_per_epoch: float = 0.0):
    del total_steps, steps_per_epoch
    if warmup_steps <= 0 or model_dim <= 0:
      raise ValueError(f'`warmup_steps` ({warmup_steps}) and `model_dim` '
                       f'({model_dim}) must be positive.')
    self.base, self.model_dim, self.warmup_steps = base, model_dim, warmup_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    warmup = float(self.warmup_steps)
    return (self.base * self.model_dim**-0.5 * tf.minimum(1.0, step / warmup) *
            tf.math.rsqrt(tf.maximum(step, warmup)))

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'warmup_steps': self.warmup_steps}


class PiecewiseConstant:
  """`values[i]` from `boundaries[i-1]` (in epochs) on, with linear warmup.

  The step schedule of SGD/LARS recipes before polynomial decay:
  boundaries (30, 60, 80) with values (0.1, 0.01, 0.001, 0.0001).
  """

  def __init__(self, *, boundaries_epochs: tuple, values: tuple,
               total_steps: int, steps_per_epoch: float, warmup_epochs=0.0):
    if len(values) != len(boundaries_epochs) + 1:
      raise ValueError(f'`values` needs one more entry than '
                       f'`boundaries_epochs` ({len(values)} vs '
                       f'{len(boundaries_epochs)}).')
    self.boundaries = [int(round(b * steps_per_epoch))
                       for b in boundaries_epochs]
    self.values = list(values)
    self.warmup_steps = int(round(warmup_epochs * steps_per_epoch))
    self.warmup_epochs = warmup_epochs
    self.decay_steps = total_steps

  def __call__(self, step):
    step = tf.cast(step, tf.int64)
    lr = tf.constant(self.values[0], tf.float32)
    for boundary, value in zip(self.boundaries, self.values[1:]):
      lr = tf.where(step >= boundary, value, lr)
    if self.warmup_steps:
      warmup = self.values[0] * tf.cast(step, tf.float32) / self.warmup_steps
      lr = tf.where(step < self.warmup_steps, warmup, lr)
    return lr

  def describe(self) -> dict:
    return {'base_learning_rate': self.values[0],
            'end_learning_rate': self.values[-1], 'decay_power': 0.0,
            'decay_steps': self.decay_steps, 'warmup_steps': self.warmup_steps,
            'warmup_epochs': self.warmup_epochs,
            'boundaries': self.boundaries}


class PiecewiseConstantSteps:
  """tf.compat.v1.train.piecewise_constant on the global step: values[0]
  while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
  boundaries[i], values[-1] after the last (Google's v0.7 MiniGo: 0.016,
  0.16, 0.016, 0.0016 at 128, 10000, 20000; dual_net.py)."""

  def __init__(self, *, boundaries: tuple, values: tuple,
               total_steps: int = 0, steps_per_epoch: float = 0.0):
    del steps_per_epoch
    if len(values) != len(boundaries) + 1 or list(boundaries) != sorted(
        boundaries):
      raise ValueError(
          'training.schedules.PiecewiseConstantSteps needs increasing '
          '`boundaries` and one more `values` than boundaries, got '
          f'{tuple(boundaries)} and {tuple(values)}.')
    self.boundaries, self.values = list(boundaries), list(values)
    self.total_steps = total_steps

  def __call__(self, step):
    step = tf.cast(step, tf.int64)
    lr = tf.constant(self.values[0], tf.float32)
    for boundary, value in zip(self.boundaries, self.values[1:]):
      lr = tf.where(step > boundary, value, lr)
    return lr

  def describe(self) -> dict:
    return {'base_learning_rate': self.values[0],
            'end_learning_rate': self.values[-1], 'decay_power': 0.0,
            'decay_steps': self.total_steps, 'warmup_steps': 0,
            'boundaries': self.boundaries, 'values': self.values}


class GoogleLarsV07:
  """Google's MLPerf v0.7 ResNet LARS schedule, arithmetic included
  (lars_util.py `poly_rate_schedule`, resnet_main.py's current_epoch).

  With e = step / steps_per_epoch (float epochs) and
  w = floor(warmup_epochs * steps_per_epoch) (`w_epochs * num_train_images //
  batch_size`):
    lr(step) = base * e / warmup_epochs                 while e <= warmup_epochs
             = (base - end) * (1 - d / D) ** power + end   otherwise,
  with d = min(max(1, step - w), D) and D = total_steps - w + 1 (the
  `lars_opt_learning_rate_decay_steps` Google logs: 1133 for its 1738 steps).
  PolynomialWarmup differs in the last digits: it warms up by step and decays
  over total_steps - warmup_steps from step - warmup_steps.

  `whole_steps_per_epoch` floors steps_per_epoch first, as Google's v0.7 TF2
  runs (v3-32: `per_epoch_steps = num_images // batch_size`; their
  PolynomialDecayWithWarmup then warms up to warmup_epochs * per_epoch_steps
  and decays over train_steps - that + 1 steps: the same arithmetic on whole
  steps).
  """

  def __init__(self, *, base: float, warmup_epochs: float,
               steps_per_epoch: float, total_steps: int, end: float = 1e-4,
               power: float = 2.0, whole_steps_per_epoch: bool = False):
    if not steps_per_epoch:
      raise ValueError('GoogleLarsV07 counts in epochs: the data must know '
                       'its epoch size (num_train_examples).')
    if whole_steps_per_epoch:
      steps_per_epoch = math.floor(steps_per_epoch)
    self.base, self.end, self.power = base, end, power
    self.warmup_epochs, self.steps_per_epoch = warmup_epochs, steps_per_epoch
    # The float product is exact to far better than a step; floor it as
    # Google's integer division does.
    self.warmup_steps = int(math.floor(warmup_epochs * steps_per_epoch + 1e-9))
    self.decay_steps = total_steps - self.warmup_steps + 1
    if self.decay_steps <= 1:
      raise ValueError(f'Training steps ({total_steps}) must exceed the '
                       f'warmup steps ({self.warmup_steps}).')

  def __call__(self, step):
    epoch = tf.cast(step, tf.float32) / self.steps_per_epoch
    warmup = self.base * epoch / self.warmup_epochs
    done = tf.minimum(
        tf.maximum(tf.cast(step, tf.float32) - self.warmup_steps, 1.0),
        float(self.decay_steps))
    decay = ((self.base - self.end) *
             (1.0 - done / self.decay_steps)**self.power + self.end)
    return tf.where(epoch <= self.warmup_epochs, warmup, decay)

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'end_learning_rate': self.end,
            'decay_power': self.power, 'decay_steps': self.decay_steps,
            'warmup_steps': self.warmup_steps,
            'warmup_epochs': self.warmup_epochs}


class GoogleSsdV07:
  """Google's MLPerf v0.7 SSD schedule (ssd_model.py
  `learning_rate_schedule`): the base rate scaled by batch / 32, reached
  linearly from 0 over int(warmup_epochs x steps_per_epoch) steps, then x1,
  x0.1 and x0.01 from the boundary epochs' steps (each int(epochs x
  steps_per_epoch), steps_per_epoch = examples / batch as a float).
  """

  def __init__(self, *, base: float, warmup_epochs: float,
               boundary_epochs: tuple, global_batch_size: int,
               steps_per_epoch: float, total_steps: int,
               reference_batch: float = 32.0):
    if len(boundary_epochs) != 2:
      raise ValueError(f'`boundary_epochs` needs the two drop epochs, got '
                       f'{boundary_epochs}.')
    if not steps_per_epoch:
      raise ValueError('GoogleSsdV07 counts in epochs: the data must know '
                       'its epoch size (num_train_examples).')
    self.base, self.warmup_epochs = base, warmup_epochs
    self.boundary_epochs = tuple(boundary_epochs)
    self.factor = global_batch_size / reference_batch
    self.warmup_steps = int(warmup_epochs * steps_per_epoch)
    self.boundaries = [int(e * steps_per_epoch) for e in boundary_epochs]
    self.decay_steps = total_steps
    if self.warmup_steps < 1:
      raise ValueError(f'`warmup_epochs` ({warmup_epochs}) is under one step '
                       f'({steps_per_epoch:.3g} steps an epoch).')

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    peak = self.base * self.factor
    lr = step / self.warmup_steps * peak
    for mult, start in ((1.0, self.warmup_steps),
                        (0.1, self.boundaries[0]), (0.01, self.boundaries[1])):
      lr = tf.where(step < start, lr, peak * mult)
    return lr

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'warmup_factor': self.factor,
            'warmup_steps': self.warmup_steps,
            'warmup_epochs': self.warmup_epochs,
            'boundary_epochs': list(self.boundary_epochs),
            'decay_steps': self.decay_steps}


class GoogleDlrmV07:
  """Google's MLPerf v0.7 DLRM schedule (utils.py `lr_fn`, the same for the
  embedding tables in feature_config.py): the base rate scaled by batch /
  2048, reached linearly over `warmup_steps`, held, then from
  `decay_start_step` decayed as (1 - done / decay_steps)^2, never under
  1e-7. In float32, in their order of operations:

    peak = base x batch / 2048;  rate = peak / warmup
    warm(s) = peak - (warmup - s) x rate
    decay(s) = max(peak x ((decay_steps - min(s - start, decay_steps))
                           / decay_steps)^2, 1e-7)
    lr(s) = warm(s) if s < warmup; decay(s) if s > start; else peak
  """

  def __init__(self, *, base: float, warmup_steps: int, decay_start_step: int,
               decay_steps: int, global_batch_size: int,
               steps_per_epoch: float = 0.0, total_steps: int = 0,
               reference_batch: float = 2048.0):
    del steps_per_epoch, total_steps  # Google's steps are absolute.
    if warmup_steps < 0 or decay_steps < 0 or decay_start_step < 0:
      raise ValueError(
          f'GoogleDlrmV07 steps must be >= 0: warmup_steps {warmup_steps}, '
          f'decay_start_step {decay_start_step}, decay_steps {decay_steps}.')
    if decay_steps and decay_start_step < warmup_steps:
      raise ValueError(
          f'`decay_start_step` ({decay_start_step}) comes before the warmup '
          f'ends ({warmup_steps}).')
    self.base, self.warmup_steps = base, warmup_steps
    self.decay_start_step, self.decay_steps = decay_start_step, decay_steps
    self.peak = base * (global_batch_size / reference_batch)

  def __call__(self, step):
    peak = tf.constant(self.peak, tf.float32)
    if not self.warmup_steps:
      return peak
    step = tf.cast(step, tf.float32)
    warmup = tf.constant(self.warmup_steps, tf.float32)
    decay_steps = tf.constant(self.decay_steps, tf.float32)
    start = tf.constant(self.decay_start_step, tf.float32)
    warm = peak - (warmup - step) * (peak / warmup)
    is_warm = tf.cast(step < warmup, tf.float32)
    if not self.decay_steps:  # Their decay would divide by 0.
      return is_warm * warm + (1.0 - is_warm) * peak
    done = tf.minimum(step - start, decay_steps)
    decay = tf.maximum(peak * ((decay_steps - done) / decay_steps)**2.0,
                       tf.constant(1e-7))
    is_decay = tf.cast(step > start, tf.float32)
    is_middle = tf.cast(tf.equal(is_warm + is_decay, 0.0), tf.float32)
    return is_warm * warm + is_middle * peak + is_decay * decay

  def describe(self) -> dict:
    return {'base_learning_rate': self.peak, 'decay_power': 2,
            'decay_steps': self.decay_steps,
            'decay_start_step': self.decay_start_step,
            'warmup_steps': self.warmup_steps}


class GoogleGnmtV07:
  """Google's MLPerf v0.7 GNMT schedule (model.py
  `_get_learning_rate_warmup` with `warmup_scheme='t2t'`, then
  `_get_learning_rate_decay`): the rate starts 100 times smaller and grows
  geometrically to `base` over `warmup_steps`; from `decay_start_step` it
  halves (x `decay_factor`) every `decay_interval` steps, `decay_count`
  times. In float32, in their order of operations:

    f = exp(ln(0.01) / warmup);  warm(s) = base x f^(warmup - s)
    decay(s) = max(base x factor^floor((s - start) / interval),
                   base x factor^count)
    lr(s) = warm(s) if s < warmup; decay(s) if s >= start; else base
  """

  def __init__(self, *, base: float, warmup_steps: int, decay_start_step: int,
               decay_interval: int, decay_count: int,
               decay_factor: float = 0.5, steps_per_epoch: float = 0.0,
               total_steps: int = 0):
    del steps_per_epoch, total_steps  # Google's steps are absolute.
    if warmup_steps < 1 or decay_interval < 1:
      raise ValueError(
          f'GoogleGnmtV07 needs `warmup_steps` ({warmup_steps}) and '
          f'`decay_interval` ({decay_interval}) of at least 1 step.')
    if decay_start_step < warmup_steps:
      raise ValueError(
          f'`decay_start_step` ({decay_start_step}) comes before the warmup '
          f'ends ({warmup_steps}).')
    self.base, self.warmup_steps = base, warmup_steps
    self.decay_start_step = decay_start_step
    self.decay_interval = decay_interval
    self.decay_count, self.decay_factor = decay_count, decay_factor

  def __call__(self, step):
    base = tf.constant(self.base, tf.float32)
    step = tf.cast(step, tf.int64)
    factor = tf.exp(tf.math.log(tf.constant(0.01)) / self.warmup_steps)
    warm = base * factor**tf.cast(self.warmup_steps - step, tf.float32)
    done = tf.cast(step - self.decay_start_step, tf.float32)
    decay_factor = tf.constant(self.decay_factor, tf.float32)
    decay = tf.maximum(
        base * decay_factor**tf.floor(done / float(self.decay_interval)),
        base * decay_factor**float(self.decay_count))
    return tf.where(step < self.warmup_steps, warm,
                    tf.where(step < self.decay_start_step, base, decay))

  def describe(self) -> dict:
    return {'base_learning_rate': self.base, 'warmup_scheme': 't2t',
            'warmup_steps': self.warmup_steps,
            'remain_steps': self.decay_start_step,
            'decay_interval': self.decay_interval,
            'decay_factor': self.decay_factor,
            'decay_steps': self.decay_count}


class GoogleMaskRcnnV07:
  """Google's MLPerf v0.7 Mask R-CNN schedule (lr_policy.py
  `learning_rate_schedule`), in float32 in their order:

    warm(s) = init + s / warmup x (base - init)
    lr(s) = warm(s) if s < warmup; base x 1 from warmup, x 0.1 from the
            first drop step, x 0.01 from the second

  Their pod run: base 0.24, warm-up 2000 steps from 0, drops at 6000 and
  8000; the MLPerf log's warm-up factor is base / warmup steps.
  """

  def __init__(self, *, base: float, warmup_steps: int, drop_steps: tuple,
               warmup_init: float = 0.0, steps_per_epoch: float = 0.0,
               total_steps: int = 0):
    del steps_per_epoch, total_steps  # Google's steps are absolute.
    drop_steps = tuple(drop_steps)
    if (len(drop_steps) != 2 or warmup_steps < 1 or
        not warmup_steps <= drop_steps[0] <= drop_steps[1]):
      raise ValueError(
          f'GoogleMaskRcnnV07 needs warmup_steps >= 1 and two drop steps in '
          f'order after it; got warmup_steps {warmup_steps}, drop_steps '
          f'{drop_steps}.')
    self.base, self.warmup_steps = base, warmup_steps
    self.drop_steps, self.warmup_init = drop_steps, warmup_init

  def __call__(self, step):
    step = tf.cast(step, tf.int64)
    base = tf.constant(self.base, tf.float32)
    warm = self.warmup_init + (tf.cast(step, tf.float32) / self.warmup_steps
                               * (base - self.warmup_init))
    lr = tf.where(step < self.warmup_steps, warm, base)
    for mult, start in ((1.0, self.warmup_steps), (0.1, self.drop_steps[0]),
                        (0.01, self.drop_steps[1])):
      lr = tf.where(step < start, lr, base * mult)
    return lr

  def describe(self) -> dict:
    return {'base_learning_rate': self.base,
            'warmup_steps': self.warmup_steps,
            'warmup_factor': self.base / self.warmup_steps,
            'decay_factor': 0.1, 'drop_steps': list(self.drop_steps)}
