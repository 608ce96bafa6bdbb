"""The time-to-train model: a config on a slice, step by step.

  step      = max(compute + kernels           (not overlapped: the suite sums
                  + gradient sum               after the backward pass; the
                  + group sums,                input pipeline prefetches, so a
                  host input)                  host's input hides behind the
                                               device's step)
  compute   = XLA's FLOPs of one replica's step at its batch
              / (the replica's peak FLOP/s x efficiency)
  kernels   = the kernels the fused step launches x the generation's time a
              kernel: the part of a step that does not grow with its batch
  sum       = the all-reduce of the dense gradients on the slice's torus
              (weight-update sharding: a reduce-scatter and an all-gather,
              the same bytes; the optimizer's update runs on 1/N of each
              weight), its bytes over the bandwidth plus its hops' latency
              (one pack a step)
  group sums = the small collectives the config's layers perform in a
              step, each its hops' latency (collectives.latency_seconds):
              - batch-norm statistics summed over the group of replicas
                that spans the config's model_bn_span images (the span its
                BN_GROUP_SIZE gives on its own slice, kept at every slice; all
                replicas for BN_GROUP_SIZE 0): two a trained batch norm, the [2,
                C] sum forward (models/common/layers.BatchNormSync) and its
                gradient's backward;
              - with images split over P cores (SPATIAL_PARTITIONS), a halo
                exchange within the P before every convolution wider than a
                row, and its gradient's (models/common/spatial.py).
              The counts come from the built model (cost.layer_counts).
  host input = a host's share of the global batch / its input rate (examples
              a second, measured by the user on a host of the slice: the
              suite's input benchmarks; no published number gives it)
  eval      = eval steps x (XLA's FLOPs of one eval step / (peak x
              efficiency) + its kernels x the time a kernel) + the eval's
              time on the hosts that training does not hide (fitted, for
              Mask R-CNN's COCO evaluation beside training; 0 elsewhere)
  time to train = steps to target x step + evals x eval

Inputs, and which are measured, published or fitted:
- FLOPs and kernels: measured, XLA's cost analysis of the suite's own step
  and the kernels its CPU compiler fuses the step into (tools/predictor/cost.py,
  tools/predictor/xla_cost.py; tools/predictor/data/program_costs.json).
- The time a kernel: measured, one per generation, from Google's ResNet-50
  step times at several per-replica batches (their logs' block times: the
  step's intercept at batch 0, less the modelled sums, over
  ResNet-50's kernels; tools/predictor/compare.py kernel_seconds). It stands for
  whatever a TPU pays per kernel (launch, pipeline fill, a small op's
  latency) and is the same for every model of that generation.
- Peak FLOP/s, all-reduce bandwidth, torus shape, a link's latency:
  published
  (tools/predictor/hardware.py, tools/predictor/collectives.py).
- Samples to target: published (tools/predictor/convergence.py).
- Efficiency: the one fitted constant, per benchmark and generation, on
  the largest scale Google ran (tools/predictor/data/ttt_fit.json, `python -m
  tools.predict --fit`). It holds everything the model leaves out: the MXU
  use of the FLOPs, memory-bound ops, the host loop, per-hop latency of the
  sums beyond the public link latency, input stalls, the slower first
  loop. Where the eval runs on the hosts beside training (Mask R-CNN's
  COCO evaluation), the efficiency is fitted on Google's step time instead
  (`fit_step_efficiency`) and the eval's unhidden host time is the second
  constant, from the same folder's time to train.

Model parallelism (a mesh's model axis, spatial partitions) divides a
replica's FLOPs ideally over its partitions; their own communication is
left out.
"""

import dataclasses
import math

from distribution import tpu_slices
from tools.predictor import collectives
from tools.predictor import hardware


@dataclasses.dataclass(frozen=True)
class Machine:
  """A slice (or the V100 server) as the model sees it."""
  accelerator: str
  chip: hardware.Chip
  chips: int
  replicas: int
  hosts: int

  @property
  def replica_peak(self) -> float:
    return self.chip.peak_flops * self.chips / self.replicas


_GPU = 'v100-'


def machine(accelerator: str) -> Machine:
  """'v3-8192', 'v4-128', 'v5litepod-16', 'v100-8'.

  Raises:
    ValueError: one line naming the accelerator and what is known.
  """
  if accelerator.startswith(_GPU):
    try:
      gpus = int(accelerator[len(_GPU):])
    except ValueError:
      gpus = 0
    if gpus not in (1, 2, 4, 8):
      raise ValueError(f'--accelerator={accelerator}: a V100 server has 1, '
                       '2, 4 or 8 GPUs (v100-8 is Google\'s v0.7 system).')
    return Machine(accelerator, hardware.chip('v100'), gpus, gpus, 1)
  tpu = tpu_slices.parse(accelerator, public=False)
  return Machine(accelerator, hardware.chip(tpu.generation.name), tpu.chips,
                 tpu.replicas, tpu.hosts)


@dataclasses.dataclass(frozen=True)
class Run:
  """What a config asks of the machine (from its gin files)."""
  benchmark: str
  global_batch: int
  eval_batch: int
  eval_every_steps: int
  eval_samples: int
  model_ways: int = 1  # A mesh's model axis x spatial partitions.
  allreduce_bytes: int = 4  # 2 for bfloat16 gradients.
  weight_update_sharding: bool = False
  spatial_partitions: int = 1  # Of model_ways: cores an image is split over.
  # Images a batch norm's statistics span (configs.bn_span): 0 each
  # replica's own, math.inf all replicas.
  bn_span: float = 0.0

  def bn_group(self, data_replicas: int, batch: float) -> int:
    """The data-parallel replicas whose batch-norm statistics are summed
    together at `batch` images a replica."""
    if self.bn_span == math.inf:
      return data_replicas
    return max(1, min(data_replicas, round(self.bn_span / batch)))


@dataclasses.dataclass
class Prediction:
  """One config on one machine, in seconds unless named otherwise."""
  machine: Machine
  run: Run
  per_replica_batch: float
  efficiency: float
  compute: float
  update: float
  kernels: float  # The step's kernels x the time a kernel (0: not known).
  gradient_sum: float
  group_sums: float  # Batch-norm statistics and halo exchanges.
  bn_group: int  # Replicas whose batch-norm statistics are summed (1: none).
  host_input: float  # 0 when no host input rate was given.
  step: float
  eval_step: float
  eval_steps: int
  eval: float  # eval_steps x eval_step + eval_hosts.
  eval_hosts: float  # An eval's time on the hosts training does not hide.
  steps: float
  evals: int
  samples: float
  time_to_train: float

  @property
  def device_step(self) -> float:
    """The step without the hosts: what the device spends on it."""
    return (self.compute + self.update + self.kernels + self.gradient_sum +
            self.group_sums)

  @property
  def bound(self) -> str:
    """What dominates the run: input (the hosts set the step's pace),
    else the largest of compute, interconnect and eval."""
    if self.host_input > self.device_step:
      return 'input'  # The hosts set every step's pace.
    parts = {'compute': self.steps * (self.compute + self.update),
             'kernels': self.steps * self.kernels,
             'interconnect': self.steps * (self.gradient_sum +
                                           self.group_sums),
             'eval': self.evals * self.eval}
    return max(parts, key=parts.get)


def predict(*, cost, machine_: Machine, run: Run, efficiency: float,
            samples: float, evals: int | None = None,
            host_input_rate: float = 0.0,
            kernel_seconds: float = 0.0,
            eval_overhead: float = 0.0) -> Prediction:
  """The model's time to train for `run` on `machine_`.

  Args:
    cost: the config's tools.predictor.cost.ProgramCost.
    efficiency: the fitted fraction of peak (tools/predictor/data/ttt_fit.json).
    samples: samples to the target (tools.predictor.convergence).
    evals: evaluations until the target (default: one every
      eval_every_steps, the last at or after the target).
    host_input_rate: training examples a second one host of the slice
      prepares (0: host input not modelled).
    kernel_seconds: the generation's time a kernel (compare.kernel_seconds;
      0: not modelled).
    eval_overhead: seconds an eval spends on the hosts beyond its device
      steps that training does not hide (fitted: compare.fit).
  """
  data_replicas = machine_.replicas // run.model_ways
  if data_replicas < 1 or machine_.replicas % run.model_ways:
    raise ValueError(
        f'{machine_.accelerator} has {machine_.replicas} replicas, which '
        f'{run.model_ways}-way model partitions do not divide.')
  if run.global_batch % data_replicas:
    raise ValueError(
        f'GLOBAL_BATCH_SIZE={run.global_batch} does not split over the '
        f'{data_replicas} data-parallel replicas of {machine_.accelerator}: '
        'pick a multiple of it.')
  batch = run.global_batch / data_replicas
  if batch < 1:
    raise ValueError(f'GLOBAL_BATCH_SIZE={run.global_batch} is less than '
                     f'one example per replica on {machine_.accelerator}.')
  speed = machine_.replica_peak * efficiency
  step_flops = cost.train_flops(batch) / run.model_ways
  # The optimizer's update: what the step costs at batch 0 (the FLOPs that
  # do not grow with the batch).
  update_flops = max(0.0, cost.train_flops(0)) / run.model_ways
  if run.weight_update_sharding:
    update_share = update_flops * (1 - 1 / data_replicas)
    step_flops -= update_share
    update_flops -= update_share
  compute = (step_flops - update_flops) / speed
  update = update_flops / speed
  gradient_bytes = cost.dense_parameters * run.allreduce_bytes / run.model_ways
  gradient_sum = collectives.all_reduce_seconds(
      machine_.chip, machine_.chips, gradient_bytes) + (
          collectives.latency_seconds(machine_.chip, machine_.chips))
  bn_group = run.bn_group(data_replicas, batch) if cost.bn_layers else 1
  group_sums = _group_sums(cost, machine_, run, data_replicas, bn_group)
  host_input = (run.global_batch / machine_.hosts / host_input_rate
                if host_input_rate > 0 else 0.0)
  kernels = cost.train_kernels() * kernel_seconds
  step = max(compute + update + kernels + gradient_sum + group_sums,
             host_input)
  steps = samples / run.global_batch
  eval_steps = math.ceil(run.eval_samples / run.eval_batch)
  eval_batch = run.eval_batch / data_replicas
  eval_step = (cost.eval_flops(eval_batch) / run.model_ways / speed +
               cost.eval_kernels() * kernel_seconds)
  if evals is None:
    evals = math.ceil(steps / run.eval_every_steps)
  eval_time = eval_steps * eval_step + eval_overhead
  total = steps * step + evals * eval_time
  return Prediction(machine=machine_, run=run, per_replica_batch=batch,
                    efficiency=efficiency, compute=compute, update=update,
                    kernels=kernels, gradient_sum=gradient_sum,
                    group_sums=group_sums, bn_group=bn_group,
                    host_input=host_input, step=step,
                    eval_step=eval_step, eval_steps=eval_steps,
                    eval=eval_time, eval_hosts=eval_overhead,
                    steps=steps, evals=evals,
                    samples=samples, time_to_train=total)


def _group_sums(cost, machine_: Machine, run: Run, data_replicas: int,
                group: int) -> float:
  """A step's batch-norm sums over groups of `group` replicas and halo
  exchanges, in seconds (the module docstring's group sums)."""
  chips_a_replica = machine_.chips / data_replicas
  seconds = 0.0
  if group > 1:
    seconds += 2 * cost.bn_layers * collectives.latency_seconds(
        machine_.chip, group * chips_a_replica)
  if run.spatial_partitions > 1:
    seconds += 2 * cost.window_convs * collectives.latency_seconds(
        machine_.chip, chips_a_replica * run.spatial_partitions /
        run.model_ways)
  return seconds


def fit_efficiency(*, cost, machine_: Machine, run: Run, samples: float,
                   evals: int, measured_seconds: float,
                   kernel_seconds: float = 0.0) -> float:
  """The efficiency that makes the model's time to train `measured_seconds`
  (the time is (FLOP time at peak) / efficiency + sums + kernels).

  Raises:
    ValueError: the modelled sums and kernels alone exceed the measured
      time.
  """
  flops_only = predict(cost=cost, machine_=machine_, run=run, efficiency=1.0,
                       samples=samples, evals=evals)
  with_kernels = predict(cost=cost, machine_=machine_, run=run,
                         efficiency=1.0, samples=samples, evals=evals,
                         kernel_seconds=kernel_seconds)
  sums = flops_only.steps * (flops_only.gradient_sum +
                             flops_only.group_sums)
  fixed = sums + with_kernels.time_to_train - flops_only.time_to_train
  flop_time = flops_only.time_to_train - sums
  rest = measured_seconds - fixed
  if rest <= 0:
    raise ValueError(
        f'{run.benchmark} on {machine_.accelerator}: the modelled gradient '
        f'and group sums and kernels ({fixed:.1f} s) exceed the measured '
        f'{measured_seconds:.1f} s.')
  return flop_time / rest


def fit_step_efficiency(*, cost, machine_: Machine, run: Run,
                        step_seconds: float,
                        kernel_seconds: float = 0.0) -> float:
  """The efficiency that makes the model's step `step_seconds` (Google's
  logged step time) on `machine_`.

  Raises:
    ValueError: the modelled sums and kernels alone exceed the step.
  """
  p = predict(cost=cost, machine_=machine_, run=run, efficiency=1.0,
              samples=run.global_batch, evals=0,
              kernel_seconds=kernel_seconds)
  fixed = p.kernels + p.gradient_sum + p.group_sums
  if step_seconds <= fixed:
    raise ValueError(
        f'{run.benchmark} on {machine_.accelerator}: the modelled sums and '
        f'kernels ({fixed * 1e3:.1f} ms) exceed the logged step '
        f'({step_seconds * 1e3:.1f} ms).')
  return (p.compute + p.update) / (step_seconds - fixed)
