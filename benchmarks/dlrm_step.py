"""DLRM train steps: sparse row updates against a table's size, and sharded
tables against whole ones.

  python -m benchmarks.dlrm_step --measure=sparse [--rounds=5]
  python -m benchmarks.dlrm_step --measure=sharding [--rounds=5]
  make garden_venv   # once, for --measure=garden
  python -m benchmarks.dlrm_step --measure=garden [--rounds=5]
  python -m benchmarks.dlrm_step --measure=input \
      [--data_dir=data/dlrm_quickstart] [--batch=3456]

`sparse` (one device): the runtime's train loop on a DLRM whose first
table has 10,000 or 10,000,000 rows (the other 8 the quickstart's
MovieLens sizes), batch 2,048, width 16, ids uniform over each table; plain
SGD updates only the rows a batch touched (Optimizer.update_sparse). A
third variant densifies the big table's gradient (the base optimizer's
update_sparse), what a dense update would cost. Times are medians of
interleaved rounds; ratios against the 10,000-row table.

`sharding` (4 logical CPUs, MirroredStrategy): the same model with a
1,000,000-row first table, whole on every replica or its rows split 'mod'
over the 4 (EMBEDDING_SHARDING); the step time, each replica's rows of the
table, and the elements entering the lookup's collectives a replica.

`garden`: ours against TF Model Garden's DLRM (official.recommendation.
ranking, through benchmarks/garden_worker.py in its own venv and
process), the same tables (first 10,000 rows), widths, batch, float32 and
SGD, one fixed synthetic batch on both sides, interleaved round by round.

`input`: input_pipeline.clicks.ClickInput's training batches (parsed a
batch at a time) on one host, examples a second, against the same records
parsed one example at a time; --batch 3,456 is Google's 55,296 over the 16
hosts of a v4-128.
"""

import argparse
import sys

from benchmarks import common
from core import startup


def build_and_loop(tf, *, plan, rows, dense_update: bool, batch: int,
                   steps: int, fixed_batch: bool = False):
  """A loop(steps) callable for one variant."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from models.dlrm import model as dlrm
  from models.dlrm import task as dlrm_task
  from training import optimizers
  from training import step as step_lib
  vocab = (rows, 1642, 943, 795, 21, 19, 17, 9, 7)
  with plan.scope():
    model = dlrm.Dlrm(vocab_sizes=vocab, num_dense=3, embedding_dim=16,
                      bottom_mlp=(64, 16), top_mlp=(64, 32, 1))
    step = tf.Variable(0, dtype=tf.int64)

  class DenseSgd(optimizers.Sgd):
    update_sparse = optimizers.Adam.update_sparse  # The densifying rule.

  optimizer = DenseSgd() if dense_update else optimizers.Sgd()
  optimizer.build(model.trainable_variables)
  plan.built(model=model, optimizer=optimizer)
  rng = np.random.default_rng(0)
  n = batch * 8
  data = {'dense': rng.random([n, 3]).astype(np.float32),
          'sparse': np.stack([rng.integers(0, v, n) for v in vocab], 1),
          'label': rng.integers(0, 2, n).astype(np.float32)}
  per_replica = batch // plan.replicas
  ds = tf.data.Dataset.from_tensor_slices(data).repeat()

  def dataset_fn(ctx):
    if fixed_batch:  # One batch again and again, as the garden worker's.
      return tf.data.Dataset.from_tensors(
          {k: v[:per_replica] for k, v in data.items()}).repeat()
    return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(
        per_replica, drop_remainder=True)

  iterator = iter(plan.distribute(dataset_fn, batch, training=True))
  loop = step_lib.make_train_loop(
      strategy=plan.strategy, model=model, optimizer=optimizer,
      learning_rate=lambda s: tf.constant(0.1), task=dlrm_task.DlrmTask(
          model=None, data=None), step=step, **plan.train_loop_options())
  loop(iterator, tf.constant(1))
  return (lambda: float(loop(iterator, tf.constant(steps)))), model


def measure_input(tf, args) -> int:
  import time  # pylint: disable=import-outside-toplevel
  from input_pipeline import clicks  # pylint: disable=import-outside-toplevel
  data = clicks.ClickInput(data_dir=args.data_dir, shuffle_buffer=16384)
  context = tf.distribute.InputContext()
  batched = data.train_dataset(context, global_batch_size=args.batch)
  spec = clicks.features(data.num_dense, len(data.vocab_sizes))
  from input_pipeline import records  # pylint: disable=import-outside-toplevel
  # The same shuffled record stream, each record parsed on its own.
  raw = records.shuffled_epochs(
      records.list_files(data.train_files), context, seed=0, start_step=0,
      per_replica_batch=args.batch, shuffle_buffer=data.shuffle_buffer,
      cycle_length=data.interleave_cycle, deterministic=False)
  per_example = raw.map(
      lambda e, i, r: tf.io.parse_single_example(r, spec),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).batch(
          args.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
  batches = max(args.steps, 5)
  rates = {}
  for name, ds in (('a batch at a time', batched),
                   ('an example at a time', per_example)):
    iterator = iter(ds)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
      next(iterator)
    rates[name] = batches * args.batch / (time.perf_counter() - start)
    print(f'  parsed {name:22s} {rates[name]:12,.0f} examples/s')
  batch_rate, example_rate = rates.values()
  print(common.page_rows([(
      f'input, a batch parsed at once, batch {args.batch:,}',
      f'{batch_rate:,.0f} examples/s',
      f'an example at a time {example_rate:,.0f}',
      f'{batch_rate / example_rate:.2f}x')]))
  return 0


def measure_garden(tf, args) -> int:
  import os  # pylint: disable=import-outside-toplevel
  from distribution import plan as plan_lib  # pylint: disable=import-outside-toplevel
  root = common.ROOT
  ours, _ = build_and_loop(tf, plan=plan_lib.PlanOptions().make(
      task=None, deterministic=False), rows=10_000, dense_update=False,
                           batch=args.batch, steps=args.steps,
                           fixed_batch=True)
  garden = common.StepWorker(
      os.path.join(root, '.venv-garden', 'bin', 'python'),
      [os.path.join(root, 'benchmarks', 'garden_worker.py'),
       '--model=dlrm', '--rows=10000', f'--batch={args.batch}',
       f'--steps={args.steps}'],
      setup='make garden_venv',
      env={'TF_USE_LEGACY_KERAS': '1', 'TF_CPP_MIN_LOG_LEVEL': '2'})
  try:
    medians = common.interleaved_medians(
        {'ours': ours, 'Model Garden': garden.run}, args.rounds)
  finally:
    garden.close()
  print(f'{args.steps} steps a round, batch {args.batch}, medians of '
        f'{args.rounds} interleaved rounds:')
  for name, seconds in medians.items():
    print(f'  {name:14s} {seconds / args.steps * 1000:8.2f} ms/step  '
          f'{args.batch * args.steps / seconds:12,.0f} samples/s')
  print(f'  ours / Model Garden speed: '
        f'{medians["Model Garden"] / medians["ours"]:.2f}x')
  print(common.page_rows([common.step_row(
      'DLRM', 'float32', args.batch, medians['ours'] / args.steps,
      'Model Garden', medians['Model Garden'] / args.steps, target='>= 1.0',
      unit='ms', digits=2)]))
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--measure', choices=('sparse', 'sharding', 'garden', 'input'),
                      required=True)
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--batch', type=int, default=2048)
  parser.add_argument('--data_dir', default='data/dlrm_quickstart')
  args = parser.parse_args(argv)
  tf = startup.import_tensorflow()
  if args.measure == 'input':
    return measure_input(tf, args)
  if args.measure == 'garden':
    return measure_garden(tf, args)
  from distribution import plan as plan_lib  # pylint: disable=import-outside-toplevel
  from distribution import strategy as strategies

  def make_plan(sharding, kind, devices):
    return plan_lib.PlanOptions(
        distribution=strategies.StrategyConfig(kind=kind,
                                               num_cpu_devices=devices),
        embedding_sharding=sharding, sharded_tables=1).make(
            task=None, deterministic=False)

  if args.measure == 'sparse':
    plan = make_plan('none', 'default', 1)
    variants = {
        '10k rows': dict(rows=10_000, dense_update=False),
        '10M rows': dict(rows=10_000_000, dense_update=False),
        '10M rows, dense update': dict(rows=10_000_000, dense_update=True),
    }
    base = '10k rows'
  else:
    plan = None
    variants = {'whole tables': dict(rows=1_000_000, dense_update=False),
                'mod-sharded': dict(rows=1_000_000, dense_update=False)}
    base = 'whole tables'
  runners, models, plans = {}, {}, {}
  for name, setting in variants.items():
    the_plan = plan or make_plan('mod' if name == 'mod-sharded' else 'none',
                                 'mirrored', 4)
    runners[name], models[name] = build_and_loop(
        tf, plan=the_plan, batch=args.batch, steps=args.steps, **setting)
    plans[name] = the_plan
  medians = common.interleaved_medians(runners, args.rounds)
  print(f'{args.steps} steps a round, batch {args.batch}, medians of '
        f'{args.rounds} interleaved rounds:')
  for name, seconds in medians.items():
    per_step = seconds / args.steps * 1000
    line = (f'  {name:24s} {per_step:8.2f} ms/step  '
            f'{medians[name] / medians[base]:.2f}x')
    if args.measure == 'sharding':
      table = models[name].tables[0]
      rows = [c.shape[0] for c in
              plans[name].strategy.experimental_local_results(table)]
      line += f'  rows of table 0 a replica {rows[0]:,}'
      tables = getattr(models[name].embeddings, 'traced_collective_elements',
                       None)
      if tables:
        line += (f'  lookup collectives a replica: {tables[0]:,} ids, '
                 f'{tables[1]:,} values')
    print(line)
  what = ('sparse update' if args.measure == 'sparse' else
          'a 1,000,000-row table sharded over 4 replicas')
  print(common.page_rows([
      (f'{what}, {name}, batch {args.batch:,}',
       f'{medians[name] / args.steps * 1000:.2f} ms',
       f'{base} {medians[base] / args.steps * 1000:.2f} ms',
       f'{medians[name] / medians[base]:.2f}x')
      for name in medians if name != base]))
  return 0


if __name__ == '__main__':
  sys.exit(main())
