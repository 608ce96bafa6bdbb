"""models/minigo_games.py: the host processes' work: a generation's
self-play examples and the games against the target."""

import numpy as np

from models import minigo
from models import minigo_games
from models import selfplay


def _weights(size):
  net = minigo.DualNet(board_size=size, conv_width=8, fc_width=8,
                       trunk_layers=1, seed=2)
  return {k: v.numpy() for k, v in {**net.params, **net.state}.items()}


def test_selfplay_examples_are_every_full_search_with_its_games_result():
  options = selfplay.SelfplayOptions(
      num_readouts=4, fastplay_frequency=0.0, virtual_losses=2,
      disable_resign_pct=1.0)
  out = minigo_games.selfplay_work((_weights(5), 5, options, 3, 2, 0))
  n = len(out['x'])
  assert out['games'] == 3 and out['resigned'] == 0
  # No fast moves and no resignation: every move is an example.
  assert n == out['moves'] > 0
  assert out['x'].shape == (n, 5, 5, 13) and out['x'].dtype == np.uint8
  assert out['pi'].shape == (n, 26)
  np.testing.assert_allclose(out['pi'].sum(1), 1, rtol=1e-5)
  assert set(np.unique(out['outcome'])) <= {-1.0, 1.0}
  # Black's wins are the games whose examples say +1: each game's first
  # example is an empty board (no stones in planes 0..7).
  starts = np.flatnonzero(out['x'][..., :8].sum((1, 2, 3)) == 0)
  assert len(starts) == 3
  assert int((out['outcome'][starts] > 0).sum()) == out['black_wins']


def test_the_network_takes_both_colours_in_turn_and_wins_are_counted():
  options = minigo_games.MatchOptions(readouts=4, virtual_losses=2,
                                      target_rollouts=2, komi=0.5)
  out = minigo_games.match_work((_weights(5), 5, options, 3, 4, 7))
  assert out['games'] == 4
  # Games 3, 4, 5, 6: the network is White, Black, White, Black.
  assert out['colours'] == [-1, 1, -1, 1]
  assert out['wins'] == sum(int(np.sign(s) == c) for s, c in
                            zip(out['scores'], out['colours']))
  assert out['moves'] > 4
  # The same seed and games: the same match.
  again = minigo_games.match_work((_weights(5), 5, options, 3, 4, 7))
  assert again['scores'] == out['scores']
