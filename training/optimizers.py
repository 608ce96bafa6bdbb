"""Optimizers as per-variable update rules over plain tf.Variables.

Each optimizer owns its slot variables and an `update(var, grad, slots, lr)`
rule that runs on one device copy; the runtime (training/step.py) decides
where and when it runs, so the same code serves one device, mirrored replicas
and, later, sharded weight updates.
"""

import tensorflow as tf

from models.layers import is_decay_exempt
from training import schedules


class _Momentum:
  """Shared structure: a momentum slot per variable and a warmup-poly lr."""

  mlperf_name = ''

  def __init__(self, *, base_learning_rate: float, end_learning_rate: float,
               warmup_epochs: float, decay_power: float, momentum: float,
               weight_decay: float, exclude=is_decay_exempt):
    self.base_learning_rate = base_learning_rate
    self.end_learning_rate = end_learning_rate
    self.warmup_epochs, self.decay_power = warmup_epochs, decay_power
    self.momentum, self.weight_decay = momentum, weight_decay
    self.exclude = exclude
    self.schedule = None
    self.slots = {}

  def build(self, variables, *, steps_per_epoch: float, total_steps: int):
    """Creates slots (call under the strategy scope) and the lr schedule."""
    self.schedule = schedules.PolynomialWarmup(
        base=self.base_learning_rate, end=self.end_learning_rate,
        warmup_steps=int(round(self.warmup_epochs * steps_per_epoch)),
        total_steps=total_steps, power=self.decay_power)
    for v in variables:
      name = v.name.split(':')[0]
      self.slots[name] = tf.Variable(tf.zeros_like(v), trainable=False,
                                     name=f'{name}/momentum')

  def slots_for(self, variables):
    return [self.slots[v.name.split(':')[0]] for v in variables]

  def takes_decay(self, variable) -> bool:
    """Whether weight decay (and LARS scaling) applies to `variable`.

    Decided on the distributed variable's name: inside an update, replica
    copies are named `<name>/replica_<i>`, which no exclusion rule expects.
    """
    return not self.exclude(variable.name)


class Lars(_Momentum):
  """LARS as MLPerf ResNet defines it (You et al. 2017, TPU reference form).

  For a variable w with gradient g (excluded variables skip the first line):
    trust = eeta * |w| / (|g| + wd * |w| + epsilon)  (1 if |w| or |g| is 0)
    v = momentum * v + lr * trust * (g + wd * w);  w = w - v
  """

  mlperf_name = 'lars'

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

  def update(self, var, grad, slot, lr, *, decay: bool):
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

  mlperf_name = 'sgd'

  def __init__(self, *, base_learning_rate: float,
               end_learning_rate: float = 1e-4, warmup_epochs: float = 5,
               decay_power: float = 2.0, momentum: float = 0.9,
               weight_decay: float = 1e-4, exclude=is_decay_exempt):
    super().__init__(base_learning_rate=base_learning_rate,
                     end_learning_rate=end_learning_rate,
                     warmup_epochs=warmup_epochs, decay_power=decay_power,
                     momentum=momentum, weight_decay=weight_decay,
                     exclude=exclude)

  def update(self, var, grad, slot, lr, *, decay: bool):
    del decay  # Weight decay is in the loss.
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
