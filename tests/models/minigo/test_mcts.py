"""models/minigo/mcts.py: the C++ tree's arithmetic, and its search against a
brute-force minimax on a 3x3 board."""

import functools
import math

import numpy as np
import pytest

from models.minigo import go
from models.minigo import mcts


def _uniform(node):
  return np.ones(node.position.pass_move + 1, np.float32)


def test_expansion_backup_and_virtual_loss_follow_the_cpp_tree():
  tree = mcts.Tree(go.Position(3, komi=0.5))
  root = tree.select_leaf()
  assert root is tree.root and not root.is_expanded
  policy = np.arange(10, dtype=np.float32)
  tree.incorporate_results(root, policy, 0.5)
  # The policy renormalised over the legal moves (all 10 here); every
  # child's W starts at the value less the penalty towards Black's loss.
  np.testing.assert_allclose(root.child_P, policy / policy.sum(), rtol=1e-6)
  np.testing.assert_allclose(root.child_W, 0.5 - 0.2)
  assert root.N == 1 and root.W == pytest.approx(0.5)
  # Selection: Q * to_play + U, U = U_scale * sqrt(max(1, N - 1)) * P /
  # (1 + N): with equal Q, the largest prior (the pass, index 9).
  u_scale = 2 * (math.log((1 + 1 + 19652) / 19652) + 1.25)
  scores = root.child_Q() + u_scale * 1 * root.child_P
  leaf = tree.select_leaf()
  assert leaf.move == int(np.argmax(scores)) == 9
  # A virtual loss moves W along the path by the to-play sign of the node
  # below each edge (White to move at the leaf: -1 on its edge), then back.
  before = (root.child_W.copy(), root.W)
  tree.add_virtual_loss(leaf)
  assert root.child_W[9] == pytest.approx(before[0][9] - 1)
  assert root.W == pytest.approx(before[1] + 1)  # Black to move at root.
  assert leaf.virtual_losses == root.virtual_losses == 1
  tree.revert_virtual_loss(leaf)
  np.testing.assert_allclose(root.child_W, before[0])
  # White's view: the penalty moves the children's value towards White's
  # loss (+0.2), clamped to [-1, 1].
  tree.incorporate_results(leaf, _uniform(leaf), 0.9)
  np.testing.assert_allclose(leaf.child_W, 1.0)
  assert root.N == 2 and root.child_N[9] == 1


def test_noise_soft_pick_and_targets():
  tree = mcts.Tree(go.Position(5, komi=0.5))
  tree.incorporate_results(tree.root, _uniform(tree.root), 0.0)
  noise = np.zeros(26)
  noise[3] = 2.0
  tree.inject_noise(noise, 0.25)
  assert tree.root.child_P[3] == pytest.approx(0.75 / 26 + 0.25)
  np.testing.assert_allclose(tree.root.original_P, 1 / 26)
  # Soft pick for the first (25 // 12) // 2 * 2 = 2 moves: N ^ 0.98.
  assert tree.options.cutoff(5) == 2 and tree.options.cutoff(19) == 30
  tree.root.child_N[[1, 2]] = [10, 30]
  pi = tree.search_pi()
  assert pi[2] / pi[1] == pytest.approx(3 ** 0.98, rel=1e-5)
  picks = [tree.pick_move(np.random.default_rng(s)) for s in range(400)]
  assert set(picks) == {1, 2}
  assert np.mean(np.array(picks) == 2) == pytest.approx(
      3 ** 0.98 / (1 + 3 ** 0.98), abs=0.06)
  # Past the cutoff: the most visited, and plain visit counts.
  tree.play_move(2)
  tree.play_move(1)
  assert tree.root.position.n == 2 and not tree._soft_picking()  # pylint: disable=protected-access


def test_target_pruning_keeps_the_best_and_cuts_what_exploration_explains():
  tree = mcts.Tree(go.Position(3, komi=0.5))
  root = tree.root
  tree.incorporate_results(root, _uniform(root), 0.0)
  root.child_N[:] = [100, 20, 1, 0, 0, 0, 0, 0, 0, 0]
  root.child_W[:] = [30, -10, 0, 0, 0, 0, 0, 0, 0, 0]
  tree._root_stats[0][0] = total = 121  # pylint: disable=protected-access
  want = root.child_N.copy()
  u_scale = root.U_scale()
  best = (root.child_W[0] / 101
          + u_scale * math.sqrt(1 + total) * root.child_P[0] / 101)
  for i in range(1, 10):
    q = root.child_W[i] / (1 + root.child_N[i])
    need = -(u_scale * root.child_P[i] * math.sqrt(total)) / (q - best)
    want[i] = max(0, min(root.child_N[i], int(need)))
  tree.reshape_final_visits()
  np.testing.assert_array_equal(root.child_N, want)
  assert root.child_N[0] == 100 and 0 < root.child_N[1] < 20


# -- Against brute force -------------------------------------------------


def _game_over(position):
  return position.is_game_over() or position.n >= 2 * position.size ** 2


@functools.lru_cache(maxsize=None)
def _minimax(key):
  position = _POSITIONS[key]
  if _game_over(position):
    return 1 if position.score() > 0 else -1
  values = [_minimax(_key(position.play(int(m))))
            for m in np.flatnonzero(position.legal_moves())]
  return max(values) if position.to_play == go.BLACK else min(values)


_POSITIONS = {}


def _key(position):
  key = (position.board.tobytes(), position.to_play, position.ko,
         position.n, position.passes, position.seen)
  _POSITIONS[key] = position
  return key


def _search(position, readouts):
  tree = mcts.Tree(position, mcts.SearchOptions(soft_pick_enabled=False))
  while tree.root.N < readouts:
    leaf = tree.select_leaf()
    if leaf.game_over():
      tree.incorporate_end_game_result(
          leaf, 1 if leaf.position.score() > 0 else -1)
    else:
      tree.incorporate_results(leaf, _uniform(leaf), 0.0)
  return tree


def _decided_positions(count):
  """3x3 positions 10 moves in (8 more at most: the game's length limit is
  2 x 9), where some moves win and some lose. Simple ko: with superko, the
  earlier arrangements make each position's key unique and the brute force
  6 times as long."""
  rng = np.random.default_rng(7)
  found = []
  while len(found) < count:
    position = go.Position(3, komi=0.5, superko=False)
    for _ in range(10):
      legal = np.flatnonzero(position.legal_moves()[:-1])
      if not len(legal):
        break
      position = position.play(int(rng.choice(legal)))
    if position.n != 10 or _game_over(position):
      continue
    moves = np.flatnonzero(position.legal_moves())
    outcome = {int(m): _minimax(_key(position.play(int(m)))) * position.to_play
               for m in moves}
    if 1 in outcome.values() and -1 in outcome.values():
      found.append((position, outcome))
  return found


def test_search_finds_the_winning_moves_brute_force_finds():
  for position, outcome in _decided_positions(4):
    tree = _search(position, 1000)
    move = tree.pick_move(np.random.default_rng(0))
    assert outcome[move] == 1, (str(position), outcome, move,
                                tree.root.child_N.tolist())
    # Each losing move's value (the mover's view) is below the chosen one's.
    q = tree.root.child_Q() * position.to_play
    assert all(q[m] < q[move] for m, won in outcome.items() if won < 0), q


def test_pass_when_settled_reads_the_pass_only_when_only_eyes_are_left():
  # Black to play: in the first, (0, 1) and (0, 2) are no eyes; in the
  # second every empty point is one of Black's (the edge counts as its).
  open_point = go.Position.from_rows(['X..', 'XXX', '.X.'], superko=False)
  settled = go.Position.from_rows(['.XX', 'XXX', 'XX.'], superko=False)
  for position, passes in ((open_point, False), (settled, True)):
    tree = mcts.Tree(position, mcts.SearchOptions(pass_when_settled=True))
    assert tree.root.settled() == passes
    for _ in range(40):
      leaf = tree.select_leaf()
      if leaf.game_over():
        tree.incorporate_end_game_result(leaf, 1.0)
      else:
        uniform = np.full(10, 0.1, np.float32)
        tree.incorporate_results(leaf, uniform, 0.0)
    assert (tree.root.child_N[9] > 0) == passes
  # Google's default reads the pass at once.
  tree = mcts.Tree(open_point, mcts.SearchOptions())
  for _ in range(40):
    leaf = tree.select_leaf()
    tree.incorporate_results(leaf, np.full(10, 0.1, np.float32), 0.0)
  assert tree.root.child_N[9] > 0


def test_settled_by_territory_reads_the_pass_once_the_board_is_divided():
  # A wall each: Black's region (column a) and White's (columns d, e) are
  # bordered by one colour; no empty point is an eye. With a gap in the
  # wall the regions join and touch both colours: not divided.
  rows = ['.XO..'] * 5
  divided = go.Position.from_rows(rows, superko=False)
  gap = go.Position.from_rows(rows[:2] + ['..O..'] + rows[3:], superko=False)
  for to_play in (go.BLACK, go.WHITE):
    for position, passes in ((divided, True), (gap, False)):
      position = go.Position(5, board=position.board, to_play=to_play,
                             superko=False)
      assert mcts.Tree(position).root.settled(by_territory=True) == passes
      # No point is an eye: the old rule reads no pass.
      assert not mcts.Tree(position).root.settled()
  # The same answers over a batch (the forest's form).
  board = np.stack([divided.board, gap.board])
  legal = np.stack([divided.legal_moves(), gap.legal_moves()])
  territory = np.stack([divided.territory(), gap.territory()])
  np.testing.assert_array_equal(
      mcts.settled(board, np.array([1, 1]), legal, 5, territory),
      [True, False])

