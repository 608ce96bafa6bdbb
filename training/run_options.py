"""How a run behaves around its steps (gin: `train.train.options`).

The step budget, batch sizes and intervals are the schedule
(training/controller.RunSchedule); how the work is spread over devices is
the plan (distribution/plan.PlanOptions); the rest of a run's switches are
here, one object instead of keyword arguments of train().
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """Attributes:
    deterministic: reproducible ops (the data side is the input's own flag;
      gin macro DETERMINISTIC).
    eval_steps_per_loop: eval steps per device call (0: all in one call).
    asynchronous_eval: a task's host metric runs in a background thread
      while training goes on (training/evaluator.py; gin macro ASYNC_EVAL):
      the weights of the eval step are kept in a checkpoint until the
      result is known, and the run stops at the loop end where a result
      meeting the target arrives.
    host_metric_timeout_seconds: how long the run waits for a host metric
      before it stops naming the evaluation (0: no limit).
    preemption_grace_seconds: after SIGTERM/SIGINT, the run finishes its
      loop, saves and exits with training.preemption.EXIT_PREEMPTED; if that
      takes longer than this, it exits at once (0: no limit).
    restart: start from step 0 when model_dir holds checkpoints of which
      none restores (they are kept, moved to checkpoints/damaged/). Without
      it such a run stops with an error naming them.
    profile_steps: (first, last): trace the device loops from the first one
      starting at or after step `first` to the one ending at or past `last`,
      for TensorBoard's profile plugin (gin macro PROFILE_STEPS; () for
      none).
    seed: the run's seed (gin macro SEED, which the model and input
      pipeline read too), logged as MLPerf's `seed`.
    stall_warning_seconds: a checkpoint save, restore or upload, or an
      evaluation, that takes longer prints a line naming it, and again
      every as many seconds (training/watchdog.py: a held storage request
      is never silent); 0: off. 60 s: a save of ResNet-50 to GCS takes a
      few seconds, an evaluation on a pod a few more.

  Raises:
    ValueError: `profile_steps` that are not a pair.
  """
  deterministic: bool = False
  eval_steps_per_loop: int = 0
  asynchronous_eval: bool = False
  host_metric_timeout_seconds: float = 3600.0
  preemption_grace_seconds: float = 300.0
  restart: bool = False
  profile_steps: tuple[int, ...] = ()
  seed: int = 0
  stall_warning_seconds: float = 60.0

  def __post_init__(self):
    if self.stall_warning_seconds < 0:
      raise ValueError(f'`stall_warning_seconds` ({self.stall_warning_seconds}'
                       ') must be >= 0 (0: off).')
    if self.profile_steps and len(self.profile_steps) != 2:
      raise ValueError(f'`profile_steps` must be (first, last), got '
                       f'{tuple(self.profile_steps)} (gin macro '
                       'PROFILE_STEPS).')
