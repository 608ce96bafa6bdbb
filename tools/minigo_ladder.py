"""MiniGo's players against OpenSpiel's MCTS, refereed by OpenSpiel.

  python -m tools.minigo_ladder --board_size=9 --komi=7.5 \\
      --simulations=50,200,800 --games=100 [--run=runs/minigo_x]

Each player plays `games` games against each MCTS strength (OpenSpiel's
MCTSBot, N random-rollout simulations a move), half as Black; OpenSpiel
decides every game's legal moves, end and winner (models/minigo/referee.py).
The players: a uniformly random legal mover, and with --run each
generation's model of a MiniGo run (its generations/NNNNNN/model.npz),
searching as the run's evaluation games did: the readouts, virtual losses,
komi and search options of the run's config.gin
(models.minigo.games.MatchOptions), --readouts and --komi overriding them
when given. Prints a table of win rates as Black, as White and overall.
"""

import glob
import io
import os

from absl import app
from absl import flags

from core import entry_point
from core import startup

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_integer('board_size', 9, 'The board side.')
  flags.DEFINE_float('komi', None, 'The komi (default: the run\'s, else '
                     '7.5).')
  flags.DEFINE_list('simulations', ['50', '200', '800'],
                    'The opponents: OpenSpiel MCTS strengths (simulations '
                    'a move), or `random` (a uniformly random legal mover, '
                    'for the models only).')
  flags.DEFINE_integer('games', 100, 'Games a pairing (half as Black).')
  flags.DEFINE_string('run', None, 'A MiniGo run folder (its generations/ '
                      'models join the ladder).')
  flags.DEFINE_list('generations', [], 'With --run: these generations only '
                    '(default: every one).')
  flags.DEFINE_integer('readouts', None, "A model's readouts a move "
                       "(default: the run's evaluation's, else 16).")
  flags.DEFINE_integer('seed', 0, 'The games\' randomness.')


def _models(run: str) -> list[tuple[str, str]]:
  """(label, model.npz path) of each generation of a run, oldest first."""
  found = sorted(glob.glob(os.path.join(run, 'generations', '*',
                                        'model.npz')))
  if not found:
    raise FileNotFoundError(f'--run={run}: no generations/*/model.npz '
                            'there; pass a MiniGo run folder.')
  return [(f'model {int(os.path.basename(os.path.dirname(p)))}', p)
          for p in found]


def _weights(path: str) -> dict:
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  with tf.io.gfile.GFile(path, 'rb') as f:
    return dict(np.load(io.BytesIO(f.read())))


def _match_options(run: str | None):
  """The run's evaluation settings (its config.gin's MatchOptions), or the
  defaults; --readouts and --komi over them."""
  # pylint: disable=import-outside-toplevel
  import dataclasses
  import gin
  from core import config as gin_config
  from models.minigo import games as minigo_games
  options = minigo_games.MatchOptions(readouts=16, komi=7.5)
  config = run and os.path.join(run, 'config.gin')
  if config and os.path.exists(config):
    gin_config.parse([config], [], unread_macros='known')
    options = gin.get_configurable(minigo_games.MatchOptions)()
  changes = {k: getattr(FLAGS, k) for k in ('readouts', 'komi')
             if getattr(FLAGS, k) is not None}
  return dataclasses.replace(options, **changes)


def main(argv):
  del argv
  if not all(n == 'random' or n.isdigit() and int(n) >= 1
             for n in FLAGS.simulations):
    raise ValueError(f'--simulations={",".join(FLAGS.simulations)}: each '
                     'must be `random` or a whole number of at least 1.')
  simulations = [n if n == 'random' else int(n) for n in FLAGS.simulations]
  if FLAGS.games < 2 or (FLAGS.readouts is not None and FLAGS.readouts < 1):
    raise ValueError('--games must be at least 2 and --readouts at least '
                     '1.')
  # pylint: disable-next=import-outside-toplevel
  from models.minigo import games as minigo_games
  from models.minigo import referee  # pylint: disable=import-outside-toplevel
  size = FLAGS.board_size
  options = _match_options(FLAGS.run)
  game = referee.load_game(size, options.komi)
  players = [('random', None)]
  if FLAGS.run:
    models = _models(FLAGS.run)
    if FLAGS.generations:
      wanted = {f'model {int(g)}' for g in FLAGS.generations}
      missing = wanted - {label for label, _ in models}
      if missing:
        raise ValueError(f'--run={FLAGS.run} has no {sorted(missing)[0]}.')
      models = [m for m in models if m[0] in wanted]
    players += models
    for label, path in players[1:]:
      built = minigo_games.network_board_size(_weights(path))
      if built != size:
        raise ValueError(f'{path} is a {built}x{built} network; '
                         f'--board_size is {size}.')
  print(f'{size}x{size}, komi {options.komi}, {FLAGS.games} games a pairing '
        f'(half as Black), refereed by OpenSpiel; a model searches '
        f'{options.readouts} readouts a move, {options.search}', flush=True)
  print('| player | opponent | as Black | as White | overall |')
  print('|---|---|---|---|---|')
  for label, path in players:
    weights = _weights(path) if path else None
    for n in simulations:
      if n == 'random' and weights is None:
        continue  # Random against random tells nothing.
      wins = {'black': 0, 'white': 0}
      for i in range(FLAGS.games):
        seed = FLAGS.seed * 1_000_003 + i
        ours = (referee.RandomPlayer(seed) if weights is None else
                minigo_games.RefereedNetwork.from_weights(
                    weights, size, options, seed))
        theirs = (referee.RandomPlayer(seed + 1) if n == 'random'
                  else referee.MctsPlayer(game, n, seed))
        black = i % 2 == 0
        result, _ = referee.play(game, *((ours, theirs) if black
                                         else (theirs, ours)))
        if (result > 0) == black:
          wins['black' if black else 'white'] += 1
      half_b, half_w = (FLAGS.games + 1) // 2, FLAGS.games // 2
      opponent = n if n == 'random' else f'MCTS-{n}'
      print(f'| {label} | {opponent} | {wins["black"]}/{half_b} | '
            f'{wins["white"]}/{half_w} | '
            f'{(wins["black"] + wins["white"]) / FLAGS.games:.2f} |',
            flush=True)


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)
  startup.import_tensorflow()  # First: TensorFlow without Keras, quiet.
  app.run(entry_point.tool_main(main))
