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
