"""Benchmark: what each scaling technique costs and saves on this machine.

  python -m tools.benchmarks.scaling [--replicas=8] [--rounds=5]

On `--replicas` logical CPU devices (MirroredStrategy), the ResNet-18
quickstart model with LAMB-sized state (two slots a weight) and LARS, each
technique beside plain data parallelism, interleaved round by round
(weight-update sharding; gradients in packs of 256 KB; two-level sums over
every grid the replica count allows):
- step time (median of `--rounds` loops of 5 steps), relative to plain;
- optimizer bytes per replica (the slots' copies on one device);
- collective ops per step (in the traced train loop's graph).
A CPU cannot show a TPU pod's speed-ups (no torus, no HBM pressure): the
ratios here are the techniques' overhead on a CPU, and docs/benchmarks.md
says what each changes on a pod.
"""

import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from distribution import strategy as strategies
from models.resnet import ResNet
from tools.benchmarks import common
from training import losses
from training import optimizers
from training import step as step_lib
from training import weight_update_sharding as wus

FLAGS = flags.FLAGS


class Task:
  def loss_share(self, model, batch):
    logits, state = model(batch['image'], training=True)
    return losses.share_of_global_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=batch['label'], logits=logits)), state


def variants(num_replicas: int) -> dict:
  """Label -> (weight-update sharding, gradient options)."""
  plain = step_lib.GradientOptions()
  out = {'plain': (False, plain), 'wus': (True, plain),
         'packs 256 KB': (False, step_lib.GradientOptions(
             bytes_per_pack=256 * 1024))}
  for g in range(2, num_replicas):
    if num_replicas % g == 0:
      out[f'two-level {g}x{num_replicas // g}'] = (
          False, step_lib.GradientOptions(two_level_group_size=g))
  return out


def build(strategy, sharded: bool, gradients, optimizer_name: str):
  n = strategy.num_replicas_in_sync
  optimizer = {
      'lamb': lambda: optimizers.Lamb(exclude=lambda name: 'bn' in name),
      'lars': lambda: optimizers.Lars(exclude=lambda name: 'bn' in name),
  }[optimizer_name]()
  with strategy.scope():
    model = ResNet(depth=18, width_multiplier=0.5, num_classes=10, seed=0)
    model(tf.zeros([1, 32, 32, 3]), training=False)
    step = tf.Variable(0, dtype=tf.int64)
    optimizer.build(list(model.trainable_variables), make_slot=(
        wus.make_slot_factory(n) if sharded else None))
  rng = np.random.default_rng(0)
  images = rng.standard_normal((64, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 10, 64).astype(np.int32)
  ds = tf.data.Dataset.from_tensor_slices(
      {'image': images, 'label': labels}).repeat().batch(8 * n)
  iterator = iter(strategy.experimental_distribute_dataset(ds))
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=optimizer,
      learning_rate=lambda s: 0.01, task=Task(), step=step,
      gradients=gradients, weight_update_sharding=sharded)
  loop(iterator, tf.constant(1))  # Compile.
  collectives = common.collective_ops(
      loop.get_concrete_function(iterator, tf.constant(1)).graph)
  # Every replica holds the same amount: count the first one's copies.
  slot_bytes = sum(
      strategy.experimental_local_results(slot)[0].shape.num_elements() * 4
      for slot in optimizer.slots.values())
  return (lambda: loop(iterator, tf.constant(5)).numpy()), slot_bytes, (
      collectives)


def main(argv):
  del argv
  strategy = strategies.make_strategy(kind='mirrored',
                                      num_cpu_devices=FLAGS.replicas)
  for name in ('lamb', 'lars'):
    runs = {label: build(strategy, sharded, gradients, name)
            for label, (sharded, gradients) in variants(
                FLAGS.replicas).items()}
    times = {label: [] for label in runs}
    for _ in range(FLAGS.rounds):
      for label, (fn, _, _) in runs.items():
        start = time.perf_counter()
        fn()
        times[label].append((time.perf_counter() - start) / 5)
    plain = statistics.median(times['plain'])
    print(f'{name.upper()} on {FLAGS.replicas} replicas (ResNet-18 x0.5):')
    for label, (_, slot_bytes, collectives) in runs.items():
      t = statistics.median(times[label])
      print(f'  {label:15s} step {t * 1e3:7.1f} ms ({t / plain:.2f}x plain)  '
            f'optimizer bytes/replica {slot_bytes / 1e6:6.2f} MB  '
            f'collective ops in the graph {collectives}')


if __name__ == '__main__':
  flags.DEFINE_integer('replicas', 8, 'Logical CPU devices.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  app.run(main)
