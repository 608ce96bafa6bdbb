"""What the Controller tells its actions, and what an action may answer.

An action is a plain callable `(event) -> Decision | None` (Orbit's
train_actions / eval_actions, widened to the whole run). It looks at the
events it cares about and ignores the rest. Only a Decision changes the run:
the target test answers one; raising an exception aborts the run.
"""

import dataclasses
from typing import Callable, Iterable


@dataclasses.dataclass(frozen=True)
class InitStart:
  """Before anything is built (MLPerf init_start)."""


@dataclasses.dataclass(frozen=True)
class InitEnd:
  """Model built, checkpoint restored, loops compiled (MLPerf init_stop).

  resumed_from is the checkpoint restored (None: a run from step 0).
  """
  step: int
  resumed_from: str | None = None


@dataclasses.dataclass(frozen=True)
class RunStart:
  step: int


@dataclasses.dataclass(frozen=True)
class LoopStart:
  """A device loop is about to start; the next evaluation is at next_eval_step."""
  step: int
  next_eval_step: int


@dataclasses.dataclass(frozen=True)
class LoopEnd:
  step: int
  total_steps: int
  loss: float
  learning_rate: float
  examples_per_second: float


@dataclasses.dataclass(frozen=True)
class GenerationStart:
  """Training of model `generation` begins at `step` (a task whose data
  its own model makes: training.task.Generations), on examples that
  include those made by model `generation - 1`; `produced` is what
  making them reported (MLPerf keys to average over the run)."""
  step: int
  generation: int
  produced: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class GenerationEnd:
  """Model `generation` is trained and saved (its checkpoint at `step`)."""
  step: int
  generation: int


@dataclasses.dataclass(frozen=True)
class EvalStart:
  step: int


@dataclasses.dataclass(frozen=True)
class EvalEnd:
  """The result of the evaluation of the weights of `step`.

  Synchronous, it comes at that step. Asynchronous (training went on while
  the host computed the metric), it comes at the loop end `known_at_step`,
  and `checkpoint` holds the weights of `step` (the model now has later
  ones).
  """
  step: int
  quality: float
  metrics: dict  # The eval sums and the host metric's values.
  checkpoint: str | None = None
  known_at_step: int | None = None
  # For a quality judged after the clock on saved weights (MiniGo's games
  # against the target, as the rules allow): the time.time() at which the
  # weights of `step` were saved; the run counts as ended then if they
  # reach the target. None: the quality counts when it is known.
  as_of: float | None = None


@dataclasses.dataclass(frozen=True)
class RunEnd:
  step: int
  status: str  # 'success' or 'aborted' (MLPerf run_stop statuses).
  quality: float | None
  time_to_train: float
  error: bool = False  # An exception ended the run (it follows).
  # The time.time() the run counts as ended at (EvalEnd.as_of of the
  # evaluation that reached the target); None: now.
  as_of: float | None = None


Event = (InitStart | InitEnd | RunStart | LoopStart | LoopEnd |
         GenerationStart | GenerationEnd | EvalStart | EvalEnd | RunEnd)


@dataclasses.dataclass(frozen=True)
class Decision:
  """An action's answer: the run's status, whether to stop now, and whether
  the stop is a preemption (saved; the launcher should resume)."""
  status: str | None = None
  stop: bool = False
  preempted: bool = False


Action = Callable[[Event], Decision | None]


def notify(actions: Iterable[Action], event: Event) -> list[Decision]:
  """Calls every action with `event`, in order; returns their decisions."""
  decisions = []
  for action in actions:
    decision = action(event)
    if decision is not None:
      decisions.append(decision)
  return decisions
