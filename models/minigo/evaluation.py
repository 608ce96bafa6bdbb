"""MiniGo's quality: the win rate of a generation's model in games against
the target, played in host processes (training.task.Evaluation).

MLPerf's rules let MiniGo's target be evaluated after the clock on the
generations' saved models; Google's v0.7 did that (ml_perf/eval_models)
and logged each eval_accuracy, and run_stop, at the time the model was
saved. Here the games run beside training (asynchronous: the run goes on
while they are played, and stops at the first generation that reaches the
target), and each result carries the time its weights were taken
(EvalResult.as_of), so the log and the time to train count as Google's.

Only the chief plays; every worker gets the same results at the same loop
ends (the chief's state and counts, broadcast).
"""

import collections
import concurrent.futures
import dataclasses
import time

from models.common import host_pool
from models.minigo import games as minigo_games
from training import evaluator as evaluator_lib
from training import generations

_RUNNING, _DONE, _FAILED = 0.0, 1.0, 2.0


@dataclasses.dataclass
class _Pending:
  step: int
  as_of: float
  future: concurrent.futures.Future | None  # The chief's games.


class GameEvaluator:
  """Plays `games` games of the current weights against the target."""

  def __init__(self, *, variables, board_size: int, games: int,
               options: minigo_games.MatchOptions, processes: int,
               seed: int, chief: bool, worker_sum, generation_of,
               asynchronous: bool = True):
    """Args:
      variables: the model's variables (trainable and state), by which the
        weights are taken at `start`.
      board_size: the board's side.
      games: games a model plays (MLPerf: 100), half as Black.
      options: the games' settings (models/minigo/games.MatchOptions).
      processes: host processes the games are spread over.
      seed: the games' randomness (with the generation).
      chief: whether this worker plays.
      worker_sum: distribution.strategy.WorkerSum.
      generation_of: step -> the model's generation number.
      asynchronous: training goes on while the games are played.
    """
    self.variables = list(variables)
    self.board_size, self.games, self.options = board_size, games, options
    self.processes, self.seed = processes, seed
    self.chief, self.worker_sum = chief, worker_sum
    self.generation_of = generation_of
    self.asynchronous = asynchronous
    self._pending = collections.deque()
    self._thread = evaluator_lib.HostThread('minigo-eval')
    self._pool = host_pool.HostPool(processes) if chief else None

  def compile(self) -> None:
    pass

  def start(self, step: int) -> None:
    as_of = time.time()
    future = None
    if self.chief:
      weights = generations.weights_by_name(self.variables)
      generation = self.generation_of(step)
      parts = [(self.games * p // self.processes,
                self.games * (p + 1) // self.processes)
               for p in range(self.processes)]
      work = [(weights, self.board_size, self.options, first, end - first,
               self.seed * 1_000_003 + generation)
              for first, end in parts if end > first]
      future = self._thread.submit(self._pool.map, minigo_games.match_work,
                                   work)
      if not self.asynchronous:
        concurrent.futures.wait([future])
    self._pending.append(_Pending(step, as_of, future))

  def results(self, *, wait: bool) -> list:
    out = []
    while self._pending:
      head = self._pending[0]
      state = self._worker_broadcast(self._own_state(head, wait))
      if state == _RUNNING:
        break
      self._pending.popleft()
      if state == _FAILED:
        error = head.future.exception() if head.future else None
        self.cancel()
        raise evaluator_lib.HostMetricError(
            f'The games against the target of the model at step '
            f'{head.step} failed'
            + (f': {type(error).__name__}: {error}' if error else
               ' on the chief (its log names the error).')) from error
      wins = games = moves = black_wins = black_games = 0.0
      if self.chief:
        parts = head.future.result()
        wins = sum(p['wins'] for p in parts)
        games = sum(p['games'] for p in parts)
        moves = sum(p['moves'] for p in parts)
        # The network's wins as Black: its colour and the game's sign.
        black = [(c, s) for p in parts
                 for c, s in zip(p['colours'], p['scores']) if c > 0]
        black_games = len(black)
        black_wins = sum(s > 0 for _, s in black)
      wins, games, moves, black_wins, black_games = (
          self._worker_broadcast(v)
          for v in (wins, games, moves, black_wins, black_games))
      white_games = games - black_games
      metrics = {'win_rate': wins / games, 'wins': wins, 'games': games,
                 'mean_moves': moves / games,
                 'win_rate_as_black': black_wins / max(black_games, 1),
                 'win_rate_as_white': (wins - black_wins)
                                      / max(white_games, 1)}
      out.append(evaluator_lib.EvalResult(head.step, wins / games, metrics,
                                          as_of=head.as_of))
    return out

  def _own_state(self, head: _Pending, wait: bool) -> float:
    if head.future is None:
      return _RUNNING
    if wait:
      concurrent.futures.wait([head.future])
    if not head.future.done():
      return _RUNNING
    return _FAILED if head.future.exception() else _DONE

  def _worker_broadcast(self, value: float) -> float:
    """The chief's value, on every worker."""
    return self.worker_sum(value, first_replica_only=True)

  def cancel(self) -> list[int]:
    steps = [p.step for p in self._pending]
    for pending in self._pending:
      if pending.future:
        pending.future.cancel()
    self._pending.clear()
    return steps
