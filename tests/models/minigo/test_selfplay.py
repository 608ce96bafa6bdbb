"""models/minigo/selfplay.py: concurrent games with batched evaluation,
symmetries mapped back, playout cap randomisation, resignation, training
examples."""

import numpy as np
import pytest

from models.minigo import go
from models.minigo import features as go_features
from models.minigo import mcts
from models.minigo import selfplay


class Uniform:
  """A network that knows nothing, counting the batches it is given."""

  def __init__(self, value=0.0):
    self.batches, self.value = [], value

  def __call__(self, x):
    self.batches.append(x.shape[0])
    moves = x.shape[1] * x.shape[2] + 1
    return (np.full((x.shape[0], moves), 1 / moves, np.float32),
            np.full(x.shape[0], self.value, np.float32))


def test_each_leafs_policy_comes_back_in_its_own_orientation():
  # A "network" whose policy is plane 0 (the mover's stones) as it sees
  # them: mapped back, it must be the leaf's own plane 0.
  game = selfplay.Game(5, selfplay.SelfplayOptions(), np.random.default_rng(0))
  position = go.Position(5)
  for move in (1, 7, 13, 2, 19):
    position = position.play(move)
  leaf = mcts.Node(position, stats=(np.zeros(1, np.int32),
                                    np.zeros(1, np.float32), 0))
  want = go_features.features(position)[..., 0].ravel()

  def plane0(x):
    flat = x[..., 0].reshape(x.shape[0], -1).astype(np.float32)
    return (np.concatenate([flat, np.zeros((x.shape[0], 1))], 1),
            np.zeros(x.shape[0]))

  seen = set()
  for mix in range(24):  # The game's mix picks the leaf's symmetry.
    game.symmetry_mix = mix * 0x12345
    seen.add(game.symmetry(leaf))
    (policy,), _ = selfplay.evaluate_leaves([(game, leaf)], plane0)
    np.testing.assert_array_equal(policy[:-1], want)
  assert len(seen) >= 6


def test_concurrent_games_batch_their_leaves_and_end_with_examples():
  options = selfplay.SelfplayOptions(
      num_readouts=24, fastplay_readouts=6, fastplay_frequency=0.5,
      virtual_losses=4, dirichlet_alpha=0.03 * 361 / 25,
      disable_resign_pct=1.0)
  network = Uniform()
  games = list(selfplay.play(network, size=5, games=6, concurrent=3,
                             options=options, seed=1))
  assert len(games) == 6
  # Up to 3 games x 4 virtual losses a batch, and batches that full.
  assert max(network.batches) <= 12 and max(network.batches) >= 9
  full = fast = 0
  for game in games:
    assert game.result in (1, -1) and not game.resigned
    position = game.tree.root.position
    assert game.tree.is_game_over()
    assert game.result == (1 if position.score() > 0 else -1)
    assert len(game.moves) == position.n
    full += len(game.examples)
    fast += position.n - len(game.examples)
    for example in game.examples:
      assert example.features.shape == (5, 5, 13)
      assert example.pi.shape == (26,)
      assert example.pi.sum() == pytest.approx(1, abs=1e-5)
      assert example.value == game.result
      # The policy target is over legal moves only: never an occupied
      # point (plane 0 and 1: the stones now).
      stones = example.features[..., 0:2].any(-1).ravel()
      assert (example.pi[:-1][stones] == 0).all()
  # About half the moves are fast ones and not examples.
  assert 0.3 < fast / (full + fast) < 0.7


def test_a_hopeless_position_resigns():
  options = selfplay.SelfplayOptions(
      num_readouts=8, fastplay_frequency=0.0, min_resign_threshold=-0.9,
      max_resign_threshold=-0.8)
  # The network says White wins from everywhere: Black, to move first,
  # resigns at once.
  (game,) = selfplay.play(Uniform(value=-1.0), size=5, games=1,
                          concurrent=1, options=options, seed=0)
  assert game.resigned and game.result == -1 and not game.moves
  assert game.examples == []
