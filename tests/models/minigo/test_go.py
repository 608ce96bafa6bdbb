"""models/minigo/go.py and models/minigo/features.py: the rules on known
positions, and move for move against MiniGo's own engine (pettingzoo's copy of
its go.py) over random games."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from models.minigo import go
from models.minigo import features as go_features


def _at(position, row, column):
  return row * position.size + column


def test_a_group_without_liberties_is_captured():
  position = go.Position.from_rows([
      '.XO..',
      'XOX..',
      '.....',
      '.....',
      '.....'])
  # Black at (0, 3) takes the white stone at (0, 2) only; (1, 1), its
  # diagonal neighbour, keeps a liberty.
  after = position.play(_at(position, 0, 3))
  assert str(after).splitlines()[:2] == ['.X.X.', 'XOX..']
  assert after.to_play == go.WHITE and after.n == 1
  # Two stones in a row, taken together.
  chain = go.Position.from_rows([
      'OXX.',
      '.OO.',
      '....',
      '....'], to_play=go.WHITE)
  taken = chain.play(_at(chain, 0, 3))
  assert str(taken).splitlines()[0] == 'O..O'


def test_suicide_is_illegal_unless_it_captures():
  position = go.Position.from_rows([
      '.X...',
      'X....',
      '.....',
      '.....',
      '.....'], to_play=go.WHITE)
  corner = _at(position, 0, 0)
  assert not position.is_legal(corner)
  assert not position.legal_moves()[corner]
  with pytest.raises(go.IllegalMove, match='White at 0 .*is illegal'):
    position.play(corner)
  # Filling its own last liberty with a group is suicide too.
  group = go.Position.from_rows([
      'O.X..',
      'XX...',
      '.....',
      '.....',
      '.....'], to_play=go.WHITE)
  assert not group.is_legal(_at(group, 0, 1))
  # Where the move takes the last liberty of a black group, it captures.
  capture = go.Position.from_rows([
      '.X...',
      'XO...',
      'O....',
      '.....',
      '.....'], to_play=go.WHITE)
  after = capture.play(_at(capture, 0, 0))
  assert str(after).splitlines()[:2] == ['OX...', '.O...']
  # Occupied points and points off the board are illegal; the pass never.
  assert not position.is_legal(_at(position, 0, 1))
  assert not position.is_legal(-1) and not position.is_legal(26)
  assert position.is_legal(position.pass_move)


def test_simple_ko_forbids_the_immediate_retake_only():
  position = go.Position.from_rows([
      '.XO..',
      'XO.O.',
      '.XO..',
      '.....',
      '.....'])
  # Black takes at (1, 2): White's (1, 1) stone goes, (1, 1) is the ko.
  taken = position.play(_at(position, 1, 2))
  assert taken.ko == _at(position, 1, 1)
  assert not taken.is_legal(taken.ko) and not taken.legal_moves()[taken.ko]
  # After a move elsewhere (here a pass, which ends the ko) it may retake.
  later = taken.play(taken.pass_move).play(_at(position, 4, 4))
  assert later.ko == -1 and later.is_legal(_at(position, 1, 1))
  retaken = later.play(_at(position, 1, 1))
  assert retaken.ko == _at(position, 1, 2)
  # Taking two stones is never a ko.
  two = go.Position.from_rows([
      '.XXO.',
      'XOO.O',
      '.XXO.',
      '.....',
      '.....'])
  assert two.play(_at(two, 1, 3)).ko == -1


@pytest.mark.parametrize('superko', [True, False])
def test_positional_superko_forbids_any_earlier_arrangement(superko):
  # The ko above, taken by Black; then both pass (the pass ends simple ko):
  # White's retake would recreate the board before Black took.
  position = go.Position.from_rows([
      '.XO..',
      'XO.O.',
      '.XO..',
      '.....',
      '.....'], superko=superko)
  retake = _at(position, 1, 1)
  later = position.play(_at(position, 1, 2))
  later = later.play(later.pass_move).play(later.pass_move)
  assert later.ko == -1 and later.to_play == go.WHITE
  # Google's C++ self-play (superko) forbids it; their go.py allows it.
  assert later.is_legal(retake) == (not superko)
  assert later.legal_moves()[retake] == (not superko)
  if superko:
    with pytest.raises(go.IllegalMove):
      later.play(retake)
  else:
    assert str(later.play(retake)) == str(position)
  # Elsewhere the two rules agree.
  simple = go.Position(5, board=later.board, to_play=later.to_play,
                       superko=False).legal_moves()
  assert np.flatnonzero(later.legal_moves() != simple).tolist() == (
      [retake] if superko else [])


def test_area_scoring_with_komi_and_two_passes_end_the_game():
  position = go.Position.from_rows([
      '..XO.',
      '..XO.',
      '..XO.',
      'XXXO.',
      '..XOO'])
  # Black: 7 stones + 8 points of territory; White: 6 stones + 4 points;
  # the board is full but for those regions.
  assert position.area() == (15, 10)
  assert position.score() == 15 - 10 - go.KOMI and position.result() == -1
  alone = go.Position.from_rows(['.X.', 'XX.', '...'], komi=0.5)
  assert alone.area() == (9, 0) and alone.result() == 1
  # A region touching both colours is nobody's (dame).
  dame = go.Position.from_rows(['X.O', 'X.O', 'X.O'], komi=0)
  assert dame.area() == (3, 3) and dame.result() == 0
  assert not position.is_game_over()
  once = position.play(position.pass_move)
  assert not once.is_game_over() and once.passes == 1
  assert once.play(once.pass_move).is_game_over()
  assert once.play(0).passes == 0


def test_features_are_mlperf07s_planes():
  start = go.Position(5)
  moves = [_at(start, 2, 2), _at(start, 2, 3), start.pass_move]
  position = start
  for move in moves:
    position = position.play(move)
  x = go_features.features(position)
  assert x.shape == (5, 5, 13) and x.dtype == np.uint8
  # White to move: "mine" is White. Boards: now, before the pass (the
  # same), before White's move, before Black's (empty).
  assert x[2, 3, 0] == 1 and x[2, 2, 1] == 1 and x.sum(axis=(0, 1))[0] == 1
  np.testing.assert_array_equal(x[..., 2:4], x[..., 0:2])
  assert x[..., 4].sum() == 0 and x[2, 2, 5] == 1 and x[..., 5].sum() == 1
  assert x[..., 6:8].sum() == 0
  assert x[..., 8].sum() == 0  # White to move.
  assert go_features.features(start)[..., 8].all()
  # Liberties: each lone stone has 3 (the other stone takes one).
  assert x[2, 2, 11] == x[2, 3, 11] == 1 and x[..., 9:11].sum() == 0
  # Would capture: the last liberty of an opponent group in atari.
  atari = go.Position.from_rows([
      'XO...',
      '.....',
      '.....',
      '.....',
      '.....'], to_play=go.WHITE)
  y = go_features.features(atari)
  assert y[1, 0, 12] == 1 and y[..., 12].sum() == 1
  assert y[0, 0, 9] == 1 and y[0, 1, 10] == 1


@pytest.mark.parametrize('symmetry', sorted(go_features.SYMMETRIES))
def test_every_symmetry_moves_features_and_policy_alike(symmetry):
  rng = np.random.default_rng(3)
  position = go.Position(7)
  for _ in range(30):
    legal = np.flatnonzero(position.legal_moves()[:-1])
    position = position.play(int(rng.choice(legal)))

  def mapped(board):
    return go_features.apply_to_features(
        symmetry, board.reshape(7, 7)).ravel()

  moved = go.Position(7, board=mapped(position.board),
                      to_play=position.to_play,
                      history=tuple(mapped(b) for b in position.history))
  x = go_features.features(position)
  np.testing.assert_array_equal(go_features.features(moved),
                                go_features.apply_to_features(symmetry, x))
  # A policy moves as the point it names.
  point = 10
  pi = np.zeros(50)
  pi[point], pi[-1] = 1, 0.5
  plane = np.zeros((7, 7, 1))
  plane.reshape(-1)[point] = 1
  moved_pi = go_features.apply_to_policy(symmetry, pi)
  np.testing.assert_array_equal(
      moved_pi[:-1], go_features.apply_to_features(symmetry, plane).ravel())
  assert moved_pi[-1] == 0.5
  inverse = go_features.INVERSES[symmetry]
  np.testing.assert_array_equal(
      go_features.apply_to_policy(inverse, moved_pi), pi)
  np.testing.assert_array_equal(go_features.apply_to_features(
      inverse, go_features.apply_to_features(symmetry, x)), x)


# MiniGo's engine reads the board size from the environment at import, so
# it plays in its own process: random legal games, every position's legal
# moves, and the final score.
_MINIGO_GAMES = r'''
import json, random, sys
from pettingzoo.classic.go import go_base, coords
size, games, seed = 7, int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
out = []
for _ in range(games):
  position, moves, legal = go_base.Position(komi=7.5), [], []
  while not position.is_game_over() and position.n < 2 * size * size:
    mask = position.all_legal_moves()
    legal.append([int(i) for i in mask.nonzero()[0]])
    choices = [i for i in legal[-1] if i < size * size] or [size * size]
    # Pass now and then, so games end by two passes as well as by length.
    move = size * size if rng.random() < 0.03 else rng.choice(choices)
    moves.append(move)
    position = position.play_move(coords.from_flat(move))
  out.append({'moves': moves, 'legal': legal, 'score': position.score(),
              'board': [int(v) for v in position.board.ravel()]})
print(json.dumps(out))
'''


def test_random_games_follow_minigos_own_engine():
  pytest.importorskip('pettingzoo')
  done = subprocess.run(
      [sys.executable, '-c', _MINIGO_GAMES, '12', '5'], capture_output=True,
      text=True, check=True, env=dict(os.environ, BOARD_SIZE='7'))
  games = json.loads(done.stdout)
  captures = 0
  for game in games:
    position = go.Position(7, superko=False)  # Their go.py's simple ko.
    for move, legal in zip(game['moves'], game['legal']):
      assert np.flatnonzero(position.legal_moves()).tolist() == legal
      before = np.count_nonzero(position.board)
      position = position.play(move)
      captures += before + (move < 49) - np.count_nonzero(position.board)
    assert position.board.tolist() == game['board']
    assert position.score() == game['score']
  # The games exercised captures and both endings.
  assert captures > 20
  assert any(len(g['moves']) == 98 for g in games)
  assert any(len(g['moves']) < 98 for g in games)


def test_the_legal_mask_is_each_moves_own_check_under_superko():
  """legal_moves' shortcuts (groups computed once a position; no hashing
  of moves that leave more stones than any earlier arrangement had) give
  exactly is_legal's move-by-move answer, over random 4x4 games long
  enough for captures and repeats."""
  rng = np.random.default_rng(7)
  repeats_refused = 0
  for _ in range(4):
    position = go.Position(4, komi=0.5)
    while position.n < 150:
      mask = position.legal_moves()
      every = np.array([position.is_legal(m) for m in range(17)])
      np.testing.assert_array_equal(mask, every)
      simple = np.array([
          position.board[m] == 0 and m != position.ko and
          not position.is_suicide(m) for m in range(16)] + [True])
      repeats_refused += int((simple & ~mask).sum())
      moves = np.flatnonzero(mask[:-1])
      position = position.play(int(rng.choice(moves)) if len(moves)
                               else 16)
      position.passes = 0  # Played on past two passes: more repeats.
  assert repeats_refused > 0  # Superko did refuse moves in these games.


def _canonical(position):
  _, groups = position.groups()
  return sorted((c, tuple(sorted(stones)), tuple(sorted(liberties)))
                for c, stones, liberties in groups.values())


def test_play_derives_the_groups_a_fresh_count_would_find():
  """play's groups (merged, reduced, freed by captures, from the parent's)
  are those of the same board counted afresh, move after move, and the
  parent's are untouched."""
  rng = np.random.default_rng(3)
  for _ in range(4):
    position = go.Position(5, komi=0.5)
    while position.n < 120:
      before = _canonical(position)
      moves = np.flatnonzero(position.legal_moves()[:-1])
      move = int(rng.choice(moves)) if len(moves) else 25
      child = position.play(move)
      fresh = go.Position(5, board=child.board, to_play=child.to_play)
      assert _canonical(child) == _canonical(fresh), (move, str(child))
      np.testing.assert_array_equal(child.liberties(), fresh.liberties())
      assert _canonical(position) == before  # Shared, never changed.
      position = child
      position.passes = 0
