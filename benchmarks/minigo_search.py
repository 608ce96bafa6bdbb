"""Benchmark: MiniGo's search and self-play, side by side.

  python -m benchmarks.minigo_search [--board_size=9] [--readouts=400] \
      [--positions=8] [--rounds=3] \
      [--reference_dir=/path/to/training/reinforcement/tensorflow/minigo]

Readouts a second of the same search (PUCT with MiniGo's constants, one
leaf at a time, a uniform policy and value 0 from every leaf: the search
alone, no network) from the same positions, by three engines, each round
in its own process, interleaved round by round:

- `ours`: models/minigo/mcts.py (Google's C++ tree, NumPy edges per node) on
  models/minigo/go.py's rules;
- `pure_python`: the same search with Python lists for the edges (this
  file), on the same rules: what the NumPy edges buy;
- `reference`: the MLPerf reference's Python MCTS (mcts.py, go.py and
  coords.py of mlcommons/training at its v0.7 freeze, 373dfed), when
  --reference_dir names that folder: its own rules engine, board size from
  BOARD_SIZE as it reads it.

Then self-play positions a second of models/minigo/games.selfplay_work (the
NumPy network, concurrent games, virtual losses) on one process, for the
quickstart's settings and the 9x9 flags' network.
"""

import json
import math
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

from benchmarks import common

ROOT = common.ROOT
FLAGS = flags.FLAGS
ENGINES = ('ours', 'pure_python', 'reference')


def define_flags():
  flags.DEFINE_integer('board_size', 9, 'Board side.')
  flags.DEFINE_integer('readouts', 400, 'Readouts from each position.')
  flags.DEFINE_integer('positions', 8, 'Positions searched (random games, '
                       '10 moves each).')
  flags.DEFINE_integer('rounds', 3, 'Rounds; each engine once a round.')
  flags.DEFINE_string('reference_dir', '', 'The reference MiniGo folder '
                      '(mcts.py, go.py, coords.py); empty: skipped.')
  flags.DEFINE_bool('selfplay', True, 'Also time self-play.')
  flags.DEFINE_string('worker', '', 'Internal: run one engine, print JSON.')


def positions_moves(size: int, count: int) -> list[list[int]]:
  """Flat moves of `count` random 10-move openings (seeded)."""
  import numpy as np
  from models.minigo import go
  rng = np.random.default_rng(0)
  out = []
  for _ in range(count):
    position, moves = go.Position(size, superko=False), []
    for _ in range(10):
      legal = np.flatnonzero(position.legal_moves()[:-1])
      move = int(rng.choice(legal))
      moves.append(move)
      position = position.play(move)
    out.append(moves)
  return out


class PurePythonNode:
  """models/minigo/mcts.Node's search with its edges in Python lists."""

  __slots__ = ('position', 'parent', 'move', 'legal', 'N', 'W', 'P',
               'children', 'expanded')

  def __init__(self, position, parent=None, move=-1):
    self.position, self.parent, self.move = position, parent, move
    self.legal = position.legal_moves().tolist()
    moves = len(self.legal)
    self.N, self.W, self.P = [0] * moves, [0.0] * moves, [0.0] * moves
    self.children, self.expanded = {}, False


def pure_python_readouts(root_position, readouts: int) -> int:
  from models.minigo import mcts
  root = PurePythonNode(root_position)
  root_n = [0]
  for _ in range(readouts):
    node, path = root, []
    while node.expanded:
      n_parent = root_n[0] if node is root else node.parent.N[node.move]
      u_scale = 2.0 * (math.log((1.0 + n_parent + mcts.C_PUCT_BASE) /
                                mcts.C_PUCT_BASE) + mcts.C_PUCT_INIT)
      u_common = u_scale * math.sqrt(max(1, n_parent - 1))
      to_play = node.position.to_play
      best, best_score = -1, -math.inf
      for m, legal in enumerate(node.legal):
        n = node.N[m]
        score = (node.W[m] / (1 + n) * to_play + u_common * node.P[m] /
                 (1 + n) - (0.0 if legal else 1000.0))
        if score > best_score:
          best, best_score = m, score
      if not node.legal[best]:
        best = len(node.legal) - 1
      path.append((node, best))
      child = node.children.get(best)
      if child is None:
        child = node.children[best] = PurePythonNode(
            node.position.play(best), node, best)
      node = child
    if node.position.is_game_over():
      value = 1.0 if node.position.score() > 0 else -1.0
    else:
      legal = node.legal
      p = 1.0 / sum(legal)
      node.P = [p if ok else 0.0 for ok in legal]
      node.W = [-0.2 * node.position.to_play] * len(legal)
      node.expanded, value = True, 0.0
    for parent, move in path:
      parent.N[move] += 1
      parent.W[move] += value
    root_n[0] += 1
  return root_n[0]


def ours_readouts(root_position, readouts: int) -> int:
  import numpy as np
  from models.minigo import mcts
  tree = mcts.Tree(root_position, mcts.SearchOptions())
  uniform = None
  for _ in range(readouts):
    leaf = tree.select_leaf()
    if leaf.game_over():
      tree.incorporate_end_game_result(
          leaf, 1.0 if leaf.position.score() > 0 else -1.0)
      continue
    if uniform is None:
      uniform = np.full(len(leaf.legal), 1.0 / len(leaf.legal), np.float32)
    tree.incorporate_results(leaf, uniform, 0.0)
  return tree.root.N


def run_worker(engine: str) -> dict:
  """One engine over every position; readouts a second."""
  size, readouts = FLAGS.board_size, FLAGS.readouts
  openings = positions_moves(size, FLAGS.positions)
  if engine == 'reference':
    sys.path.insert(0, FLAGS.reference_dir)
    import coords  # pylint: disable=import-outside-toplevel
    import go as reference_go  # pylint: disable=import-outside-toplevel
    import mcts as reference_mcts  # pylint: disable=import-outside-toplevel
    import numpy as np
    roots = []
    for moves in openings:
      position = reference_go.Position()
      for move in moves:
        position = position.play_move(coords.from_flat(move))
      roots.append(position)
    uniform = np.full(size * size + 1, 1.0 / (size * size + 1), np.float32)

    def search(position):
      root = reference_mcts.MCTSNode(position)
      for _ in range(readouts):
        leaf = root.select_leaf()
        if leaf.is_done():
          leaf.backup_value(1 if leaf.position.score() > 0 else -1,
                            up_to=root)
        else:
          leaf.incorporate_results(uniform, 0.0, up_to=root)
      return root.N
  else:
    from models.minigo import go
    roots = []
    for moves in openings:
      position = go.Position(size, superko=False)
      for move in moves:
        position = position.play(move)
      roots.append(position)
    fn = ours_readouts if engine == 'ours' else pure_python_readouts

    def search(position):
      return fn(position, readouts)
  start = time.perf_counter()
  done = sum(search(p) for p in roots)
  seconds = time.perf_counter() - start
  return {'engine': engine, 'readouts': done,
          'readouts_per_second': done / seconds}


def selfplay_rate(size, conv_width, trunk_layers, readouts, games,
                  concurrent) -> dict:
  """Positions a second of one process's self-play."""
  import numpy as np
  from models.minigo import games as minigo_games
  from models.minigo import selfplay
  rng = np.random.default_rng(0)
  weights = {}

  # Random weights of DualNet's shapes, without TensorFlow.
  def conv(name, k, cin, cout, scaled=True):
    weights[f'minigo/{name}/kernel'] = rng.normal(
        0, math.sqrt(2 / (k * k * cin)), (k, k, cin, cout)).astype('f4')
    if scaled:
      weights[f'minigo/{name}/bn/gamma'] = np.ones(cout, 'f4')
      weights[f'minigo/{name}/bn/beta'] = np.zeros(cout, 'f4')
    weights[f'minigo/{name}/bn/moving_mean'] = np.zeros(cout, 'f4')
    weights[f'minigo/{name}/bn/moving_variance'] = np.ones(cout, 'f4')

  def dense(name, cin, cout):
    weights[f'minigo/{name}/kernel'] = rng.normal(
        0, math.sqrt(1 / cin), (cin, cout)).astype('f4')
    weights[f'minigo/{name}/bias'] = np.zeros(cout, 'f4')

  conv('init', 3, 13, conv_width)
  for i in range(trunk_layers):
    conv(f'block{i}/conv1', 3, conv_width, conv_width)
    conv(f'block{i}/conv2', 3, conv_width, conv_width)
  conv('policy/conv', 1, conv_width, 2, scaled=False)
  conv('value/conv', 1, conv_width, 1, scaled=False)
  dense('policy/logits', 2 * size * size, size * size + 1)
  dense('value/hidden', size * size, conv_width)
  dense('value/output', conv_width, 1)
  options = selfplay.SelfplayOptions(
      num_readouts=readouts, fastplay_frequency=0.0, virtual_losses=4,
      dirichlet_alpha=0.03 * 361 / size ** 2, min_resign_threshold=-1.0,
      max_resign_threshold=-0.99)
  start = time.perf_counter()
  out = minigo_games.selfplay_work((weights, size, options, games,
                                    concurrent, 0, 'trees'))
  seconds = time.perf_counter() - start
  return {'positions_per_second': out['moves'] / seconds,
          'leaves_per_second': out['moves'] * readouts / seconds,
          'moves': out['moves'], 'seconds': seconds}


def main(argv):
  del argv
  if FLAGS.worker:
    if FLAGS.worker.startswith('selfplay:'):
      size, width, layers, readouts, games, concurrent = map(
          int, FLAGS.worker.split(':')[1].split(','))
      print(json.dumps(selfplay_rate(size, width, layers, readouts, games,
                                     concurrent)))
    else:
      print(json.dumps(run_worker(FLAGS.worker)))
    return 0
  engines = [e for e in ENGINES if e != 'reference' or FLAGS.reference_dir]
  rates = {e: [] for e in engines}
  env = dict(os.environ, BOARD_SIZE=str(FLAGS.board_size),
             OPENBLAS_NUM_THREADS='1', PYTHONPATH=ROOT)
  args = [f'--board_size={FLAGS.board_size}', f'--readouts={FLAGS.readouts}',
          f'--positions={FLAGS.positions}',
          f'--reference_dir={FLAGS.reference_dir}']
  for r in range(FLAGS.rounds):
    for engine in engines:
      done = subprocess.run(
          [sys.executable, '-m', 'benchmarks.minigo_search',
           f'--worker={engine}', *args], capture_output=True, text=True,
          cwd=ROOT, env=env, check=True)
      result = json.loads(done.stdout.strip().splitlines()[-1])
      rates[engine].append(result['readouts_per_second'])
      print(f'round {r + 1} {engine}: {result["readouts_per_second"]:.0f} '
            'readouts/s', flush=True)
  medians = {e: statistics.median(v) for e, v in rates.items()}
  print(f'\n{FLAGS.board_size}x{FLAGS.board_size}, {FLAGS.readouts} '
        f'readouts from each of {FLAGS.positions} positions, medians of '
        f'{FLAGS.rounds} rounds:')
  for engine in engines:
    print(f'  {engine:12s} {medians[engine]:8.0f} readouts/s  '
          f'{medians[engine] / medians["ours"]:.2f}x ours')
  rows = [(f'MiniGo search {FLAGS.board_size}x{FLAGS.board_size}, '
           'readouts/s (vs the pure-Python search)',
           f'{medians["ours"]:.0f}', f'{medians["pure_python"]:.0f}',
           f'{medians["ours"] / medians["pure_python"]:.2f}x')]
  if 'reference' in medians:
    rows.append((f'MiniGo search {FLAGS.board_size}x{FLAGS.board_size}, '
                 'readouts/s (vs the reference mcts.py)',
                 f'{medians["ours"]:.0f}', f'{medians["reference"]:.0f}',
                 f'{medians["ours"] / medians["reference"]:.2f}x'))
  if FLAGS.selfplay:
    for label, spec in (('quickstart 7x7, 3x32, 24 readouts', '7,32,3,24,32,32'),
                        ('9x9 flags net 9x64, 32 readouts', '9,64,9,32,16,16')):
      done = subprocess.run(
          [sys.executable, '-m', 'benchmarks.minigo_search',
           f'--worker=selfplay:{spec}'], capture_output=True, text=True,
          cwd=ROOT, env=env, check=True)
      result = json.loads(done.stdout.strip().splitlines()[-1])
      print(f'self-play, one process, {label}: '
            f'{result["positions_per_second"]:.1f} positions/s, '
            f'{result["leaves_per_second"]:.0f} leaves/s '
            f'({result["moves"]} moves in {result["seconds"]:.0f} s)',
            flush=True)
      rows.append((f'MiniGo self-play {label}, positions/s a process',
                   f'{result["positions_per_second"]:.1f}', '-', '-'))
  print(common.page_rows(rows))
  return 0


if __name__ == '__main__':
  define_flags()
  app.run(main)
