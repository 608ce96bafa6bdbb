"""Benchmark: what each scaling technique costs and saves on this machine.

  python -m benchmarks.scaling [--replicas=8] [--rounds=5]
  python -m benchmarks.scaling --workers=4   # 4 processes, 1 replica each

On `--replicas` logical CPU devices, each technique beside plain data
parallelism in the same run, interleaved round by round:
- ResNet-18 (width 0.5, 32x32, 8 images a replica) under MirroredStrategy
  with LAMB (two slots a weight): weight-update sharding; gradients in packs
  of 256 KB; two-level sums over every grid the replica count allows; spatial
  partitioning in 2 (groups of 2 replicas share 16 images);
- BERT-mini (4 x 256, sequence 64, 8 sequences a data-parallel replica) with
  LAMB: tensor model parallelism on a (N/2, 2) DTensor mesh against
  MirroredStrategy data parallelism over the same N devices, same global
  batch.
Printed: step time (median of `--rounds` loops of 5 steps) relative to
plain, optimizer bytes per device, collective ops in the traced train
loop's graph (DTensor places its collectives after tracing: not counted).
A CPU cannot show a TPU pod's speed-ups (no torus, no HBM pressure): the
ratios here are the techniques' overhead on a CPU, and docs/benchmarks.md
says what each changes on a pod.
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from tensorflow.experimental import dtensor

from benchmarks import common
from core import entry_point
from distribution import gradients as gradients_lib
from distribution import mesh as mesh_lib
from distribution import strategy as strategies
from distribution import weight_update_sharding as wus
from input_pipeline import spatial as spatial_input
from models.bert import model as bert_lib
from models.common.resnet import ResNet
from training import losses
from training import optimizers
from training import step as step_lib

FLAGS = flags.FLAGS


class Task:
  def loss_share(self, model, batch):
    logits, state = model(batch['image'], training=True)
    return losses.share_of_global_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=batch['label'], logits=logits)), state


def variants(num_replicas: int) -> dict:
  """Label -> (weight-update sharding, gradient options, partitions)."""
  plain = gradients_lib.GradientOptions()
  out = {'plain': (False, plain, 1), 'wus': (True, plain, 1),
         'packs 256 KB': (False, gradients_lib.GradientOptions(
             bytes_per_pack=256 * 1024), 1)}
  for g in range(2, num_replicas):
    if num_replicas % g == 0:
      out[f'two-level {g}x{num_replicas // g}'] = (
          False, gradients_lib.GradientOptions(two_level_group_size=g), 1)
  out['spatial 2'] = (False, plain, 2)
  return out


def lamb():
  return optimizers.Lamb(exclude=lambda name: 'bn' in name or 'bias' in name
                         or 'LayerNorm' in name)


def build_resnet(strategy, sharded: bool, gradients, partitions: int):
  n = strategy.num_replicas_in_sync
  optimizer = lamb()
  with strategy.scope():
    model = ResNet(depth=18, width_multiplier=0.5, num_classes=10, seed=0,
                   spatial_partitions=partitions)
    step = tf.Variable(0, dtype=tf.int64)
    optimizer.build(list(model.trainable_variables), make_slot=(
        wus.make_slot_factory(n) if sharded else None))
  rng = np.random.default_rng(0)
  images = rng.standard_normal((64, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 10, 64).astype(np.int32)

  def dataset_fn(ctx):
    return tf.data.Dataset.from_tensor_slices(
        {'image': images, 'label': labels}).repeat().batch(
            ctx.get_per_replica_batch_size(8 * n))

  if partitions > 1:
    dataset_fn = spatial_input.partitioned_dataset_fn(
        dataset_fn, partitions=partitions, feature='image')
  iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
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


class BertTask:
  def loss_share(self, model, batch):
    mlm, nsp = model(batch, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=batch['masked_lm_ids'], logits=mlm), axis=1) + (
            tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=batch['next_sentence_labels'], logits=nsp))
    return losses.share_of_global_mean(loss), {}


def build_bert(n: int, mesh_shape):
  """BERT-mini, global batch 8 x (data-parallel degree) ... the same for
  both layouts: 8 x n / 2 sequences."""
  batch = 4 * n
  rng = np.random.default_rng(0)
  seq, preds = 64, 10
  element = {
      'input_ids': rng.integers(5, 1000, (batch, seq)).astype(np.int32),
      'input_mask': np.ones((batch, seq), np.int32),
      'segment_ids': np.zeros((batch, seq), np.int32),
      'masked_lm_positions': rng.integers(0, seq, (batch, preds)).astype(
          np.int32),
      'masked_lm_ids': rng.integers(5, 1000, (batch, preds)).astype(np.int32),
      'next_sentence_labels': rng.integers(0, 2, batch).astype(np.int32)}

  def dataset_fn(ctx):
    return tf.data.Dataset.from_tensor_slices(element).repeat().batch(
        ctx.get_per_replica_batch_size(batch))

  def model():
    return bert_lib.Bert(size='mini', vocab_size=1024,
                         max_position_embeddings=seq, dropout_rate=0.0)

  optimizer = lamb()
  if mesh_shape:
    partitioner = mesh_lib.MeshConfig(shape=mesh_shape,
                                      rules=bert_lib.sharding_rules()).make()
    strategy = tf.distribute.get_strategy()
    with partitioner.scope():
      bert, step = model(), tf.Variable(0, dtype=tf.int64)
      optimizer.build(list(bert.trainable_variables))
    iterator = iter(partitioner.distribute_datasets_from_function(
        dataset_fn, batch))
  else:
    devices = [d.name for d in tf.config.list_logical_devices('CPU')][:n]
    strategy = strategies.mirrored(devices)
    with strategy.scope():
      bert, step = model(), tf.Variable(0, dtype=tf.int64)
      optimizer.build(list(bert.trainable_variables))
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
  loop = step_lib.make_train_loop(
      strategy=strategy, model=bert, optimizer=optimizer,
      learning_rate=lambda s: 1e-3, task=BertTask(), step=step)
  collectives = common.collective_ops(
      loop.get_concrete_function(iterator, tf.constant(1)).graph)
  if mesh_shape:
    loop = partitioner.wrap_loop(loop)
    collectives = 'by DTensor'
    slot_bytes = sum(dtensor.unpack(slot.read_value())[0].shape.num_elements() * 4
                     for slot in optimizer.slots.values())
  else:
    slot_bytes = sum(
        strategy.experimental_local_results(slot)[0].shape.num_elements() * 4
        for slot in optimizer.slots.values())
  loop(iterator, tf.constant(1))  # Compile.
  return (lambda: float(loop(iterator, tf.constant(5)))), slot_bytes, (
      collectives)


def compare(title: str, runs: dict, show: bool = True) -> None:
  """Times the runs interleaved round by round; prints against the first
  (if `show`: one worker prints for a multi-process run)."""
  times = {label: [] for label in runs}
  for _ in range(FLAGS.rounds):
    for label, (fn, _, _) in runs.items():
      start = time.perf_counter()
      fn()
      times[label].append((time.perf_counter() - start) / 5)
  if not show:
    return
  base = statistics.median(times[next(iter(runs))])
  print(title, flush=True)
  for label, (_, slot_bytes, collectives) in runs.items():
    t = statistics.median(times[label])
    print(f'  {label:15s} step {t * 1e3:7.1f} ms ({t / base:.2f}x)  '
          f'optimizer bytes/device {slot_bytes / 1e6:6.2f} MB  '
          f'collective ops in the graph {collectives}', flush=True)


def run_workers(n: int) -> None:
  """Runs this benchmark as `n` MultiWorkerMirroredStrategy processes on
  127.0.0.1 (one replica each); worker 0 prints."""
  ports = []
  for _ in range(n):
    with socket.socket() as sock:
      sock.bind(('127.0.0.1', 0))
      ports.append(sock.getsockname()[1])
  cluster = {'worker': [f'127.0.0.1:{p}' for p in ports]}
  procs = [subprocess.Popen(
      [sys.executable, '-m', 'benchmarks.scaling',
       f'--rounds={FLAGS.rounds}', f'--worker_index={i}'],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', TF_CONFIG=json.dumps(
          {'cluster': cluster, 'task': {'type': 'worker', 'index': i}})),
      # The others' output repeats worker 0's, and at exit their
      # coordination-service heartbeats to the finished worker 0 fail.
      stdout=None if i == 0 else subprocess.DEVNULL,
      stderr=None if i == 0 else subprocess.DEVNULL)
           for i in range(n)]
  codes = [p.wait() for p in procs]
  if any(codes):
    raise SystemExit(f'Worker exit codes: {codes}')


def main(argv):
  del argv
  if FLAGS.workers and FLAGS.worker_index < 0:
    run_workers(FLAGS.workers)
    return
  if FLAGS.worker_index >= 0:
    strategy = strategies.make_strategy(kind='multi_worker', collective='ring')
    n = strategy.num_replicas_in_sync
    # One replica a process: no room for spatial groups inside a host.
    chosen = {k: v for k, v in variants(n).items() if v[2] == 1}
    compare(f'ResNet-18 x0.5, LAMB, {n} worker processes (one replica '
            'each), 8 images each:',
            {label: build_resnet(strategy, sharded, gradients, partitions)
             for label, (sharded, gradients, partitions) in chosen.items()},
            show=FLAGS.worker_index == 0)
    return
  n = FLAGS.replicas
  strategies.split_cpu(n)
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=n)
  compare(f'ResNet-18 x0.5, LAMB, {n} replicas, 8 images each:',
          {label: build_resnet(strategy, sharded, gradients, partitions)
           for label, (sharded, gradients, partitions) in variants(n).items()})
  compare(f'BERT-mini, LAMB, {n} devices, {4 * n} sequences a step:',
          {'data parallel': build_bert(n, None),
           f'mesh {n // 2}x2': build_bert(n, (n // 2, 2))})


def main_then_exit(argv):
  main(argv)
  if FLAGS.workers or FLAGS.worker_index >= 0:
    return  # Worker processes end together through their cluster.
  # The figures are printed; tearing down ~10 GB of traced graphs and
  # DTensor state takes the interpreter's final garbage collection a minute
  # or more (measured: 70 s after 8 replicas), which looked like a hang.
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


if __name__ == '__main__':
  flags.DEFINE_integer('replicas', 8, 'Logical CPU devices.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_integer('workers', 0, 'Run as this many worker processes on '
                       '127.0.0.1 instead (ResNet part only).')
  flags.DEFINE_integer('worker_index', -1, 'Internal: this worker.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main_then_exit))
