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


@dataclasses.dataclass(frozen=True)
class RunEnd:
  step: int
  status: str  # 'success' or 'aborted' (MLPerf run_stop statuses).
  quality: float | None
  time_to_train: float
  error: bool = False  # An exception ended the run (it follows).


Event = (InitStart | InitEnd | RunStart | LoopStart | LoopEnd | EvalStart |
         EvalEnd | RunEnd)


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
