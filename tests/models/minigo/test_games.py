"""models/minigo/games.py: the host processes' work: a generation's
self-play examples and the games against the target."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from models.minigo import model as minigo
from models.minigo import data as minigo_data
from models.minigo import games as minigo_games
from models.minigo import task as minigo_task
from models.minigo import selfplay
from training import device_inference


def _weights(size):
  net = minigo.DualNet(board_size=size, conv_width=8, fc_width=8,
                       trunk_layers=1, seed=2)
  return {k: v.numpy() for k, v in {**net.params, **net.state}.items()}


def test_selfplay_examples_are_every_full_search_with_its_games_result():
  options = selfplay.SelfplayOptions(
      num_readouts=4, fastplay_frequency=0.0, virtual_losses=2,
      disable_resign_pct=1.0)
  out = minigo_games.selfplay_work((_weights(5), 5, options, 3, 2, 0,
                                    'forest'))
  # The per-game trees play the same games.
  trees = minigo_games.selfplay_work((_weights(5), 5, options, 3, 2, 0,
                                      'trees'))
  for key in ('x', 'pi', 'outcome', 'games', 'moves', 'black_wins'):
    np.testing.assert_array_equal(out[key], trees[key])
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


def test_selfplay_on_the_devices_plays_the_games_of_the_host_processes(
    tmp_path):
  """The same games whether the leaves are evaluated in NumPy in each
  process or on two replicas of the training process (all processes'
  leaves batched together): the outputs agree to float rounding, so the
  searches agree but for a near tie that rounding may break."""
  strategy = strategies.mirrored(['/cpu:0', '/cpu:1'])
  with strategy.scope():
    net = minigo.DualNet(board_size=5, conv_width=8, fc_width=8,
                         trunk_layers=1, seed=2)
  weights = {k: v.numpy() for k, v in {**net.params, **net.state}.items()}
  options = selfplay.SelfplayOptions(num_readouts=8, fastplay_frequency=0.0,
                                     virtual_losses=2)
  records = {}
  for inference in ('host', 'device'):
    data = minigo_data.MiniGoData(
        board_size=5, games_per_generation=8, processes=2,
        concurrent_games=4, selfplay=options, inference=inference,
        directory=str(tmp_path / inference))
    infer = device_inference.DeviceInference(
        strategy=strategy,
        fn=minigo_task.MiniGoTask(model=None, data=data).serving_fn(net))
    assert data.produce(0, weights, worker=0, workers=1, infer=infer) == {
        'actual_selfplay_games_per_generation': 8}
    records[inference] = [r.numpy() for r in tf.data.TFRecordDataset(
        str(tmp_path / inference / '000000' / 'games-w0.tfrecord.zz'),
        compression_type='ZLIB')]
    if inference == 'device':
      # Every leaf went to the devices; calls took whatever was waiting.
      assert data.served.calls > 0
      assert data.served.rows >= len(records['device'])
    else:
      assert data.served is None
  same = set(records['host']) & set(records['device'])
  assert len(same) >= 0.9 * len(records['host']), (
      len(same), len(records['host']), len(records['device']))


def test_device_selfplay_without_the_runtimes_inference_says_so(tmp_path):
  data = minigo_data.MiniGoData(board_size=5, games_per_generation=2,
                                inference='device',
                                directory=str(tmp_path))
  with pytest.raises(ValueError, match="inference = 'device' needs"):
    data.produce(0, _weights(5), worker=0, workers=1, infer=None)
  with pytest.raises(ValueError, match="inference must be one of"):
    minigo_data.MiniGoData(inference='tpu').check()
