"""models/minigo/uct_player.py: the quickstart's target. Its rollouts keep the
rules (captures, suicide, ko) and its own eyes; its search finds what a
search should, and a few dozen rollouts beat random play."""

import random

import numpy as np

from models.minigo import go
from models.minigo import uct_player


def _board(rows):
  return go.Position.from_rows(rows).board.tolist()


def test_rollout_moves_keep_the_rules_and_the_movers_eyes():
  near = go.neighbours(3)
  # White's stone at (0, 1) has its last liberty at (0, 0): Black takes it.
  board = _board(['.OX', 'OX.', 'X..'])
  assert sorted(uct_player._try(board, 0, go.BLACK, -1, near)) == [1, 3]
  assert board[0] == go.BLACK and board[1] == board[3] == 0
  # Suicide is refused and leaves the board as it was.
  board = _board(['.X.', 'X..', '...'])
  assert uct_player._try(board, 0, go.WHITE, -1, near) is None
  assert board == _board(['.X.', 'X..', '...'])
  # Black does not fill its own eye; White may play there (suicide aside).
  assert uct_player._try(board, 0, go.BLACK, -1, near) is None
  # The ko point is refused.
  assert uct_player._try(_board(['...'] * 3), 4, go.BLACK, 4, near) is None


def test_rollouts_end_with_only_eyes_left_and_score_them():
  rng = random.Random(0)
  for _ in range(50):
    board = [0] * 25
    winner = uct_player.rollout(board, go.BLACK, -1, 5, 0.5, rng)
    near = go.neighbours(5)
    # What is left empty is each a one-point eye of one colour (or a
    # point no one may fill: both sides' moves there are suicide).
    for p in np.flatnonzero(np.asarray(board) == 0):
      colours = {board[n] for n in near[p]}
      assert 0 not in colours
    position = go.Position(5, board=board, komi=0.5)
    assert winner == (go.BLACK if position.score() > 0 else go.WHITE)


def test_the_search_takes_a_group_that_decides_the_game():
  # White's four stones are in atari at (2, 2); taking them wins, leaving
  # them to connect loses (komi 0.5, White's area otherwise larger).
  position = go.Position.from_rows([
      'XXXXX',
      'XOOOX',
      'XO.OX',
      'XXOOX',
      'OOOOO'], komi=0.5, superko=False)
  player = uct_player.UctPlayer(200, seed=1)
  assert player.select_move(position) == 12


def test_a_few_dozen_rollouts_beat_random_play():
  wins = 0
  for game in range(6):
    rng = random.Random(game)
    player = uct_player.UctPlayer(32, seed=game)
    colour = go.BLACK if game % 2 == 0 else go.WHITE
    position = go.Position(5, komi=0.5)
    while not position.is_game_over() and position.n < 50:
      if position.to_play == colour:
        move = player.select_move(position)
      else:
        legal = np.flatnonzero(position.legal_moves()[:-1])
        move = int(rng.choice(list(legal))) if len(legal) else 25
      position = position.play(move)
    wins += int(np.sign(position.score()) == colour)
  assert wins >= 5, wins
