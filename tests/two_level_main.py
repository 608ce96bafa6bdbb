"""One process of the two-level summation tests (8 logical CPUs, or one of
several MultiWorkerMirroredStrategy workers).

  python -m tests.two_level_main OUT.npz mirrored8|multi_worker GROUP_SIZE...

For each group size: the two-level sum of integer-valued tensors (exact in
float32, so it must equal the one all-reduce bit for bit) and the weights of
5 LAMB steps with two-level gradient sums; plus the weights with one
all-reduce. TF_CONFIG must be set for multi_worker.
"""

import sys

import numpy as np


def main(out, mode, *group_sizes):
  from core import startup
  startup.import_tensorflow()  # First: TensorFlow without Keras.
  from distribution import strategy as strategies
  if mode == 'mirrored8':
    strategies.split_cpu(8)
    strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=8)
  else:
    strategy = strategies.make_strategy(kind='multi_worker', collective='ring')
  import tensorflow as tf
  from distribution import gradients as gradients_lib
  from distribution import two_level_sum
  from tests import regression_mlp

  results = {}
  flat, _, _, ops = regression_mlp.train(
      strategy, regression_mlp.OPTIMIZERS['lamb'], steps=5)
  results.update({f'flat/{k}': v for k, v in flat.items()})
  results['flat_ops'] = ops
  for g in map(int, group_sizes):
    summation = two_level_sum.TwoLevelSum(strategy, g)

    @tf.function
    def sums():
      def replica():
        ctx = tf.distribute.get_replica_context()
        r = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
        values = [tf.fill([3, 5], r + 1.0), tf.range(7.0) * (r + 2.0)]
        return summation(values), ctx.all_reduce('sum', values)
      two, one = strategy.run(replica)
      return ([strategy.experimental_local_results(t) for t in two],
              [strategy.experimental_local_results(t) for t in one])

    two, one = sums()
    for i, (a, b) in enumerate(zip(two, one)):
      results[f'g{g}/sum{i}'] = np.stack([t.numpy() for t in a])
      results[f'g{g}/allreduce{i}'] = np.stack([t.numpy() for t in b])
    weights, _, _, ops = regression_mlp.train(
        strategy, regression_mlp.OPTIMIZERS['lamb'], steps=5,
        gradients=gradients_lib.GradientOptions(two_level_group_size=g))
    results.update({f'g{g}/{k}': v for k, v in weights.items()})
    results[f'g{g}_ops'] = ops
  np.savez(out, **results)


if __name__ == '__main__':
  main(*sys.argv[1:])
