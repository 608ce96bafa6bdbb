"""models/minigo/boards.py: the batched rules move for move against
go.Position (legal moves, features, boards, ko, hashes, scores) and against
an engine no one here wrote, OpenSpiel's C++ Go (legal moves, captures, the
end, the winner), over random games on 7x7, 9x9 and 19x19."""

import numpy as np
import pyspiel
import pytest

from models.minigo import boards as boards_lib
from models.minigo import features as go_features
from models.minigo import go


def random_moves(legal: np.ndarray, rng, pass_rate: float) -> np.ndarray:
  """A uniformly random legal point a game (the pass when none, or at
  `pass_rate`)."""
  moves = []
  for row in legal:
    points = np.flatnonzero(row[:-1])
    moves.append(int(rng.choice(points)) if len(points) and
                 rng.uniform() >= pass_rate else len(row) - 1)
  return np.array(moves)


@pytest.mark.parametrize('size,games,superko', [(7, 12, True), (9, 6, True),
                                                (9, 6, False)])
def test_random_games_equal_go_position_move_for_move(size, games, superko):
  rng = np.random.default_rng(size + superko)
  positions = [go.Position(size, superko=superko) for _ in range(games)]
  boards = boards_lib.Boards.empty(size, games, superko=superko)
  seen_ko = seen_capture = 0
  while not boards.game_over().all():
    legal = boards.legal()
    features = boards.features()
    liberties = boards.point_liberties()
    for g, p in enumerate(positions):
      if p.is_game_over():
        continue
      np.testing.assert_array_equal(legal[g], p.legal_moves())
      np.testing.assert_array_equal(features[g], go_features.features(p))
      np.testing.assert_array_equal(liberties[g], p.liberties())
    moves = random_moves(legal, rng, pass_rate=0.02)
    moves[boards.game_over()] = size * size
    stones = np.count_nonzero(boards.board, 1)
    boards = boards.play(moves)
    positions = [p.play(int(m)) for p, m in zip(positions, moves)]
    seen_ko += int((boards.ko >= 0).sum())
    seen_capture += int((np.count_nonzero(boards.board, 1) < stones).sum())
    for g, p in enumerate(positions):
      np.testing.assert_array_equal(boards.board[g], p.board)
      assert (boards.ko[g], int(boards.hash[g]), boards.passes[g],
              boards.to_play[g]) == (p.ko, p.hash, p.passes, p.to_play)
  np.testing.assert_array_equal(boards.score(),
                                [p.score() for p in positions])
  assert seen_ko and seen_capture  # The games reached both rules.


def from_openspiel(size: int) -> np.ndarray:
  """Our point of each OpenSpiel action (their row 0 is the bottom row,
  ours the top), the pass to the pass."""
  actions = np.arange(size * size)
  return np.append((size - 1 - actions // size) * size + actions % size,
                   size * size)


@pytest.mark.parametrize('size,games', [(7, 8), (9, 4), (19, 1)])
def test_random_games_equal_openspiels_go(size, games):
  # OpenSpiel's Go has simple ko (no superko): compared with superko off.
  # With positional superko on, the rules differ only where a move would
  # recreate an earlier arrangement (tested below).
  longest = 10 * size * size  # OpenSpiel ends a game there; we stop too.
  game = pyspiel.load_game('go', {'board_size': size, 'komi': 7.5,
                                  'max_game_length': longest})
  ours_of = from_openspiel(size)
  states = [game.new_initial_state() for _ in range(games)]
  boards = boards_lib.Boards.empty(size, games, superko=False)
  rng = np.random.default_rng(size)
  captures = 0
  ended = lambda: boards.game_over() | (boards.n >= longest)
  while not ended().all():
    legal = boards.legal()
    for g, state in enumerate(states):
      if state.is_terminal():
        continue
      theirs = np.zeros(size * size + 1, bool)
      theirs[ours_of[state.legal_actions()]] = True
      np.testing.assert_array_equal(legal[g], theirs)
    moves = random_moves(legal, rng, pass_rate=0.01)
    moves[ended()] = size * size
    before = np.count_nonzero(boards.board, 1)
    boards = boards.play(moves)
    captures += int((np.count_nonzero(boards.board, 1) < before).sum())
    action_of = np.argsort(ours_of)
    for g, state in enumerate(states):
      if state.is_terminal():
        continue
      state.apply_action(int(action_of[moves[g]]))
      planes = np.array(state.observation_tensor(0)).reshape(4, -1)
      board = np.zeros(size * size, np.int8)
      board[ours_of[:-1]] = planes[0] - planes[1]  # Black, White planes.
      np.testing.assert_array_equal(boards.board[g], board)
      assert state.is_terminal() == bool(ended()[g])
  assert all(s.is_terminal() for s in states)
  np.testing.assert_array_equal(np.sign(boards.score()),
                                [s.returns()[0] for s in states])
  assert captures


def test_superko_refuses_repeats_that_simple_ko_and_openspiel_allow():
  # Random 4x4 games with superko on until a move simple ko would allow
  # recreates an earlier arrangement; go.Position refuses it too, and
  # OpenSpiel (simple ko) allows it: the one place the rules differ.
  import dataclasses  # pylint: disable=import-outside-toplevel
  size, games = 4, 32
  rng = np.random.default_rng(0)
  boards = boards_lib.Boards.empty(size, games)
  played = []
  for _ in range(200):
    legal = boards.legal()
    simple = dataclasses.replace(boards, superko=False).legal()
    found = np.argwhere(simple & ~legal)
    if len(found):
      break
    moves = random_moves(legal, rng, pass_rate=0.05)
    moves[boards.game_over()] = size * size
    played.append(moves)
    boards = boards.play(moves)
  assert len(found), 'no superko repeat in 200 moves of 32 games'
  g, move = found[0]
  position, simple_ko = go.Position(size), go.Position(size, superko=False)
  state = pyspiel.load_game('go', {'board_size': size, 'komi': 7.5,
                                   'max_game_length': 1000}
                            ).new_initial_state()
  action_of = np.argsort(from_openspiel(size))
  for moves in played:
    position = position.play(int(moves[g]))
    simple_ko = simple_ko.play(int(moves[g]))
    state.apply_action(int(action_of[moves[g]]))
  assert move != position.ko  # Not the ko point: an older arrangement.
  assert not position.legal_moves()[move] and simple_ko.legal_moves()[move]
  assert int(action_of[move]) in state.legal_actions()


def test_an_illegal_move_names_its_game():
  boards = boards_lib.Boards.empty(5, 3).play([0, 1, 2])
  with pytest.raises(go.IllegalMove, match='game 1: move 1 is illegal'):
    boards.play([3, 1, 4])
