"""OpenSpiel's Go as a referee and an opponent no one here wrote.

DeepMind's OpenSpiel (`open-spiel` on PyPI, C++ under `pyspiel`) decides a
refereed game's legal moves, its end and its winner, and plays the
opponent: its MCTSBot, each of `simulations` simulations ending in one
uniformly random rollout (RandomRolloutEvaluator), UCT constant 2, the
most visited move played. Its rules against ours
(tests/models/minigo/test_boards.py): the same captures, suicide, area
scoring and end (two passes), simple ko without superko (so our players
search with superko off in a refereed game), and a game cut at its
`max_game_length`, 2 size^2 moves by default: where our search trees end a
game too (mcts.Node.game_over).

Points: OpenSpiel's action a is row a // size counted from the bottom
(a1 is 0), ours from the top; the pass is size * size in both.
"""

from typing import Protocol

import numpy as np

from models.minigo import go


def pyspiel():
  """The pyspiel module (an ImportError names requirements-minigo.txt:
  core/extras.py)."""
  import pyspiel as module  # pylint: disable=import-outside-toplevel
  return module


def load_game(size: int, komi: float):
  return pyspiel().load_game('go', {'board_size': size, 'komi': komi})


def to_openspiel(size: int) -> np.ndarray:
  """[size * size + 1]: OpenSpiel's action of each of our points, the pass
  last."""
  points = np.arange(size * size)
  return np.append((size - 1 - points // size) * size + points % size,
                   size * size)


def from_openspiel(size: int) -> np.ndarray:
  """The inverse: our point of each OpenSpiel action (the map is its own
  inverse: a row flip)."""
  return to_openspiel(size)


class Player(Protocol):
  """A side of a refereed game: `select(state)` an OpenSpiel action for
  the side to move; `played(action)` is told every action, both sides'."""

  def select(self, state) -> int: ...

  def played(self, action: int) -> None: ...


class MctsPlayer:
  """OpenSpiel's MCTSBot of `simulations` random-rollout simulations."""

  def __init__(self, game, simulations: int, seed: int):
    if simulations < 1:
      raise ValueError(f'OpenSpiel MCTS needs at least 1 simulation, got '
                       f'{simulations}.')
    module = pyspiel()
    self.bot = module.MCTSBot(
        game, module.RandomRolloutEvaluator(1, seed), 2.0, simulations,
        1000, False, seed, False)

  def select(self, state) -> int:
    return int(self.bot.step(state))

  def played(self, action: int) -> None:
    del action


class RandomPlayer:
  """A uniformly random legal action (the pass among them)."""

  def __init__(self, seed: int):
    self.rng = np.random.default_rng(seed)

  def select(self, state) -> int:
    return int(self.rng.choice(state.legal_actions()))

  def played(self, action: int) -> None:
    del action


def play(game, black: Player, white: Player) -> tuple[float, int]:
  """One game refereed by OpenSpiel; returns (Black's return: +1 a win, -1
  a loss; moves played)."""
  state = game.new_initial_state()
  while not state.is_terminal():
    player = black if state.current_player() == 0 else white
    action = player.select(state)
    if action not in state.legal_actions():
      raise go.IllegalMove(f'{type(player).__name__} chose action {action}, '
                           f'which OpenSpiel refuses:\n{state}')
    state.apply_action(action)
    black.played(action)
    white.played(action)
  return state.returns()[0], state.move_number()
