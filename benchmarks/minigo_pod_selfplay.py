"""Benchmark: MiniGo's 19x19 self-play at the pod file's settings, priced
for a generation on a v4-128's hosts.

  python -m benchmarks.minigo_pod_selfplay [--seconds=120] [--host_cores=N]
      [--store --machine='2 cores of an AMD EPYC']

gin/minigo_pod.gin's self-play (Google's v0.7 flags: 800 readouts, fast
moves of 80 three times in four, 4 virtual losses, the 6x64 network, 64
games at once a search thread) on the forest (models/minigo/
batched_selfplay.py) for `--seconds`, the network in TensorFlow in this
process (random weights: the trees' shapes are a random network's). The
time inside the network is taken apart from the rest, which is the
search: one Python thread, so one core. Printed: positions (moves) a
second, leaves a position, the search's positions a second a core, the
network's leaves a second here, and what a generation of `--games` games
of `--moves_a_game` moves costs on a v4-128 (64 chips, 16 hosts of 4): the
hosts' search at the measured rate a core on `--host_cores` cores a host,
and the chips' network at their peak (a bound: no utilisation assumed).
No Google page gives a v4 host's vCPUs (tools/predictor/hardware.py), so
the host's cores are a flag. `--store` writes the measured rates where
`python -m tools.predict --gin_file=gin/minigo_pod.gin` reads them
(tools/predictor/data/minigo_rates.json).
"""

import datetime
import os
import sys
import time

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point
from tools.predictor import minigo as minigo_price

FLAGS = flags.FLAGS
RATES_ABOUT = ('MiniGo 19x19 self-play at gin/minigo_pod.gin\'s settings on '
               'the forest (benchmarks/minigo_pod_selfplay.py --store): the '
               'search\'s positions a second on one core, the network\'s '
               'leaves a position. Read by tools/predict.py '
               '(tools/predictor/minigo.py).')


def main(argv):
  del argv
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from models.minigo import batched_selfplay
  from models.minigo import mcts
  from models.minigo import model as minigo
  from models.minigo import selfplay
  size, blocks, width = 19, 6, 64
  net = minigo.DualNet(board_size=size, trunk_layers=blocks,
                       conv_width=width, fc_width=width, seed=1)

  @tf.function(autograph=False, reduce_retracing=True)
  def serve(x):
    logits, value, _ = net(x, training=False)
    return tf.nn.softmax(logits), value

  spent = {'seconds': 0.0, 'rows': 0, 'calls': 0}

  def evaluate(x):
    start = time.perf_counter()
    policy, value = serve(tf.constant(x))
    out = policy.numpy(), value.numpy()
    spent['seconds'] += time.perf_counter() - start
    spent['rows'] += len(x)
    spent['calls'] += 1
    return out

  options = selfplay.SelfplayOptions(komi=7.5, search=mcts.SearchOptions())
  runner = batched_selfplay.Selfplay(evaluate, size=size,
                                     concurrent=FLAGS.concurrent,
                                     options=options)
  rng = np.random.default_rng(0)
  playing = [runner.start(np.random.default_rng(rng.integers(2**63)))
             for _ in range(FLAGS.concurrent)]

  def moves():
    return sum(len(game.moves) for game in playing)

  # Warm-up: tracing, and every game's first search (800 readouts at
  # once, the slowest stretch of a game) done.
  while min(len(game.moves) for game in playing) < 1:
    runner.round(playing)
  spent.update(seconds=0.0, rows=0, calls=0)
  first, start = moves(), time.perf_counter()
  while time.perf_counter() - start < FLAGS.seconds:
    runner.round(playing)
  wall = time.perf_counter() - start
  positions = moves() - first
  if not positions:
    raise app.UsageError(
        f'No move was played in --seconds={FLAGS.seconds} (each round '
        f'searches {FLAGS.concurrent} games): measure longer, or with fewer '
        '--concurrent games. Nothing was stored.')
  search = wall - spent['seconds']
  leaves_a_position = spent['rows'] / positions
  search_rate = positions / search  # One core.
  network_rate = spent['rows'] / spent['seconds']
  print(f'{positions} positions in {wall:.1f} s ({positions / wall:.2f}/s): '
        f'{spent["rows"]} leaves ({leaves_a_position:.0f} a position) in '
        f'{spent["calls"]} calls ({spent["rows"] / spent["calls"]:.0f} a '
        f'call); the network {spent["seconds"]:.1f} s '
        f'({network_rate:.0f} leaves/s), the search {search:.1f} s '
        f'({search_rate:.3f} positions/s, '
        f'{spent["rows"] / search:.0f} leaves/s on one core)')
  # The generation's arithmetic is the predictor's (its training is not
  # part of this benchmark: no steps).
  g = minigo_price.generation(
      {'BOARD_SIZE': size, 'TRUNK_LAYERS': blocks, 'CONV_WIDTH': width,
       'FC_WIDTH': width, 'GAMES_PER_GENERATION': FLAGS.games,
       'STEPS_PER_GENERATION': 0, 'GLOBAL_BATCH_SIZE': 0},
      minigo_price.GOOGLE_ACCELERATOR,
      {'search_positions_a_second_a_core': search_rate,
       'leaves_a_position': leaves_a_position},
      host_cores=FLAGS.host_cores, moves_a_game=FLAGS.moves_a_game)
  host_seconds = g.search
  flops = minigo_price.network_flops(size, blocks, width)
  google = minigo_price.google_generation_seconds() / 60
  google_now = google * FLAGS.games / minigo_price.GOOGLE_GAMES
  print(f'A generation of {FLAGS.games} games of {FLAGS.moves_a_game} moves '
        f'({g.positions:,} positions) on a {g.accelerator}: the search '
        f'{host_seconds / 60:.1f} min on {g.hosts} hosts of '
        f'{FLAGS.host_cores} cores; the network {g.network:.1f} s on '
        f'{g.chips} chips at peak ({flops / 1e6:.0f} MFLOP a leaf). '
        f'Google: {google:.1f} min a generation of '
        f'{minigo_price.GOOGLE_GAMES:,} games '
        f'({google_now:.2f} min for '
        f'{FLAGS.games}), their C++ search.')
  print(common.page_rows([
      ('MiniGo 19x19 self-play at the pod file\'s settings (800 readouts, '
       'fast 80 at 0.75, 4 virtual losses, 6x64), the forest\'s search, '
       'positions/s a core', f'{search_rate:.3f}', '-', '-'),
      (f'MiniGo: a generation of {FLAGS.games} games of '
       f'{FLAGS.moves_a_game} moves on a v4-128 ({FLAGS.host_cores} cores '
       'a host), search minutes vs Google\'s generation (C++)',
       f'{host_seconds / 60:.1f}',
       f'{google_now:.2f}', f'{google_now / (host_seconds / 60):.2f}x'),
  ]))
  if FLAGS.store:
    minigo_price.store_rates({
        'about': RATES_ABOUT,
        'command': ' '.join(['python -m benchmarks.minigo_pod_selfplay'] +
                            [a for a in sys.argv[1:]
                             if not a.startswith(('--store', '--machine'))]),
        'date': datetime.date.today().isoformat(),
        'leaves_a_position': round(leaves_a_position, 1),
        'machine': FLAGS.machine,
        'readouts': options.num_readouts,
        'search_positions_a_second_a_core': round(search_rate, 3)})
    print(f'stored in {os.path.relpath(minigo_price.RATES_PATH)}')


if __name__ == '__main__':
  flags.DEFINE_integer('seconds', 120, 'Measured seconds of self-play (after '
                       'every game\'s first move).', lower_bound=10)
  flags.DEFINE_integer('concurrent', 64, 'Games at once (Google\'s '
                       'mlperf_parallel_games).', lower_bound=1)
  flags.DEFINE_integer('games', 8192, 'Games a generation (MLPerf\'s least).')
  flags.DEFINE_integer('moves_a_game', 250, 'Moves a 19x19 game (assumed: '
                       'the run does not log it).')
  flags.DEFINE_bool('store', False, 'Write the measured rates for '
                    'tools.predict (tools/predictor/data/minigo_rates.json).')
  flags.DEFINE_string('machine', 'this machine', 'With --store: what ran it '
                      '(cores, CPU), as the prediction quotes it.')
  flags.DEFINE_integer('host_cores', 120, 'Cores a v4 host gives the search '
                       '(no Google page says: an assumption).')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
