"""MiniGo's games, as work for host processes: a generation's self-play
and the evaluation games against the target.

No TensorFlow here (models/common/host_pool.py spawns these): the network is
models/minigo/numpy_model.py's, from the weights the training process hands
over, or (self-play with inference on the devices) the training process's
own, served by models/minigo/host_inference.py. Each work function takes one
picklable tuple and returns plain arrays and numbers.
"""

import dataclasses

import numpy as np

from models.minigo import batched_selfplay
from models.minigo import go
from models.minigo import features as go_features
from models.minigo import host_inference
from models.minigo import mcts
from models.minigo import numpy_model as minigo_numpy
from models.minigo import referee
from models.minigo import refereed_match
from models.minigo import selfplay
from models.minigo import uct_player


# How a host process searches its games (models.minigo.data.MiniGoData
# .engine): the same games either way.
SELFPLAY_ENGINES = {'forest': batched_selfplay, 'trees': selfplay}


def selfplay_work(work) -> dict:
  """Plays `games` self-play games with `weights`; returns their examples
  ('x' [n, size, size, 13] uint8, 'pi' [n, size * size + 1] float32,
  'outcome' [n] float32) and counts ('games', 'moves', 'resigned',
  'black_wins').

  work: (network: the weights by name, or a
    models.minigo.host_inference.Endpoint serving the network, size,
    options: selfplay.SelfplayOptions, games, concurrent games, seed,
    engine: a SELFPLAY_ENGINES key).
  """
  network, size, options, games, concurrent, seed, engine = work
  net, close = _network(network)
  xs, pis, outcomes = [], [], []
  counts = dict(games=0, moves=0, resigned=0, black_wins=0)
  try:
    for game in SELFPLAY_ENGINES[engine].play(
        net, size=size, games=games, concurrent=concurrent, options=options,
        seed=seed):
      counts['games'] += 1
      counts['moves'] += len(game.moves)
      counts['resigned'] += int(game.resigned)
      counts['black_wins'] += int(game.result > 0)
      for example in game.examples:
        xs.append(example.features)
        pis.append(example.pi)
        outcomes.append(example.value)
  finally:
    close()
  moves = size * size + 1
  return dict(
      x=np.asarray(xs, np.uint8).reshape(-1, size, size,
                                         go_features.PLANES),
      pi=np.asarray(pis, np.float32).reshape(-1, moves),
      outcome=np.asarray(outcomes, np.float32), **counts)


def _network(network):
  """(evaluate, close) for `network`: the weights, evaluated here in NumPy,
  or a server's endpoint (the training process evaluates)."""
  if isinstance(network, host_inference.Endpoint):
    client = host_inference.Client(network)
    return client, client.close
  return minigo_numpy.NumpyDualNet(network), lambda: None


TARGETS = ('uct', 'openspiel_mcts')


@dataclasses.dataclass(frozen=True)
class MatchOptions:
  """The evaluation games: the network searching `readouts` a move
  (Google's eval.flags: 100 on 19x19, no fast moves, no resignation,
  value-init penalty 0.2) against the target; the network plays Black in
  the even-numbered games.

  The target: 'uct' (models/minigo/uct_player.py's UCT with
  `target_rollouts` a move, on the suite's rules) or 'openspiel_mcts'
  (OpenSpiel's MCTS of `target_simulations` random-rollout simulations,
  OpenSpiel deciding the rules: models/minigo/referee.py)."""
  readouts: int = 100
  virtual_losses: int = 4
  target: str = 'uct'
  target_rollouts: int = 64
  target_simulations: int = 200
  komi: float = go.KOMI
  superko: bool = True
  search: mcts.SearchOptions = mcts.SearchOptions()

  def __post_init__(self):
    name = 'models.minigo.games.MatchOptions'
    if self.target not in TARGETS:
      raise ValueError(f'{name}.target must be one of {TARGETS}, got '
                       f'{self.target!r}.')
    for field in ('readouts', 'virtual_losses', 'target_rollouts',
                  'target_simulations'):
      if getattr(self, field) < 1:
        raise ValueError(f'{name}.{field} must be at least 1, got '
                         f'{getattr(self, field)}.')
    if self.target == 'openspiel_mcts':
      referee.pyspiel()  # Not installed: one line naming its file.


class NetworkPlayer:
  """Google's MCTS with the network, leaves evaluated `virtual_losses` at
  a time; its tree follows both sides' moves."""

  def __init__(self, net, position: go.Position, options: MatchOptions,
               rng: np.random.Generator):
    self.net, self.options, self.rng = net, options, rng
    self.tree = mcts.Tree(position, options.search)

  def select_move(self) -> int:
    tree, target = self.tree, self.tree.root.N + self.options.readouts
    while tree.root.N < target:
      leaves = selfplay.queue_leaves(tree, self.options.virtual_losses,
                                     target)
      if leaves:
        policies, values = self.net(np.stack(
            [go_features.features(leaf.position) for leaf in leaves]))
        for leaf, policy, value in zip(leaves, policies, values):
          tree.incorporate_results(leaf, policy, float(value))
          tree.revert_virtual_loss(leaf)
    return tree.pick_move(self.rng)

  def played(self, move: int) -> None:
    self.tree.play_move(move)


class RefereedNetwork:
  """A NetworkPlayer as a side of a game OpenSpiel referees
  (models/minigo/referee.py): its tree searches with superko off, as
  OpenSpiel's rules are."""

  def __init__(self, net, size: int, options: MatchOptions, seed: int):
    self.to_openspiel = referee.to_openspiel(size)
    position = go.Position(size, komi=options.komi, superko=False)
    self.player = NetworkPlayer(net, position, options,
                                np.random.default_rng(seed))

  @classmethod
  def from_weights(cls, weights, size: int, options: MatchOptions,
                   seed: int) -> 'RefereedNetwork':
    _check_board_size(weights, size)
    return cls(minigo_numpy.NumpyDualNet(weights), size, options, seed)

  def select(self, state) -> int:
    del state  # The tree follows the game.
    return int(self.to_openspiel[self.player.select_move()])

  def played(self, action: int) -> None:
    self.player.played(int(self.to_openspiel[action]))


def _check_board_size(weights, size: int) -> None:
  built = network_board_size(weights)
  if built != size:
    raise ValueError(f'The network was built for {built}x{built}, the '
                     f'game is {size}x{size}.')


def network_board_size(weights) -> int:
  """The board side a network's weights were built for (its policy
  layer's outputs, size * size + 1)."""
  kernel = next(v for k, v in weights.items()
                if k.endswith('policy/logits/kernel'))
  return int(round((kernel.shape[-1] - 1) ** 0.5))


def match_work(work) -> dict:
  """Plays games `first` .. `first + games - 1` of a match between the
  network of `weights` and the target; returns {'wins', 'games', 'moves'}
  (wins: the network's) and each game's 'colours' (the network's) and
  'scores' (Black's area minus White's, minus komi).

  work: (weights, size, options: MatchOptions, first, games, seed).
  """
  weights, size, options, first, games, seed = work
  if options.target == 'openspiel_mcts':
    return _refereed_match(weights, size, options, first, games, seed)
  net = minigo_numpy.NumpyDualNet(weights)
  wins = moves = 0
  colours, scores = [], []
  for index in range(first, first + games):
    rng = np.random.default_rng([seed, index])
    position = go.Position(size, komi=options.komi, superko=options.superko)
    network = NetworkPlayer(net, position, options, rng)
    target = uct_player.UctPlayer(options.target_rollouts,
                                  seed=int(rng.integers(2**31)))
    network_colour = go.BLACK if index % 2 == 0 else go.WHITE
    while not network.tree.is_game_over():
      position = network.tree.root.position
      if position.to_play == network_colour:
        move = network.select_move()
      else:
        move = target.select_move(position)
      network.played(move)
    final = network.tree.root.position
    wins += int(np.sign(final.score()) == network_colour)
    moves += final.n
    colours.append(network_colour)
    scores.append(final.score())
  return dict(wins=wins, games=games, moves=moves, colours=colours,
              scores=scores)


def _refereed_match(weights, size, options, first, games, seed) -> dict:
  """match_work against OpenSpiel's MCTS, OpenSpiel deciding the rules,
  every game at once (models/minigo/refereed_match.py); 'scores' are
  Black's returns (+1, -1: OpenSpiel gives no margin)."""
  _check_board_size(weights, size)
  return refereed_match.play(minigo_numpy.NumpyDualNet(weights), size=size,
                             options=options, first=first, games=games,
                             seed=seed)
