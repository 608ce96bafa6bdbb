"""Predicts a config's time to train on a slice before paying for it.

  python -m tools.predict --gin_file=gin/bert_pod.gin
  python -m tools.predict --gin_file=gin/resnet50_pod.gin --accelerator=v4-512
  python -m tools.predict --gin_file=gin/resnet50_pod.gin --sweep=accelerator
  python -m tools.predict --gin_file=gin/resnet50_pod.gin --host_input_rate=2533
  python -m tools.predict --compare          # the model against Google's v0.7
  python -m tools.predict --fit              # refit its constants (writes)
  python -m tools.predict --measure --gin_file=gin/resnet50_pod.gin

A prediction splits a step into compute, the optimizer's update, the
step's kernels (a cost that does not grow with the batch), the gradient
sum and the small sums of layers over groups of replicas (batch-norm
statistics, halo exchanges) (and, given a host's input rate, whether the device waits on
it), gives the eval cost, the steps to the target and the time to
train, what bounds it and the knob that would move it, and says which of its
inputs were measured, published or fitted (tools/predictor/model.py). The
FLOPs are XLA's count of the suite's own step, measured once per config
with --measure (tools/predictor/data/program_costs.json; jaxlib from
requirements-predict.txt); predicting reads them.
"""

import sys

from absl import app
from absl import flags

from core import config as gin_config
from core import entry_point
from core import startup

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_multi_string('gin_file', [], 'The experiment\'s gin files.')
  flags.DEFINE_list('gin_search_paths', [], gin_config.SEARCH_PATHS_HELP)
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_string('accelerator', '', 'The slice (gcloud\'s type: v3-32, '
                      'v4-128, v5litepod-16; v100-8 for Google\'s GPU '
                      'server); default: the hardware file\'s ACCELERATOR.')
  flags.DEFINE_enum('sweep', '', ['', 'accelerator'], 'Predict every slice '
                    'size of the generation: the scaling curve.')
  flags.DEFINE_float('efficiency', 0.0, 'Use this fraction of peak instead '
                     'of the fitted constant (tools/predictor/data/ttt_fit.json).')
  flags.DEFINE_float('host_input_rate', 0.0, 'Training examples a second '
                     'one host of the slice prepares (measure it there with '
                     'the suite\'s input benchmarks, benchmarks); the '
                     'prediction then says whether the device waits on it.')
  flags.DEFINE_bool('measure', False, 'Count the config\'s steps with XLA '
                    'and store them (tools/predictor/data/program_costs.json).')
  flags.DEFINE_multi_integer('batch', [], 'With --measure: the per-replica '
                             'batches to count at (default: the config\'s '
                             'on its slice, and twice that).')
  flags.DEFINE_bool('fit', False, 'Remeasure the time a kernel from '
                    'Google\'s ResNet-50 step times and refit the '
                    'efficiency constants on Google\'s largest v0.7 slices '
                    '(writes tools/predictor/data/ttt_fit.json).')
  flags.DEFINE_bool('compare', False, 'Print the model against every Google '
                    'v0.7 result the suite has a config for.')


def _ms(seconds: float) -> str:
  if seconds >= 1:
    return f'{seconds:.3g} s'
  return f'{seconds * 1e3:.3g} ms'


def _time(seconds: float) -> str:
  if seconds < 120:
    return f'{seconds:.3g} s'
  if seconds < 7200:
    return f'{seconds / 60:.3g} min'
  return f'{seconds / 3600:.3g} h'


def knob(p) -> str:
  """What would move the bound."""
  step = p.step
  if p.bound == 'input':
    return ('the device waits {} a step for the hosts: a faster pipeline '
            'on the host (ImageNet\'s cache=\'decoded\', more parallel '
            'calls), or more hosts for the batch (a slice with more hosts a '
            'chip)'.format(
                _ms(p.host_input - p.device_step)))
  if p.bound == 'kernels':
    return ('the step\'s kernels cost {} whatever its batch ({:.0%} of the '
            'step): a larger per-replica batch (fewer, fuller steps: a '
            'smaller slice or a larger global batch)'.format(
                _ms(p.kernels), p.kernels / step))
  if p.gradient_sum > 0.25 * step:
    if p.run.allreduce_bytes == 4:
      return ('the gradient sum is {:.0%} of the step: bfloat16 gradients '
              "(distribution.gradients.GradientOptions.allreduce_dtype = 'bfloat16') "
              'halve its bytes'.format(p.gradient_sum / step))
    return ('the gradient sum is {:.0%} of the step: a larger per-replica '
            'batch (fewer steps, each summing the same bytes) or a slice '
            'with fewer chips'.format(p.gradient_sum / step))
  if p.update > 0.1 * step and not p.run.weight_update_sharding:
    return ('the optimizer update is {:.0%} of the step: '
            'WEIGHT_UPDATE_SHARDING=True spreads it over the replicas'.format(
                p.update / step))
  if p.evals * p.eval > 0.2 * p.time_to_train:
    if p.eval_hosts > 0.5 * p.eval:
      return ('evaluation is {:.0%} of the run, most of it the hosts\' '
              'metric that training does not hide: more processes for it '
              '(METRIC_PROCESSES) or evaluate less often '
              '(EVAL_EVERY_STEPS)'.format(p.evals * p.eval / p.time_to_train))
    return ('evaluation is {:.0%} of the run: evaluate less often '
            '(EVAL_EVERY_STEPS) or beside training'.format(
                p.evals * p.eval / p.time_to_train))
  return ('compute bound: a larger slice at the same global batch (until '
          'the sum dominates: --sweep=accelerator), or a larger global batch '
          'if convergence allows')


def _group_sums(p) -> str:
  """What the step's group sums are, for describe()."""
  parts = []
  if p.bn_group > 1:
    parts.append(f'batch-norm statistics over groups of {p.bn_group} '
                 'replicas')
  if p.run.spatial_partitions > 1:
    parts.append(f'halos within {p.run.spatial_partitions} spatial '
                 'partitions')
  return ' and '.join(parts) + ': the links\' latency'


def describe(p, *, config: str, sources, warning: str, fitted_on: str,
             kernels_from: str = '') -> str:
  from tools.predictor import collectives  # pylint: disable=import-outside-toplevel
  m, r = p.machine, p.run
  shape = collectives.describe(m.chip, m.chips)
  device = p.device_step
  if p.kernels:
    kernels = f' + kernels {_ms(p.kernels)}'
    kernel_input = (f'; the time a kernel ({kernels_from}: Google\'s '
                    'ResNet-50 step times)')
  else:
    kernels = ''
    kernel_input = ''
  if p.host_input:
    hidden = ('hidden behind the device\'s step' if p.host_input <= device
              else f'the device waits {_ms(p.host_input - device)} a step')
    host = (f'  host input     {_ms(p.host_input)} a step for a host\'s '
            f'{r.global_batch / m.hosts:,.0f} examples at '
            f'{r.global_batch / m.hosts / p.host_input:,.0f} a second: '
            f'{hidden}')
  else:
    host = ('  host input     not modelled: give --host_input_rate (examples '
            'a second one host prepares, measured on a host of the slice)')
  lines = [
      f'{config} on {m.accelerator}: {m.chips:,} chips, {m.replicas:,} '
      f'replicas, {m.hosts:,} hosts, a {shape}',
      f'  global batch   {r.global_batch:,}: {p.per_replica_batch:g} a '
      f'replica' + (f', {r.model_ways}-way model partitions' if
                    r.model_ways > 1 else ''),
      f'  step           {_ms(p.step)}: compute {_ms(p.compute)} + update '
      f'{_ms(p.update)}{kernels} + gradient sum {_ms(p.gradient_sum)} '
      f'({r.allreduce_bytes * 8}-bit gradients on a {shape}; after the '
      'backward pass, not hidden)' + (
          f' + group sums {_ms(p.group_sums)} ({_group_sums(p)})'
          if p.group_sums else ''),
      host,
      f'  eval           {_time(p.eval)} each ({r.eval_samples:,} samples in '
      f'{p.eval_steps} steps of {_ms(p.eval_step)}'
      + (f', and {_time(p.eval_hosts)} on the hosts that training does '
         'not hide (fitted)' if p.eval_hosts else '') +
      f'), {p.evals} evals: {_time(p.evals * p.eval)}',
      f'  steps          {p.steps:,.0f} to the target ({p.samples / 1e6:.3g}M '
      f'samples: {"; ".join(sources)})',
      f'  time to train  {_time(p.time_to_train)}',
      f'  bound          {p.bound}; {knob(p)}',
      f'  inputs         fitted: efficiency {p.efficiency:.3f} of peak '
      f'({fitted_on}); measured: FLOPs and kernels (XLA\'s count of this '
      f'config\'s step){kernel_input}, samples to target (published runs); '
      'published: peak FLOP/s, all-reduce bandwidth, torus shape '
      '(tools/predictor/hardware.py), a link\'s latency (1 us, TPU-v3\'s; '
      'tools/predictor/collectives.py)',
      '  not modelled   ' + ('' if p.kernels else
                             'a step\'s cost that does not grow with its '
                             'batch (no time a kernel for this generation: '
                             'Google\'s v0.7 logs give one for v3 and v4), ') +
      'a mesh\'s model-parallel communication, whether the batch '
      'fits in HBM, start-up and compile',
  ]
  if warning:
    lines.append(f'  warning        {warning}')
  return '\n'.join(lines)


def _predict(gin_files, params, accelerator, efficiency):
  from tools.predictor import compare  # pylint: disable=import-outside-toplevel
  from tools.predictor import configs  # pylint: disable=import-outside-toplevel
  from tools.predictor import convergence  # pylint: disable=import-outside-toplevel
  from tools.predictor import costs_file  # pylint: disable=import-outside-toplevel
  from tools.predictor import model  # pylint: disable=import-outside-toplevel
  run, config_accelerator = configs.read(gin_files, params)
  accelerator = accelerator or config_accelerator
  if not accelerator:
    raise ValueError('The config names no slice (its hardware file has no '
                     'ACCELERATOR): pass --accelerator, e.g. v3-32.')
  machine = model.machine(accelerator)
  program = costs_file.lookup(gin_files, params)
  estimate = convergence.samples_to_target(run.benchmark, run.global_batch)
  name = f'{run.benchmark} {machine.chip.name}'
  fitted_batch = None
  eval_overhead = 0.0
  if efficiency:
    fitted_on = '--efficiency'
  else:
    constants = compare.load_fit()
    if name not in constants:
      raise ValueError(compare.no_fit_reason(run.benchmark,
                                             machine.chip.name, constants))
    efficiency = constants[name]['efficiency']
    fitted_on = f'{name}, on {constants[name]["fitted_on"]}'
    fitted_batch = constants[name].get('per_replica_batch')
    eval_overhead = constants[name].get('eval_overhead_seconds', 0.0)
  kernel_seconds = compare.load_kernel_seconds().get(machine.chip.name, 0.0)
  return (machine, run, program, estimate, efficiency, fitted_on,
          fitted_batch, kernel_seconds, eval_overhead)


def batch_warning(per_replica_batch: float, fitted_batch,
                  step_fitted: bool = False) -> str:
  """A per-replica batch far from the fitted row's: the prediction leans
  (docs/benchmarks.md, "Time-to-train model"); `step_fitted`: the
  efficiency came from a logged step (Mask R-CNN's), not a time to train."""
  if not fitted_batch:
    return ''
  ratio = per_replica_batch / fitted_batch
  if 0.5 <= ratio <= 2:
    return ''
  if step_fitted:
    return (f'{per_replica_batch:g} examples a replica against the fitted '
            f'row\'s {fitted_batch:g}: expect this prediction to lean (Mask '
            'R-CNN\'s v0.7 rows at 4-16x the fitted batch were predicted '
            'from 6% too slow to 33% too fast: docs/benchmarks.md)')
  lean = 'too slow' if ratio > 1 else 'too fast'
  return (f'{per_replica_batch:g} examples a replica against the fitted '
          f'row\'s {fitted_batch:g}: expect this prediction {lean} (of '
          'Google\'s v0.7 rows at 2-16x the fitted batch, SSD\'s ran up to '
          '2x faster than predicted, the others\' within 25%: '
          'docs/benchmarks.md)')


def predict_one(gin_files, params, accelerator, efficiency=0.0,
                host_input_rate=0.0) -> str:
  """The prediction of a config on a slice ('': its own), as printed; a
  MiniGo config's generation priced from measured rates."""
  from tools.predictor import configs  # pylint: disable=import-outside-toplevel
  from tools.predictor import minigo  # pylint: disable=import-outside-toplevel
  from tools.predictor import model  # pylint: disable=import-outside-toplevel
  try:
    (machine, run, program, estimate, efficiency, fitted_on,
     fitted_batch, kernel_seconds, eval_overhead) = _predict(
         gin_files, params, accelerator, efficiency)
  except configs.SelfPlayConfig as selfplay:
    accelerator = accelerator or selfplay.macros['ACCELERATOR']
    if not accelerator:
      raise ValueError('The config names no slice (its hardware file has no '
                       'ACCELERATOR): pass --accelerator, e.g. v4-128.'
                       ) from None
    return minigo.describe(' '.join(gin_files), selfplay.macros,
                           accelerator, minigo.load_rates())
  p = model.predict(cost=program, machine_=machine, run=run,
                    efficiency=efficiency, samples=estimate.samples,
                    host_input_rate=host_input_rate,
                    kernel_seconds=kernel_seconds,
                    eval_overhead=eval_overhead)
  warning = '; '.join(w for w in (
      estimate.warning, batch_warning(p.per_replica_batch, fitted_batch,
                                      step_fitted=eval_overhead > 0)) if w)
  return describe(p, config=' '.join(gin_files), sources=estimate.sources,
                  warning=warning, fitted_on=fitted_on,
                  kernels_from=f'{kernel_seconds * 1e6:.2f} us on '
                               f'{machine.chip.name}')


def sweep(gin_files, params, accelerator, efficiency=0.0,
          host_input_rate=0.0) -> str:
  from distribution import tpu_slices  # pylint: disable=import-outside-toplevel
  from tools.predictor import model  # pylint: disable=import-outside-toplevel
  (machine, run, program, estimate, efficiency, fitted_on, _,
   kernel_seconds, eval_overhead) = _predict(gin_files, params, accelerator,
                                             efficiency)
  generation = tpu_slices.parse(machine.accelerator, public=False).generation
  sizes = sorted(set(generation.sizes) | set(generation.internal_sizes))
  lines = [f'{" ".join(gin_files)}: global batch {run.global_batch:,}, '
           f'efficiency {efficiency:.3f} ({fitted_on})',
           f'{"slice":>14s} {"chips":>6s} {"batch/replica":>13s} '
           f'{"step":>9s} {"sum":>6s} {"kernels":>7s} {"time to train":>13s} '
           f'{"speed-up":>8s}']
  previous = None
  for size in sizes:
    target = model.machine(f'{generation.prefix}-{size}')
    try:
      p = model.predict(cost=program, machine_=target, run=run,
                        efficiency=efficiency, samples=estimate.samples,
                        host_input_rate=host_input_rate,
                        kernel_seconds=kernel_seconds,
                        eval_overhead=eval_overhead)
    except ValueError:
      continue  # The batch does not split over this slice.
    gain = (previous / p.time_to_train) if previous else None
    flat = '  <- flattens' if gain is not None and gain < 1.2 else ''
    lines.append(
        f'{target.accelerator:>14s} {target.chips:6,d} '
        f'{p.per_replica_batch:13g} {_ms(p.step):>9s} '
        f'{(p.gradient_sum + p.group_sums) / p.step:6.0%} '
        f'{p.kernels / p.step:7.0%} '
        f'{_time(p.time_to_train):>13s} '
        f'{(f"{gain:.2f}x" if gain else ""):>8s}{flat}')
    previous = p.time_to_train
  lines.append('sum (the gradients\' and the group sums), kernels: their '
               'shares of the step; speed-up: against '
               'the slice above (half the chips); "flattens": less than 1.2x '
               'for twice the chips.')
  if estimate.warning:
    lines.append(f'warning: {estimate.warning}')
  return '\n'.join(lines)


def measure(gin_files, params) -> str:
  from tools.predictor import configs  # pylint: disable=import-outside-toplevel
  from tools.predictor import cost  # pylint: disable=import-outside-toplevel
  from tools.predictor import costs_file  # pylint: disable=import-outside-toplevel
  from tools.predictor import model  # pylint: disable=import-outside-toplevel
  batches = FLAGS.batch
  if not batches:
    run, accelerator = configs.read(gin_files, params)
    machine = model.machine(FLAGS.accelerator or accelerator)
    per_replica = max(1, run.global_batch * run.model_ways //
                      machine.replicas)
    batches = [per_replica, 2 * per_replica]
  if len(set(batches)) < 2:
    raise ValueError('--measure needs two --batch values (a step\'s FLOPs '
                     'are interpolated between them).')
  program = cost.measure(gin_files, params, tuple(sorted(set(batches))),
                         progress=lambda line: print(line, file=sys.stderr,
                                                     flush=True))
  costs_file.store(program)
  train = ', '.join(f'{p.flops / 1e9:,.1f} GFLOP at {p.batch}'
                    for p in program.train)
  return (f'{costs_file.key(gin_files, params)}: train step {train}; '
          f'{program.parameters:,} parameters; stored in '
          'tools/predictor/data/program_costs.json')


def main(argv):
  del argv
  from tools.predictor import compare  # pylint: disable=import-outside-toplevel
  try:
    if FLAGS.fit or FLAGS.compare:
      rows = compare.google_rows()
      if FLAGS.fit:
        compare.write_fit(compare.fit(rows))
        print('wrote tools/predictor/data/ttt_fit.json')
      print(compare.markdown(compare.out_of_sample(rows)))
      print()
      print(compare.minigo_line())
      return 0
    if not FLAGS.gin_file:
      raise ValueError('Pass the experiment with --gin_file (e.g. '
                       'gin/bert_pod.gin), or --compare.')
    gin_files = gin_config.resolve_gin_files(FLAGS.gin_file,
                                             FLAGS.gin_search_paths)
    if FLAGS.measure:
      print(measure(gin_files, FLAGS.gin_param))
    elif FLAGS.sweep:
      print(sweep(gin_files, FLAGS.gin_param, FLAGS.accelerator,
                  FLAGS.efficiency, FLAGS.host_input_rate))
    else:
      print(predict_one(gin_files, FLAGS.gin_param, FLAGS.accelerator,
                        FLAGS.efficiency, FLAGS.host_input_rate))
  except (ValueError, RuntimeError, FileNotFoundError) as e:
    print(f'error: {str(e).strip().splitlines()[0]}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)
  startup.import_tensorflow()
  app.run(entry_point.tool_main(main))
