"""Optimizers as per-variable update rules over plain tf.Variables.

Each optimizer owns its slot variables and a pure rule
`apply(w, g, slot_values, lr, step, *, decay, norm) -> (new_w, new_slots)` on
values; `update(var, grad, slots, lr, step, *, decay)` applies it to one
device copy's variables. The runtime (training/step.py) decides where and
when it runs, so the same rule serves one device, mirrored replicas and
sharded weight updates (distribution/weight_update_sharding.py), which give it
1/N of each tensor and a `norm` that sums squares over the replicas. The learning rate comes from a schedule of its own (gin binds
`train.train.learning_rate`, training/schedules.py); which variables skip
weight decay is the model's naming rule, bound in the model's gin file
(`exclude`). Implements training.task.Optimizer.
"""

import tensorflow as tf


class _Optimizer:
  """Slots per variable (named by `slot_names`) and an exclusion rule."""

  slot_names: tuple[str, ...] = ()

  def __init__(self, *, weight_decay: float, exclude):
    self.weight_decay, self.exclude = weight_decay, exclude
    self.slots = {}

  def build(self, variables, *, make_slot=None) -> None:
    """Creates the slots (call under the strategy scope).

    Args:
      variables: the trainable variables.
      make_slot: (variable, slot name) -> the slot variable; default a
        zero variable of the variable's shape (weight-update sharding makes
        per-replica shards instead).
    """
    for v in variables:
      name = v.name.split(':')[0]
      for slot in self.slot_names:
        self.slots[f'{name}/{slot}'] = (
            make_slot(v, f'{name}/{slot}') if make_slot else tf.Variable(
                tf.zeros_like(v), trainable=False, name=f'{name}/{slot}'))

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

  def loss_weight_decay(self) -> float:
    return 0.0  # Decoupled by default: applied in the update.

  def update(self, var, grad, slots, lr, step, *, decay: bool):
    """One update of one device copy; returns the assign ops."""
    new_var, new_slots = self.apply(var, grad, slots, lr, step, decay=decay)
    return [s.assign(v) for s, v in zip(slots, new_slots)] + [
        var.assign(new_var)]

  def update_sparse(self, var, grad: tf.IndexedSlices, slots, lr, step, *,
                    decay: bool):
    """One update of one device copy from a gradient that is the rows a
    batch touched (an embedding lookup's). Rules whose every row moves
    whatever the gradient (momentum, weight decay, Adam) apply it densely:
    the same update; `Sgd` changes only the rows touched."""
    return self.update(var, tf.convert_to_tensor(grad), slots, lr, step,
                       decay=decay)


def _schedule_keys(schedule, prefix: str) -> dict:
  """The schedule's values under MLPerf's `<prefix>opt_...` key names."""
  d = schedule.describe()
  return {
      f'{prefix}opt_base_learning_rate': d['base_learning_rate'],
      f'{prefix}opt_end_learning_rate': d.get('end_learning_rate', 0.0),
      f'{prefix}opt_learning_rate_decay_poly_power': d.get('decay_power', 1.0),
      f'{prefix}opt_learning_rate_decay_steps': d['decay_steps'],
  }


class Lars(_Optimizer):
  """LARS as MLPerf ResNet defines it (You et al. 2017, TPU reference form).

  For a variable w with gradient g (excluded variables skip the first line):
    trust = eeta * |w| / (|g| + wd * |w| + epsilon)  (1 if |w| or |g| is 0)
    v = momentum * v + lr * trust * (g + wd * w);  w = w - v
  """

  slot_names = ('momentum',)

  def __init__(self, *, exclude, momentum: float = 0.9,
               weight_decay: float = 1e-4, eeta: float = 0.001,
               epsilon: float = 0.0):
    """Args:
      exclude: name -> True for variables that skip weight decay and LARS
        scaling (MLPerf: batch norm and biases; the model's naming rule).
      momentum: heavy-ball momentum.
      weight_decay: L2 coefficient inside the update.
      eeta: LARS trust coefficient.
      epsilon: added to the trust ratio's denominator (MLPerf v0.7: 0).
    """
    super().__init__(weight_decay=weight_decay, exclude=exclude)
    self.momentum, self.eeta, self.epsilon = momentum, eeta, epsilon

  def apply(self, var, grad, slots, lr, step, *, decay: bool, norm=tf.norm):
    del step
    (slot,) = slots
    if not decay:
      scaled_lr = lr
    else:
      w_norm = norm(var)
      g_norm = norm(grad)
      trust = tf.where(
          w_norm > 0,
          tf.where(g_norm > 0, self.eeta * w_norm /
                   (g_norm + self.weight_decay * w_norm + self.epsilon), 1.0),
          1.0)
      scaled_lr = lr * trust
      grad = grad + self.weight_decay * var
    new_slot = self.momentum * slot + scaled_lr * grad
    return var - new_slot, [new_slot]

  def mlperf_params(self, schedule) -> dict:
    return {
        'opt_name': 'lars',
        **_schedule_keys(schedule, 'lars_'),
        'lars_epsilon': self.epsilon,
        'lars_opt_learning_rate_warmup_epochs':
            schedule.describe().get('warmup_epochs', 0.0),
        'lars_opt_momentum': self.momentum,
        'lars_opt_weight_decay': self.weight_decay,
    }


class Sgd(_Optimizer):
  """Plain SGD, w = w - lr * g (Google's v0.7 DLRM:
  tf.train.GradientDescentOptimizer, and the TPU embedding's
  StochasticGradientDescentParameters). A sparse gradient (the rows an
  embedding lookup touched, repeats summed) changes those rows only."""

  def __init__(self, *, exclude=lambda name: False):
    super().__init__(weight_decay=0.0, exclude=exclude)

  def apply(self, var, grad, slots, lr, step, *, decay: bool, norm=tf.norm):
    del slots, step, decay, norm
    return var - lr * grad, []

  def update_sparse(self, var, grad, slots, lr, step, *, decay: bool):
    del slots, step, decay
    # The raw op on the handle: in a replica context a replica-local
    # variable's handle is that replica's copy (a sharded table's shard),
    # whose `scatter_sub` TensorFlow refuses; a plain variable's is itself.
    return [tf.raw_ops.ResourceScatterSub(
        resource=var.handle, indices=grad.indices,
        updates=tf.cast(lr, grad.values.dtype) * grad.values)]

  def mlperf_params(self, schedule) -> dict:
    """DLRM's keys (the 0.7.0 checker's closed_dlrm.yaml)."""
    d = schedule.describe()
    keys = {'opt_base_learning_rate': d['base_learning_rate'],
            'sgd_opt_base_learning_rate': d['base_learning_rate'],
            'sgd_opt_learning_rate_decay_poly_power': d.get('decay_power', 1),
            'sgd_opt_learning_rate_decay_steps': d.get('decay_steps', 0),
            'opt_learning_rate_warmup_steps': d.get('warmup_steps', 0)}
    if 'decay_start_step' in d:
      keys['lr_decay_start_steps'] = d['decay_start_step']
    return keys


class Adagrad(_Optimizer):
  """Adagrad as TF1's AdagradOptimizer (Google's v0.7 DLRM's `--optimizer=
  adagrad`, with `adagrad_init_accum` 0.01):

    a = a + g^2;  w = w - lr * g / sqrt(a)

  the accumulator starting at `initial_accumulator`. A sparse gradient
  (repeated rows summed first, as TF1's sparse apply does) changes only the
  rows it names and their accumulator rows; elsewhere g = 0 leaves both as
  they were, so the sparse and dense forms agree.
  """

  slot_names = ('accumulator',)

  def __init__(self, *, exclude=lambda name: False,
               initial_accumulator: float = 0.01):
    if initial_accumulator <= 0:
      raise ValueError(f'`initial_accumulator` must be > 0 (it divides), got '
                       f'{initial_accumulator}.')
    super().__init__(weight_decay=0.0, exclude=exclude)
    self.initial_accumulator = initial_accumulator

  def build(self, variables, *, make_slot=None) -> None:
    super().build(variables, make_slot=make_slot)
    for slot in self.slots.values():
      slot.assign(tf.fill(slot.shape, self.initial_accumulator))

  def apply(self, var, grad, slots, lr, step, *, decay: bool, norm=tf.norm):
    del step, decay, norm
    (accumulator,) = slots
    new_accumulator = accumulator + tf.square(grad)
    return var - lr * grad / tf.sqrt(new_accumulator), [new_accumulator]

  def update_sparse(self, var, grad, slots, lr, step, *, decay: bool):
    del step, decay
    (accumulator,) = slots
    rows, where = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, where, tf.shape(rows)[0])
    new_rows = tf.gather(accumulator, rows) + tf.square(values)
    return [accumulator.scatter_update(tf.IndexedSlices(new_rows, rows)),
            var.scatter_sub(tf.IndexedSlices(
                tf.cast(lr, values.dtype) * values / tf.sqrt(new_rows),
                rows))]

  def mlperf_params(self, schedule) -> dict:
    d = schedule.describe()
    return {'opt_name': 'adagrad',
            'opt_base_learning_rate': d['base_learning_rate'],
            'opt_adagrad_initial_accumulator_value':
                self.initial_accumulator,
            'opt_learning_rate_warmup_steps': d.get('warmup_steps', 0)}


class SgdMomentum(_Optimizer):
  """SGD with (heavy-ball) momentum; weight decay is an L2 term in the loss.

    v = momentum * v + g;  w = w - lr * v
  """

  slot_names = ('momentum',)

  MLPERF_KEYS = ('resnet', 'ssd', 'maskrcnn', 'minigo')

  def __init__(self, *, exclude, momentum: float = 0.9,
               weight_decay: float = 1e-4, mlperf_keys: str = 'resnet'):
    """Args:
      exclude: name -> True for variables without weight decay.
      momentum: heavy-ball momentum.
      weight_decay: L2 coefficient (its gradient wd x w joins each
        replica's gradient before the all-reduce, as Google's SSD adds it).
      mlperf_keys: which benchmark's hyper-parameter keys to log: 'resnet'
        (sgd_opt_...), 'ssd' (opt_base_learning_rate,
        opt_learning_rate_warmup_factor, ... from training.schedules.
        GoogleSsdV07) or 'maskrcnn' (the same names, with the decay factor
        and drop steps, from training.schedules.GoogleMaskRcnnV07).
    """
    if mlperf_keys not in self.MLPERF_KEYS:
      raise ValueError(f'`mlperf_keys` must be one of {self.MLPERF_KEYS}, '
                       f'got {mlperf_keys!r}.')
    super().__init__(weight_decay=weight_decay, exclude=exclude)
    self.momentum, self.mlperf_keys = momentum, mlperf_keys

  def apply(self, var, grad, slots, lr, step, *, decay: bool, norm=tf.norm):
    del step, decay, norm  # Weight decay is in the loss.
    (slot,) = slots
    new_slot = self.momentum * slot + grad
    return var - lr * new_slot, [new_slot]

  def mlperf_params(self, schedule) -> dict:
    if self.mlperf_keys == 'minigo':  # train_loop.py's, as strings.
      d = schedule.describe()
      return {'lr_boundaries': str(list(d['boundaries'])).strip('[]'),
              'lr_rates': str(list(d['values'])).strip('[]'),
              'opt_weight_decay': self.weight_decay}
    if self.mlperf_keys == 'maskrcnn':  # Google's v0.7 log has no others.
      d = schedule.describe()
      return {
          'opt_base_learning_rate': d['base_learning_rate'],
          'opt_learning_rate_warmup_steps': d['warmup_steps'],
          'opt_learning_rate_warmup_factor': d['warmup_factor'],
          'opt_learning_rate_decay_factor': d['decay_factor'],
          'opt_learning_rate_decay_steps': d['drop_steps'],
      }
    if self.mlperf_keys == 'ssd':
      d = schedule.describe()
      return {
          'opt_base_learning_rate': d['base_learning_rate'],
          'opt_weight_decay': self.weight_decay,
          'opt_learning_rate_warmup_factor': d['warmup_factor'],
          'opt_learning_rate_warmup_steps': d['warmup_steps'],
          'opt_learning_rate_decay_boundary_epochs': d['boundary_epochs'],
      }
    return {
        'opt_name': 'sgd',
        **_schedule_keys(schedule, 'sgd_'),
        'sgd_opt_weight_decay': self.weight_decay,
        'sgd_opt_momentum': self.momentum,
        'opt_learning_rate_warmup_epochs':
            schedule.describe().get('warmup_epochs', 0.0),
    }

  def loss_weight_decay(self) -> float:
    return self.weight_decay


def _alt_schedule_keys(d: dict) -> dict:
  """The MLPerf GNMT keys of a schedule with an alternative (t2t) warm-up
  and a decay in steps (training/schedules.GoogleGnmtV07), as Google's
  v0.7 logs have them; {} for any other schedule."""
  if 'warmup_scheme' not in d:
    return {}
  return {'opt_learning_rate_alt_warmup_func': d['warmup_scheme'],
          'opt_learning_rate_alt_decay_func': 'True',
          'opt_learning_rate_decay_interval': d['decay_interval'],
          'opt_learning_rate_decay_factor': d['decay_factor'],
          'opt_learning_rate_decay_steps': d['decay_steps'],
          'opt_learning_rate_remain_steps': d['remain_steps']}


class Adam(_Optimizer):
  """Adam with bias correction and optional decoupled weight decay (AdamW).

  With t the number of this update (1 for the first):
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon) [+ wd * w]
    w = w - lr * u
  With `epsilon_hat` epsilon is added before the bias correction, as
  tf.compat.v1.train.AdamOptimizer (Google's v0.7 Transformer, through
  Lingvo) does: u = sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon).
  """

  slot_names = ('adam_m', 'adam_v')

  def __init__(self, *, exclude=lambda name: False, beta_1: float = 0.9,
               beta_2: float = 0.999, epsilon: float = 1e-8,
               weight_decay: float = 0.0, epsilon_hat: bool = False):
    super().__init__(weight_decay=weight_decay, exclude=exclude)
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.epsilon_hat = epsilon_hat

  def direction(self, var, grad, slots, step, *, decay: bool):
    """The new moments and the update direction u above."""
    m, v = slots
    t = tf.cast(step, tf.float32) + 1.0
    next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
    next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
    if self.epsilon_hat:
      update = (tf.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t) *
                next_m / (tf.sqrt(next_v) + self.epsilon))
    else:
      m_hat = next_m / (1.0 - self.beta_1**t)
      v_hat = next_v / (1.0 - self.beta_2**t)
      update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    if decay and self.weight_decay:
      update += self.weight_decay * var
    return next_m, next_v, update

  def apply(self, var, grad, slots, lr, step, *, decay: bool, norm=tf.norm):
    del norm
    next_m, next_v, update = self.direction(var, grad, slots, step,
                                            decay=decay)
    return var - lr * update, [next_m, next_v]

  def mlperf_params(self, schedule) -> dict:
    d = schedule.describe()
    return {'opt_name': 'adam',
            'opt_base_learning_rate': d['base_learning_rate'],
            'opt_learning_rate_warmup_steps': d.get('warmup_steps', 0),
            'opt_adam_beta_1': self.beta_1, 'opt_adam_beta_2': self.beta_2,
            'opt_adam_epsilon': self.epsilon, **_alt_schedule_keys(d)}


class Lamb(Adam):
  """LAMB as the MLPerf BERT reference defines it (You et al. 2019).

  Adam's direction u (with decoupled weight decay), scaled per variable:
    ratio = |w| / |u|  (1 if |w| or |u| is 0);  w = w - lr * ratio * u
  Weight decay skips LayerNorm and biases (the exclusion rule), and so does
  the layer adaptation by default: those variables take ratio 1, as Google's
  v0.7 lamb_optimizer.py sets exclude_from_layer_adaptation to the weight
  decay exclusions. `adapt_excluded=True` gives them the ratio too (the JAX
  v0.7 submission's LAMB). Its schedule
  is WarmupPolynomialDecay. The reference counts t from the global step before
  the increment, which makes its first correction divide by zero unless the
  step is pre-incremented; here t is always the update's own count.
  """

  def __init__(self, *, exclude, beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-6, weight_decay: float = 0.01,
               adapt_excluded: bool = False):
    super().__init__(exclude=exclude, beta_1=beta_1, beta_2=beta_2,
                     epsilon=epsilon, weight_decay=weight_decay)
    self.adapt_excluded = adapt_excluded

  def apply(self, var, grad, slots, lr, step, *, decay: bool, norm=tf.norm):
    next_m, next_v, update = self.direction(var, grad, slots, step,
                                            decay=decay)
    if not (decay or self.adapt_excluded):
      return var - lr * update, [next_m, next_v]
    w_norm, u_norm = norm(var), norm(update)
    ratio = tf.where(w_norm > 0,
                     tf.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
    return var - lr * ratio * update, [next_m, next_v]

  def mlperf_params(self, schedule) -> dict:
    d = schedule.describe()
    return {
        'opt_name': 'lamb',
        'opt_base_learning_rate': d['base_learning_rate'],
        'opt_epsilon': self.epsilon,  # Ruleset 0.7.0's name.
        'opt_lamb_epsilon': self.epsilon,  # Later rulesets' name.
        'opt_learning_rate_training_steps': d['decay_steps'],
        'opt_learning_rate_warmup_steps': d.get('warmup_steps', 0),
        'num_warmup_steps': d.get('warmup_steps', 0),
        'start_warmup_step': d.get('start_warmup_step', 0),
        'opt_lamb_beta_1': self.beta_1,
        'opt_lamb_beta_2': self.beta_2,
        'opt_lamb_weight_decay_rate': self.weight_decay,
        'opt_lamb_learning_rate_decay_poly_power': d.get('decay_power', 1.0),
    }
