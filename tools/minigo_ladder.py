"""MiniGo's players against OpenSpiel's MCTS, refereed by OpenSpiel.

  python -m tools.minigo_ladder --board_size=9 --komi=7.5 \\
      --simulations=50,200,800 --games=100 [--run=runs/minigo_x]

Each player plays `games` games against each MCTS strength (OpenSpiel's
MCTSBot, N random-rollout simulations a move), half as Black; OpenSpiel
decides every game's legal moves, end and winner (models/minigo/referee.py).
The players: a uniformly random legal mover, and with --run each
generation's model of a MiniGo run (its generations/NNNNNN/model.npz,
searching --readouts a move as the run's evaluation games do). Prints a
table of win rates as Black, as White and overall.
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
  flags.DEFINE_float('komi', 7.5, 'The komi.')
  flags.DEFINE_list('simulations', ['50', '200', '800'],
                    'OpenSpiel MCTS strengths: simulations a move.')
  flags.DEFINE_integer('games', 100, 'Games a pairing (half as Black).')
  flags.DEFINE_string('run', None, 'A MiniGo run folder (its generations/ '
                      'models join the ladder).')
  flags.DEFINE_list('generations', [], 'With --run: these generations only '
                    '(default: every one).')
  flags.DEFINE_integer('readouts', 16, "A model's readouts a move.")
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


def main(argv):
  del argv
  simulations = [int(n) for n in FLAGS.simulations]
  if min(simulations) < 1 or FLAGS.games < 2 or FLAGS.readouts < 1:
    raise ValueError('--simulations must be at least 1 each, --games at '
                     'least 2 and --readouts at least 1.')
  # pylint: disable-next=import-outside-toplevel
  from models.minigo import games as minigo_games
  from models.minigo import referee  # pylint: disable=import-outside-toplevel
  size = FLAGS.board_size
  game = referee.load_game(size, FLAGS.komi)
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
  options = minigo_games.MatchOptions(readouts=FLAGS.readouts,
                                      komi=FLAGS.komi)
  print(f'{size}x{size}, komi {FLAGS.komi}, {FLAGS.games} games a pairing '
        '(half as Black), refereed by OpenSpiel', flush=True)
  print('| player | opponent | as Black | as White | overall |')
  print('|---|---|---|---|---|')
  for label, path in players:
    weights = _weights(path) if path else None
    for n in simulations:
      wins = {'black': 0, 'white': 0}
      for i in range(FLAGS.games):
        seed = FLAGS.seed * 1_000_003 + i
        ours = (referee.RandomPlayer(seed) if weights is None else
                minigo_games.RefereedNetwork.from_weights(weights, size, options, seed))
        theirs = referee.MctsPlayer(game, n, seed)
        black = i % 2 == 0
        result, _ = referee.play(game, *((ours, theirs) if black
                                         else (theirs, ours)))
        if (result > 0) == black:
          wins['black' if black else 'white'] += 1
      half_b, half_w = (FLAGS.games + 1) // 2, FLAGS.games // 2
      print(f'| {label} | MCTS-{n} | {wins["black"]}/{half_b} | '
            f'{wins["white"]}/{half_w} | '
            f'{(wins["black"] + wins["white"]) / FLAGS.games:.2f} |',
            flush=True)


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)
  startup.import_tensorflow()  # First: TensorFlow without Keras, quiet.
  app.run(entry_point.tool_main(main))
