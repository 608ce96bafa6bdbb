"""MiniGo's data: each generation's self-play games, made in host processes
by the model the runtime hands over, and the training window over the last
generations (training.task.Generations and TaskData).

On storage (local or gs://), under `directory` (default: the run's
model_dir/generations):

  NNNNNN/model.npz          model NNNNNN's weights (what made the games;
                            the generation's saved model)
  NNNNNN/games-wK.tfrecord.zz  worker K's examples (ZLIB TFRecords,
                            input_pipeline/go_examples.py)
  NNNNNN/done-wK.json       worker K's counts, written last: the share is
                            complete

Every file appears whole or not at all (core/staged_files.py); a share
whose done file is missing is played again, so a run killed during
self-play loses only the unfinished share.

Model g + 1 trains on the examples of models max(0, g - window + 1) .. g
(Google's v0.7: a window of 5 generations), each kept with probability
`filter_amount` (theirs 1.0, the reference's 0.3), shuffled, each under a
random symmetry (their rotate_train_nhwc). A generation is
`steps_per_generation` steps (the reference derives it from the sampled
window's size, one pass; fixing it keeps a resumed run's step count the
same: docs/minigo.md).
"""

import contextlib
import dataclasses
import io
import json
import os

import numpy as np
import tensorflow as tf

from core import staged_files
from input_pipeline import go_examples
from models.minigo import host_inference
from models.common import host_pool
from models.minigo import games as minigo_games
from models.minigo import selfplay as selfplay_lib


_INFERENCE = ('host', 'device')
_ENGINES = tuple(minigo_games.SELFPLAY_ENGINES)


def _name(generation: int) -> str:
  return f'{generation:06d}'


@dataclasses.dataclass
class MiniGoData:
  """Self-play games per generation and the training window over them.

  Attributes:
    board_size: the board's side.
    games_per_generation: self-play games each generation (over all
      workers; MLPerf v0.7: at least 8192).
    steps_per_generation: training steps each generation.
    window: generations whose games train the next model (v0.7: 5).
    filter_amount: the share of the window's examples kept (v0.7 Google:
      1.0).
    selfplay: the self-play options (models/minigo/selfplay.py).
    concurrent_games: games each host process plays at once, their leaves
      evaluated in one batch.
    processes: host processes playing on each worker.
    inference: where self-play evaluates the network: 'host' (NumPy in
      each host process: models/minigo/numpy_model.py) or 'device' (the
      training process's devices, every process's leaves batched
      together: models/minigo/host_inference.py, Google's TPU self-play).
    engine: how a host process searches its games: 'forest' (every
      game's tree in one set of arrays, a level of all descents at a time:
      models/minigo/batched_selfplay.py) or 'trees' (a Python tree a game:
      models/minigo/selfplay.py); the same games from the same seeds.
    shuffle_buffer: examples shuffled together.
    seed: the games' and the window's randomness.
    directory: where generations go (None: the runtime's default,
      model_dir/generations).
  """
  board_size: int = 19
  games_per_generation: int = 8192
  steps_per_generation: int = 100
  window: int = 5
  filter_amount: float = 1.0
  selfplay: selfplay_lib.SelfplayOptions = selfplay_lib.SelfplayOptions()
  concurrent_games: int = 64
  processes: int = 2
  inference: str = 'host'
  engine: str = 'forest'
  shuffle_buffer: int = 100_000
  seed: int = 0
  directory: str | None = None

  def __post_init__(self):
    self._pool = None
    self.served = None  # The last device-served self-play's counts.

  # -- training.task.TaskData ---------------------------------------------

  @property
  def num_train_examples(self) -> int:
    """MLPerf's train_samples for MiniGo (Google's log): the games a
    generation."""
    return self.games_per_generation

  def check(self) -> None:
    for name in ('board_size', 'games_per_generation',
                 'steps_per_generation', 'window', 'concurrent_games',
                 'processes'):
      if getattr(self, name) < 1:
        raise ValueError(f'models.minigo.data.MiniGoData.{name} must be at '
                         f'least 1, got {getattr(self, name)}.')
    if self.inference not in _INFERENCE:
      raise ValueError('models.minigo.data.MiniGoData.inference must be one '
                       f'of {_INFERENCE}, got {self.inference!r}.')
    if self.engine not in _ENGINES:
      raise ValueError('models.minigo.data.MiniGoData.engine must be one of '
                       f'{_ENGINES}, got {self.engine!r}.')
    if not 0 < self.filter_amount <= 1:
      raise ValueError('models.minigo.data.MiniGoData.filter_amount must be '
                       f'in (0, 1], got {self.filter_amount}.')

  def steps_per_epoch(self, global_batch_size: int) -> float:
    """An "epoch" of MiniGo is a generation (MLPerf's epoch_num)."""
    del global_batch_size
    return float(self.steps_per_generation)

  def num_eval_examples(self) -> int:
    """MLPerf's eval_samples for MiniGo (Google's log: the games a
    generation, as train_samples)."""
    return self.games_per_generation

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    raise NotImplementedError('MiniGo evaluates by games (models/'
                              'minigo_evaluation.py), not eval batches.')

  def eval_dataset(self, input_context, *, global_batch_size: int,
                   steps: int, cache: bool = True):
    raise NotImplementedError('MiniGo evaluates by games (models/'
                              'minigo_evaluation.py), not eval batches.')

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int,
                    start_step: int = 0) -> tf.data.Dataset:
    """The window's examples for the generation `start_step` is in,
    positioned at start_step, repeated."""
    generation = start_step // self.steps_per_generation
    files = []
    for g in range(max(0, generation - self.window + 1), generation + 1):
      files += sorted(tf.io.gfile.glob(self._path(g, 'games-w*.tfrecord.zz')))
    if not files:
      raise FileNotFoundError(
          f'No self-play games for generation {generation} under '
          f'{self._folder(generation)}: the runtime makes them before '
          'training (training.task.Generations); was the folder removed?')
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    size = self.board_size
    ds = go_examples.dataset(files).shard(
        input_context.num_input_pipelines, input_context.input_pipeline_id)
    if self.filter_amount < 1:  # Each example kept with this chance.
      ds = ds.enumerate().filter(
          lambda i, _: tf.random.stateless_uniform(
              [], tf.stack([tf.cast(generation, tf.int64), i])) <
          self.filter_amount).map(lambda _, record: record)
    ds = ds.shuffle(self.shuffle_buffer, seed=self.seed * 1_000_003 +
                    generation, reshuffle_each_iteration=True)
    ds = ds.repeat().enumerate().map(
        lambda i, record: go_examples.random_symmetry(
            go_examples.parse(record, size),
            tf.stack([tf.cast(generation, tf.int64) * 1_000_003 + i,
                      tf.constant(self.seed, tf.int64)])),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(batch, drop_remainder=True)
    ds = ds.skip(start_step % self.steps_per_generation)
    return ds.prefetch(2)

  # -- training.task.Generations --------------------------------------------

  def produce(self, generation: int, weights, *, worker: int,
              workers: int, infer=None) -> dict:
    """Plays this worker's share of model `generation`'s games (host
    processes; the network in each, or on `infer`'s devices) and writes
    them; returns {'actual_selfplay_games_per_generation': games over all
    workers} for the log."""
    done = self._path(generation, f'done-w{worker}.json')
    if not tf.io.gfile.exists(done):
      self._play(generation, weights, worker, workers, infer)
    counts = json.loads(_read(done))
    return {'actual_selfplay_games_per_generation':
            counts['games'] * workers}

  def _play(self, generation, weights, worker, workers, infer):
    if worker == 0:
      buffer = io.BytesIO()
      np.savez(buffer, **weights)
      staged_files.write_bytes(self._path(generation, 'model.npz'),
                               buffer.getvalue())
    games = _share(self.games_per_generation, workers, worker)
    shares = [(p, n) for p in range(self.processes)
              if (n := _share(games, self.processes, p))]
    if self._pool is None:
      self._pool = host_pool.HostPool(self.processes)
    with self._network(weights, infer, len(shares)) as network:
      work = [(network, self.board_size, self.selfplay, n,
               min(n, self.concurrent_games),
               [self.seed, generation, worker, p], self.engine)
              for p, n in shares]
      results = self._pool.map(minigo_games.selfplay_work, work)
    examples = [(x, pi, outcome) for r in results
                for x, pi, outcome in zip(r['x'], r['pi'], r['outcome'])]
    go_examples.write(
        self._path(generation, f'games-w{worker}.tfrecord.zz'), examples)
    counts = {key: sum(r[key] for r in results)
              for key in ('games', 'moves', 'resigned', 'black_wins')}
    counts['examples'] = len(examples)
    staged_files.write_text(self._path(generation, f'done-w{worker}.json'),
                            json.dumps(counts))
    print(f'generation {generation}: {counts["games"]} self-play games, '
          f'{counts["examples"]} examples, {counts["moves"]} moves, Black '
          f'won {counts["black_wins"]}, {counts["resigned"]} resigned'
          + (f'; leaves evaluated on the devices in {self.served.calls} '
             f'calls, {self.served.rows / self.served.calls:.0f} a call'
             if self.served and self.served.calls else ''), flush=True)

  @contextlib.contextmanager
  def _network(self, weights, infer, processes):
    """What the host processes evaluate leaves with: the weights, or a
    server's endpoint for `infer` on the devices."""
    self.served = None
    if self.inference == 'host' or not processes:
      yield dict(weights)
      return
    if infer is None:
      raise ValueError(
          "models.minigo.data.MiniGoData.inference = 'device' needs the "
          "runtime's device inference (training.task.Generations.produce's "
          "`infer`); this caller passed none. Use 'host'.")

    def policy_value(x):
      outputs = infer(x)
      return outputs['policy'], outputs['value']

    with host_inference.Server(policy_value, clients=processes) as server:
      try:
        yield server.endpoint
      except host_inference.InferenceError as e:
        if server.error is None:
          raise
        raise server.error from e  # Where it happened, with its type.
      self.served = server.counts

  # -- Storage --------------------------------------------------------------

  def _folder(self, generation: int) -> str:
    if not self.directory:
      raise ValueError('models.minigo.data.MiniGoData.directory is not set '
                       '(the runtime sets model_dir/generations).')
    return os.path.join(self.directory, _name(generation))

  def _path(self, generation: int, name: str) -> str:
    return os.path.join(self._folder(generation), name)


def _share(total: int, parts: int, index: int) -> int:
  """Part `index` of `total` split as evenly as whole numbers allow."""
  return total // parts + (1 if index < total % parts else 0)


def _read(path: str) -> str:
  with tf.io.gfile.GFile(path, 'r') as f:
    return f.read()
