"""Benchmark: MiniGo self-play with the network in each host process (NumPy)
or on the training process's devices (every process's leaves batched
together), and searched on one forest of arrays or on a Python tree a game,
side by side.

  python -m benchmarks.minigo_selfplay [--rounds=3] [--devices=1]

A generation's self-play as the run makes it (models/minigo/data.py's
`produce`: 2 host processes, concurrent games, virtual losses, no fast
moves), from the same random weights and seeds in both modes, interleaved
round by round after a warm-up (process start-up and tracing), for two
networks: the quickstart's (7x7, 3 blocks of 32, 24 readouts) and the 9x9
flags' (9 blocks of 64, 32 readouts here). `--devices` splits the CPU
into that many logical devices (the device mode's replicas). Positions a
second (moves played, fast or not) are the measure; the games are the
same in both modes but for near ties (tests/models/minigo/test_games.py).
"""

import json
import os
import statistics
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point

FLAGS = flags.FLAGS
ENGINES = ('trees', 'forest')  # models.minigo.data.MiniGoData.engine
NETWORKS = {  # label: (board, blocks, width, readouts, games a round)
    'quickstart 7x7, 3x32, 24 readouts': (7, 3, 32, 24, 64),
    '9x9 flags net 9x64, 32 readouts': (9, 9, 64, 32, 16),
}


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from distribution import strategy as strategies
  from models.minigo import mcts
  from models.minigo import model as minigo
  from models.minigo import data as minigo_data
  from models.minigo import task as minigo_task
  from models.minigo import selfplay
  from training import device_inference
  from training import generations
  if FLAGS.devices > 1:
    strategies.split_cpu(FLAGS.devices)
    strategy = strategies.mirrored(
        [f'/cpu:{i}' for i in range(FLAGS.devices)])
  else:
    strategy = tf.distribute.get_strategy()
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for label, (size, blocks, width, readouts, games) in NETWORKS.items():
      games *= FLAGS.games_scale
      options = selfplay.SelfplayOptions(
          num_readouts=readouts, fastplay_frequency=0.0, virtual_losses=4,
          dirichlet_alpha=0.03 * 361 / size**2, komi=8.5 if size == 7 else 7.5,
          min_resign_threshold=-1.0, max_resign_threshold=-0.95,
          search=mcts.SearchOptions(pass_when_settled=size == 7))
      data = {(mode, engine): minigo_data.MiniGoData(
          board_size=size, games_per_generation=games, processes=2,
          concurrent_games=FLAGS.concurrent, selfplay=options, inference=mode,
          engine=engine)
              for mode in ('host', 'device') for engine in ENGINES}
      with strategy.scope():
        net = minigo.DualNet(board_size=size, trunk_layers=blocks,
                             conv_width=width, fc_width=width, seed=1)
      infer = device_inference.DeviceInference(
          strategy=strategy, fn=minigo_task.MiniGoTask(
              model=None, data=data['host', 'forest']).serving_fn(net))
      weights = generations.weights_by_name(
          [*net.trainable_variables, *net.state.values()])
      rates = {mode: [] for mode in data}
      for r in range(FLAGS.rounds + 1):  # Round 0 warms up.
        for mode, d in data.items():
          d.directory = os.path.join(tmp, f'{size}-{"-".join(mode)}-{r}')
          start = time.perf_counter()
          d.produce(0, weights, worker=0, workers=1, infer=infer)
          seconds = time.perf_counter() - start
          with open(os.path.join(d.directory, '000000',
                                 'done-w0.json')) as f:
            moves = json.load(f)['moves']
          if r:
            rates[mode].append(moves / seconds)
          served = (f', {d.served.rows / d.served.calls:.0f} leaves a call'
                    if d.served else '')
          print(f'{label}, round {r or "warm-up"}, {"/".join(mode)}: '
                f'{moves / seconds:.1f} positions/s ({moves} moves in '
                f'{seconds:.1f} s{served})', flush=True)
      rate = {m: statistics.median(r) for m, r in rates.items()}
      host, device = rate['host', 'forest'], rate['device', 'forest']
      print(f'  {label}: ' + ', '.join(f'{"/".join(m)} {v:.1f}'
                                      for m, v in rate.items()))
      replicas = (f'{FLAGS.devices} CPU replica'
                  f'{"s" if FLAGS.devices > 1 else ""}')
      at_once = min(FLAGS.concurrent, games // 2)  # Each process's.
      label = f'{label}, {at_once} games at once a process'
      rows.append((f'MiniGo self-play {label}, 2 processes, positions/s: '
                   f'device inference ({replicas}) vs NumPy in each '
                   'process (both on the forest)', f'{device:.1f}',
                   f'{host:.1f}', f'{device / host:.2f}x'))
      for mode in ('host', 'device'):
        forest, trees = rate[mode, 'forest'], rate[mode, 'trees']
        rows.append((f'MiniGo self-play {label}, 2 processes, positions/s, '
                     f'{mode} inference: every tree in one forest vs a '
                     'Python tree a game (the same games)', f'{forest:.1f}',
                     f'{trees:.1f}', f'{forest / trees:.2f}x'))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds after a warm-up.')
  flags.DEFINE_integer('devices', 1, 'Logical CPU devices (replicas).')
  flags.DEFINE_integer('concurrent', 32, 'Games a host process plays at once '
                       '(the quickstart\'s CONCURRENT_GAMES).')
  flags.DEFINE_integer('games_scale', 1, 'Games a round: each network\'s '
                       'count times this.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
