"""Optimizers as per-variable update rules over plain tf.Variables.

Each optimizer owns its slot variables and an
`update(var, grad, slots, lr, step, *, decay)` rule that runs on one device
copy; the runtime (training/step.py) decides
where and when it runs, so the same code serves one device, mirrored replicas
and, later, sharded weight updates.
"""

import tensorflow as tf

from models.layers import is_decay_exempt
from training import schedules

class _Optimizer:
  """Slots per variable (named by `slot_names`), a schedule, an exclusion rule."""

  slot_names: tuple[str, ...] = ()

  def __init__(self, *, weight_decay: float, exclude=is_decay_exempt):
    self.weight_decay, self.exclude = weight_decay, exclude
    self.schedule = None
    self.slots = {}

  def make_schedule(self, *, steps_per_epoch: float, total_steps: int):
    raise NotImplementedError

  def build(self, variables, *, steps_per_epoch: float, total_steps: int):
    """Creates slots (call under the strategy scope) and the lr schedule."""
    self.schedule = self.make_schedule(steps_per_epoch=steps_per_epoch,
                                       total_steps=total_steps)
    for v in variables:
      name = v.name.split(':')[0]
      for slot in self.slot_names:
        self.slots[f'{name}/{slot}'] = tf.Variable(
            tf.zeros_like(v), trainable=False, name=f'{name}/{slot}')

  def slots_for(self, variables) -> list[tuple]:
    """Each variable's slots, in `slot_names` order."""
    return [tuple(self.slots[f'{v.name.split(":")[0]}/{slot}']
                  for slot in self.slot_names) for v in variables]

  def takes_decay(self, variable) -> bool:
    """Whether weight decay (and layer-wise scaling) applies to `variable`.

    Decided on the distributed variable's name: inside an update, replica
    copies are named `<name>/replica_<i>`, which no exclusion rule expects.
    """
    return not self.exclude(variable.name)

class _Momentum(_Optimizer):
  """A momentum slot per variable and the MLPerf ResNet warmup-poly lr."""

  slot_names = ('momentum',)

  def __init__(self, *, base_learning_rate: float, end_learning_rate: float,
               warmup_epochs: float, decay_power: float, momentum: float,
               weight_decay: float, exclude=is_decay_exempt):
    super().__init__(weight_decay=weight_decay, exclude=exclude)
    self.base_learning_rate = base_learning_rate
    self.end_learning_rate = end_learning_rate
    self.warmup_epochs, self.decay_power = warmup_epochs, decay_power
    self.momentum = momentum

  def make_schedule(self, *, steps_per_epoch: float, total_steps: int):
    return schedules.PolynomialWarmup(
        base=self.base_learning_rate, end=self.end_learning_rate,
        warmup_steps=int(round(self.warmup_epochs * steps_per_epoch)),
        total_steps=total_steps, power=self.decay_power)

class Lars(_Momentum):
  """LARS as MLPerf ResNet defines it (You et al. 2017, TPU reference form).

  For a variable w with gradient g (excluded variables skip the first line):
    trust = eeta * |w| / (|g| + wd * |w| + epsilon)  (1 if |w| or |g| is 0)
    v = momentum * v + lr * trust * (g + wd * w);  w = w - v
  """

  def __init__(self, *, base_learning_rate: float,
               end_learning_rate: float = 1e-4, warmup_epochs: float = 5,
               decay_power: float = 2.0, momentum: float = 0.9,
               weight_decay: float = 1e-4, eeta: float = 0.001,
               epsilon: float = 0.0, exclude=is_decay_exempt):
    super().__init__(base_learning_rate=base_learning_rate,
                     end_learning_rate=end_learning_rate,
                     warmup_epochs=warmup_epochs, decay_power=decay_power,
                     momentum=momentum, weight_decay=weight_decay,
                     exclude=exclude)
    self.eeta, self.epsilon = eeta, epsilon

  def update(self, var, grad, slots, lr, step, *, decay: bool):
    del step
    (slot,) = slots
    if not decay:
      scaled_lr = lr
    else:
      w_norm = tf.norm(var)
      g_norm = tf.norm(grad)
      trust = tf.where(
          w_norm > 0,
          tf.where(g_norm > 0, self.eeta * w_norm /
                   (g_norm + self.weight_decay * w_norm + self.epsilon), 1.0),
          1.0)
      scaled_lr = lr * trust
      grad = grad + self.weight_decay * var
    new_slot = self.momentum * slot + scaled_lr * grad
    return [slot.assign(new_slot), var.assign_sub(new_slot)]

  def mlperf_params(self, *, decay_steps: int) -> dict:
    return {
        'opt_name': 'lars',
        'lars_opt_base_learning_rate': self.base_learning_rate,
        'lars_opt_end_learning_rate': self.end_learning_rate,
        'lars_opt_learning_rate_decay_poly_power': self.decay_power,
        'lars_opt_learning_rate_decay_steps': decay_steps,
        'lars_epsilon': self.epsilon,
        'lars_opt_learning_rate_warmup_epochs': self.warmup_epochs,
        'lars_opt_momentum': self.momentum,
        'lars_opt_weight_decay': self.weight_decay,
    }

  def loss_weight_decay(self) -> float:
    return 0.0  # LARS applies weight decay inside the update.

class SgdMomentum(_Momentum):
  """SGD with (heavy-ball) momentum; weight decay is an L2 term in the loss.

    v = momentum * v + g;  w = w - lr * v
  """

  def __init__(self, *, base_learning_rate: float,
               end_learning_rate: float = 1e-4, warmup_epochs: float = 5,
               decay_power: float = 2.0, momentum: float = 0.9,
               weight_decay: float = 1e-4, exclude=is_decay_exempt):
    super().__init__(base_learning_rate=base_learning_rate,
                     end_learning_rate=end_learning_rate,
                     warmup_epochs=warmup_epochs, decay_power=decay_power,
                     momentum=momentum, weight_decay=weight_decay,
                     exclude=exclude)

  def update(self, var, grad, slots, lr, step, *, decay: bool):
    del step, decay  # Weight decay is in the loss.
    (slot,) = slots
    new_slot = self.momentum * slot + grad
    return [slot.assign(new_slot), var.assign_sub(lr * new_slot)]

  def mlperf_params(self, *, decay_steps: int) -> dict:
    return {
        'opt_name': 'sgd',
        'sgd_opt_base_learning_rate': self.base_learning_rate,
        'sgd_opt_end_learning_rate': self.end_learning_rate,
        'sgd_opt_learning_rate_decay_poly_power': self.decay_power,
        'sgd_opt_learning_rate_decay_steps': decay_steps,
        'sgd_opt_weight_decay': self.weight_decay,
        'sgd_opt_momentum': self.momentum,
        'opt_learning_rate_warmup_epochs': self.warmup_epochs,
    }

  def loss_weight_decay(self) -> float:
    return self.weight_decay


class Lamb(_Optimizer):
  """LAMB as the MLPerf BERT reference defines it (You et al. 2019).

  With t the number of this update (1 for the first):
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon) [+ wd * w]
    ratio = |w| / |u|  (1 if |w| or |u| is 0);  w = w - lr * ratio * u
  Weight decay skips LayerNorm and biases (the exclusion rule). The schedule
  is WarmupPolynomialDecay. The reference counts t from the global step before
  the increment, which makes its first correction divide by zero unless the
  step is pre-incremented; here t is always the update's own count.
  """

  slot_names = ('adam_m', 'adam_v')

  def __init__(self, *, base_learning_rate: float,
               end_learning_rate: float = 0.0, warmup_steps: int = 0,
               start_warmup_step: int = 0, decay_power: float = 1.0,
               beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-6, weight_decay: float = 0.01,
               exclude=is_decay_exempt):
    super().__init__(weight_decay=weight_decay, exclude=exclude)
    self.base_learning_rate = base_learning_rate
    self.end_learning_rate = end_learning_rate
    self.warmup_steps, self.start_warmup_step = warmup_steps, start_warmup_step
    self.decay_power = decay_power
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

  def make_schedule(self, *, steps_per_epoch: float, total_steps: int):
    del steps_per_epoch
    return schedules.WarmupPolynomialDecay(
        base=self.base_learning_rate, end=self.end_learning_rate,
        warmup_steps=self.warmup_steps,
        start_warmup_step=self.start_warmup_step, total_steps=total_steps,
        power=self.decay_power)

  def update(self, var, grad, slots, lr, step, *, decay: bool):
    m, v = slots
    t = tf.cast(step, tf.float32) + 1.0
    next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
    next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
    m_hat = next_m / (1.0 - self.beta_1**t)
    v_hat = next_v / (1.0 - self.beta_2**t)
    update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    if decay and self.weight_decay:
      update += self.weight_decay * var
    w_norm, u_norm = tf.norm(var), tf.norm(update)
    ratio = tf.where(w_norm > 0,
                     tf.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
    return [m.assign(next_m), v.assign(next_v),
            var.assign_sub(lr * ratio * update)]

  def mlperf_params(self, *, decay_steps: int) -> dict:
    return {
        'opt_name': 'lamb',
        'opt_base_learning_rate': self.base_learning_rate,
        'opt_epsilon': self.epsilon,  # Ruleset 0.7.0's name.
        'opt_lamb_epsilon': self.epsilon,  # Later rulesets' name.
        'opt_learning_rate_training_steps': decay_steps,
        'opt_learning_rate_warmup_steps': self.warmup_steps,
        'num_warmup_steps': self.warmup_steps,
        'start_warmup_step': self.start_warmup_step,
        'opt_lamb_beta_1': self.beta_1,
        'opt_lamb_beta_2': self.beta_2,
        'opt_lamb_weight_decay_rate': self.weight_decay,
        'opt_lamb_learning_rate_decay_poly_power': self.decay_power,
    }

  def loss_weight_decay(self) -> float:
    return 0.0  # Decoupled: applied in the update.
