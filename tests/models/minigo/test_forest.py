"""models/minigo/forest.py and batched_selfplay.py: self-play with every
game's tree in one Forest plays the same games as selfplay.py's per-game
trees (models/minigo/mcts.py, Google's C++ arithmetic), move for move and
example for example, from the same seeds and network: tree reuse, fast
moves and cleared trees, root noise, resignation, target pruning,
compaction of a full tree."""

import numpy as np
import pytest

from models.minigo import batched_selfplay
from models.minigo import forest as forest_lib
from models.minigo import mcts
from models.minigo import selfplay


def linear_network(size: int, seed: int = 5):
  """A small network of the features, the same answer for a row whatever
  its batch: a softmax policy and a tanh value of linear maps."""
  rng = np.random.default_rng(seed)
  moves = size * size + 1
  w = rng.normal(size=(13 * size * size, moves)).astype(np.float32) * 0.05
  v = rng.normal(size=(13 * size * size,)).astype(np.float32) * 0.05

  def evaluate(x):
    f = x.reshape(len(x), -1).astype(np.float32)
    logits = f @ w
    p = np.exp(logits - logits.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32), np.tanh(f @ v)
  return evaluate


def assert_same_games(old, new):
  assert len(old) == len(new)
  for a, b in zip(old, new):
    assert (a.moves, a.result, a.resigned) == (b.moves, b.result, b.resigned)
    assert len(a.examples) == len(b.examples)
    for x, y in zip(a.examples, b.examples):
      np.testing.assert_array_equal(x.features, y.features)
      np.testing.assert_array_equal(x.pi, y.pi)
      assert x.value == y.value


@pytest.mark.parametrize('size,readouts,fastplay,settled,capacity,games', [
    (7, 12, 0.0, True, 0, 5),    # The quickstart's: trees kept move to move.
    (7, 12, 0.0, True, 60, 5),   # The same, compacted as they fill.
    (7, 16, 0.5, False, 0, 5),   # Fast moves; full searches clear the tree.
    (9, 12, 0.5, True, 70, 3),   # 9x9, both.
    (5, 12, 0.0, 'territory', 0, 4),  # Passes once the board is divided.
])
def test_batched_selfplay_plays_the_per_game_trees_games(
    size, readouts, fastplay, settled, capacity, games, monkeypatch):
  options = selfplay.SelfplayOptions(
      num_readouts=readouts, fastplay_frequency=fastplay, fastplay_readouts=6,
      virtual_losses=4, dirichlet_alpha=0.2, komi=7.5,
      min_resign_threshold=-1.0, max_resign_threshold=-0.9,
      search=mcts.SearchOptions(
          pass_when_settled=bool(settled),
          settled_by_territory=settled == 'territory'))
  evaluate = linear_network(size)
  kwargs = dict(size=size, games=games, concurrent=3, options=options,
                seed=3)
  old = list(selfplay.play(evaluate, **kwargs))
  calls = []
  for name in ('compact', 'clear_subtrees'):
    method = getattr(forest_lib.Forest, name)
    monkeypatch.setattr(
        forest_lib.Forest, name,
        lambda self, game, name=name, method=method: (
            calls.append(name), method(self, game))[1])
  new = list(batched_selfplay.play(evaluate, capacity=capacity, **kwargs))
  assert_same_games(old, new)
  # What the case is for happened: resignations and compactions of kept
  # trees, or cleared trees.
  if settled == 'territory':  # A game ended by passes before the cap.
    assert any(g.moves[-2:] == [size * size] * 2 and len(g.moves) < 2 * size**2
               for g in new)
  elif fastplay:
    assert 'clear_subtrees' in calls
  else:
    assert 'compact' in calls and any(game.resigned for game in new)


def test_a_tree_too_small_for_its_search_says_so():
  forest = forest_lib.Forest(size=5, games=2, capacity=8)
  with pytest.raises(RuntimeError, match='game 1 keeps 1 live nodes and '
                     'needs 9 more, its capacity is 8: raise the capacity'):
    forest.reserve([0, 1], [4, 9])


@pytest.mark.parametrize('then', ['clear_subtrees', 'compact'])
def test_a_root_not_yet_played_out_keeps_its_position(then):
  # play_move to a move the search never visited makes the new root there
  # and then; clearing or compacting the tree drops its parent, so the
  # position must be worked out first.
  from models.minigo import go  # pylint: disable=import-outside-toplevel
  forest = forest_lib.Forest(size=5, games=2, capacity=16)
  position = go.Position(5)
  for move in (12, 6, 25):  # Two stones, then a pass.
    forest.play_move(1, move)
    position = position.play(move)
  getattr(forest, then)(1)
  root = forest.root[1]
  np.testing.assert_array_equal(forest.boards([root]).board[0],
                                position.board)
  forest.ensure_legal([root])
  np.testing.assert_array_equal(forest.legal[root], position.legal_moves())
  assert (forest.passes[root], forest.n[root]) == (1, 3)
