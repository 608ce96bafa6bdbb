"""models/minigo/referee.py: games OpenSpiel referees, its MCTS as the
opponent, and the suite's network as a side of such a game."""

import numpy as np
import pytest

from models.minigo import games as minigo_games
from models.minigo import model as minigo
from models.minigo import mcts
from models.minigo import refereed_match
from models.minigo import referee
from tests.models.minigo.test_forest import linear_network


def test_points_map_to_openspiels_actions_by_a_row_flip():
  size = 5
  game = referee.load_game(size, 7.5)
  state = game.new_initial_state()
  ours = 0 * size + 1  # Top row, second column: b5.
  state.apply_action(int(referee.to_openspiel(size)[ours]))
  # OpenSpiel draws the board with row 5 on top: its line ' 5 +X+++'.
  assert ' 5 +X+++' in str(state).splitlines()
  np.testing.assert_array_equal(
      referee.from_openspiel(size)[referee.to_openspiel(size)],
      np.arange(size * size + 1))


def _weights(size):
  net = minigo.DualNet(board_size=size, conv_width=8, fc_width=8,
                       trunk_layers=1, seed=2)
  return {k: v.numpy() for k, v in {**net.params, **net.state}.items()}


def test_the_network_plays_a_whole_refereed_game_as_either_colour():
  size = 5
  game = referee.load_game(size, 7.5)
  options = minigo_games.MatchOptions(readouts=4, virtual_losses=2,
                                      komi=7.5)
  for black in (True, False):
    ours = minigo_games.RefereedNetwork.from_weights(_weights(size), size,
                                                     options, seed=1)
    theirs = referee.MctsPlayer(game, 20, seed=1)
    result, moves = referee.play(
        game, *((ours, theirs) if black else (theirs, ours)))
    assert result in (-1.0, 1.0) and moves > 10


def test_a_random_mover_rarely_beats_mcts_200():
  # Seeded: the same games every time. The ladder in docs/minigo.md has
  # 100 games a pairing.
  game = referee.load_game(7, 8.5)
  wins = 0
  for i in range(8):
    mover, mcts = referee.RandomPlayer(i), referee.MctsPlayer(game, 200, i)
    black = i % 2 == 0
    result, _ = referee.play(game, *((mover, mcts) if black
                                     else (mcts, mover)))
    wins += (result > 0) == black
  assert wins <= 1


def test_bad_settings_are_named():
  game = referee.load_game(5, 7.5)
  with pytest.raises(ValueError, match='at least 1 simulation, got 0'):
    referee.MctsPlayer(game, 0, seed=0)
  with pytest.raises(ValueError, match='built for 5x5, the game is 7x7'):
    minigo_games.RefereedNetwork.from_weights(
        _weights(5), 7, minigo_games.MatchOptions(), seed=0)


def test_evaluation_games_against_openspiels_mcts_are_refereed_by_it():
  options = minigo_games.MatchOptions(
      readouts=4, virtual_losses=2, target='openspiel_mcts',
      target_simulations=3, komi=7.5)
  out = minigo_games.match_work((_weights(5), 5, options, 0, 4, 7))
  assert out['games'] == 4 and 0 <= out['wins'] <= 4
  assert out['colours'] == [1, -1, 1, -1]
  assert set(out['scores']) <= {-1.0, 1.0}
  # The network's wins: its colour is the winner's (Black's return's sign).
  assert out['wins'] == sum(c == s for c, s in zip(out['colours'],
                                                   out['scores']))


@pytest.mark.parametrize('size,readouts,games', [(5, 8, 4), (7, 12, 2)])
def test_the_batched_match_plays_the_per_game_players_games(size, readouts,
                                                            games):
  # The same network (a row's answer whatever its batch), no soft pick: all
  # games at once in one forest make the moves each game's own tree makes,
  # and OpenSpiel's seeded MCTS answers them alike.
  net = linear_network(size)
  options = minigo_games.MatchOptions(
      readouts=readouts, virtual_losses=3, target='openspiel_mcts',
      target_simulations=10, komi=7.5,
      search=mcts.SearchOptions(soft_pick_enabled=False))
  out = refereed_match.play(net, size=size, options=options, first=3,
                            games=games, seed=11)
  game = referee.load_game(size, 7.5)
  scores, moves = [], 0
  for index in range(3, 3 + games):
    seed = int(np.random.default_rng([11, index]).integers(2**31))
    ours = minigo_games.RefereedNetwork(net, size, options, seed)
    theirs = referee.MctsPlayer(game, 10, seed)
    result, played = referee.play(
        game, *((ours, theirs) if index % 2 == 0 else (theirs, ours)))
    scores.append(result)
    moves += played
  assert out['scores'] == scores and out['moves'] == moves > 10 * games
  assert out['colours'] == [-1, 1, -1, 1][:games]


@pytest.mark.parametrize('field,value,message', [
    ('target', 'mcts', "target must be one of ('uct', 'openspiel_mcts'), "
     "got 'mcts'"),
    ('target_simulations', 0, 'target_simulations must be at least 1, got 0'),
])
def test_a_bad_target_is_named_by_its_gin_binding(field, value, message):
  with pytest.raises(ValueError, match=r'^models\.minigo\.games\.MatchOptions'
                     r'\.' + message.replace('(', r'\(').replace(')', r'\)')):
    minigo_games.MatchOptions(**{field: value})
