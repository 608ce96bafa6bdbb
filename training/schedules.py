"""Learning-rate schedules as functions of the global step."""

import tensorflow as tf


class PolynomialWarmup:
  """Linear warmup to `base`, then polynomial decay to `end` by `total_steps`.

  lr(s) = base * s / warmup_steps                          for s < warmup_steps
        = (base - end) * (1 - p) ** power + end            otherwise,
  with p = min(s - warmup_steps, decay_steps) / decay_steps and
  decay_steps = total_steps - warmup_steps (the MLPerf ResNet LARS schedule).
  """

  def __init__(self, *, base: float, end: float, warmup_steps: int,
               total_steps: int, power: float):
    if total_steps <= warmup_steps:
      raise ValueError(f'Training steps ({total_steps}) must exceed the '
                       f'warmup steps ({warmup_steps}).')
    self.base, self.end, self.power = base, end, power
    self.warmup_steps = warmup_steps
    self.decay_steps = total_steps - warmup_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    warmup = self.base * step / max(self.warmup_steps, 1)
    progress = tf.minimum(step - self.warmup_steps,
                          self.decay_steps) / self.decay_steps
    decay = (self.base - self.end) * (1.0 - progress)**self.power + self.end
    return tf.where(step < self.warmup_steps, warmup, decay)


class WarmupPolynomialDecay:
  """The MLPerf BERT schedule: poly decay from step 0, linear warmup from
  `start_warmup_step` overriding it while it lasts.

  decay(s)  = (base - end) * (1 - min(s, total_steps) / total_steps) ** power
              + end
  warmup(s) = base * (s - start_warmup_step) / warmup_steps
  lr(s)     = warmup(s) while s - start_warmup_step < warmup_steps, else
              decay(s).
  """

  def __init__(self, *, base: float, end: float, warmup_steps: int,
               start_warmup_step: int, total_steps: int, power: float):
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
