"""The MiniGo task (MLPerf Training v0.7 `minigo`): a dual network trained on
its own self-play games, generation by generation, until a generation wins
`target_win_rate` of its games against the target.

Google's v0.7 (dual_net.py, train_loop.py): the loss is the policy's
softmax cross-entropy against the search's policy plus value_cost_weight
(0.5) times the value's squared error against the game's result, each a
mean over the core's batch, with CrossShardOptimizer averaging the cores'
gradients (the share of each replica's mean); L2 1e-4 on every variable but
biases and batch norm's betas (training.optimizers.SgdMomentum with
`is_l2_exempt`); momentum 0.9; the learning rate piecewise constant in
steps. The data (models/minigo/data.py) is the generations' games; the
quality (models/minigo/evaluation.py) the games against the target.
"""

import tensorflow as tf

from models.minigo import model as minigo_lib
from models.minigo import data as minigo_data
from models.minigo import evaluation as minigo_evaluation
from models.minigo import games as minigo_games
from training import losses


def is_l2_exempt(name: str) -> bool:
  """dual_net.py's L2 skips variables named 'bias' or 'beta'."""
  return name.split(':')[0].endswith(('/bias', '/beta'))


class MiniGoTask:
  """Go by self-play, judged by games against a target. Implements
  training.task.Task, with training.task.Generations (its data) and
  training.task.OwnEvaluation."""

  mlperf_benchmark = 'minigo'
  quality_name = 'win rate against the target'
  quality_tag = 'win_rate'
  eval_sum_names = ()
  eval_output_dtypes = {}
  higher_is_better = True

  def __init__(self, *, model, data: minigo_data.MiniGoData,
               value_cost_weight: float = 0.5, target_win_rate: float = 0.5,
               eval_games: int = 100,
               match: minigo_games.MatchOptions = minigo_games.MatchOptions(),
               eval_processes: int = 2, asynchronous_eval: bool = True,
               parallel_games: int = 64, seed: int = 0):
    """Args:
      model: builds the network (gin: `@models.minigo.model.DualNet`, no call);
        its board size comes from the data.
      data: the generations' games (models/minigo/data.MiniGoData).
      value_cost_weight: the value loss's weight (v0.7: 0.5).
      target_win_rate: the share of games against the target that ends
        the run (MLPerf: 0.5, Google's gating_win_rate).
      eval_games: games each evaluated generation plays (MLPerf: 100).
      match: the evaluation games' settings.
      eval_processes: host processes playing them.
      asynchronous_eval: training goes on while they are played.
      parallel_games: MLPerf's parallel_games key (Google's v0.7: 64
        games a self-play thread); the data's concurrent games here.
      seed: the evaluation games' randomness.
    """
    self._build_model = model
    self.data = data
    self.value_cost_weight = value_cost_weight
    self.target_quality = target_win_rate
    self.eval_games, self.match = eval_games, match
    self.eval_processes = eval_processes
    self.asynchronous_eval = asynchronous_eval
    self.parallel_games = parallel_games
    self.seed = seed

  def build_model(self) -> minigo_lib.DualNet:
    return self._build_model(board_size=self.data.board_size)

  def loss_share(self, model, batch):
    logits, value, updates = model(batch['x'], training=True)
    policy = tf.nn.softmax_cross_entropy_with_logits(
        labels=tf.stop_gradient(batch['pi']), logits=logits)
    value_error = tf.square(value - batch['outcome'])
    per_example = policy + self.value_cost_weight * value_error
    return losses.share_of_replica_mean(per_example), updates

  def make_evaluator(self, model, *, chief: bool, worker_sum):
    return minigo_evaluation.GameEvaluator(
        variables=[*model.trainable_variables, *model.state.values()],
        board_size=self.data.board_size, games=self.eval_games,
        options=self.match, processes=self.eval_processes, seed=self.seed,
        chief=chief, worker_sum=worker_sum,
        generation_of=lambda step: step // self.data.steps_per_generation,
        asynchronous=self.asynchronous_eval)

  def eval_sums(self, model, batch) -> dict:
    raise NotImplementedError('MiniGo is evaluated by games.')

  def eval_outputs(self, model, batch) -> dict:
    raise NotImplementedError('MiniGo is evaluated by games.')

  def host_metric(self) -> None:
    return None

  @staticmethod
  def quality(metrics: dict) -> float:
    return float(metrics['win_rate'])

  def quality_detail(self, metrics: dict) -> str:
    detail = (f'{metrics["wins"]:.0f} of {metrics["games"]:.0f} games won, '
              f'{metrics["mean_moves"]:.0f} moves a game')
    if 'win_rate_as_black' in metrics:
      detail += (f'; as Black {metrics["win_rate_as_black"]:.2f}, as White '
                 f'{metrics["win_rate_as_white"]:.2f}')
    return detail

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    """Google's v0.7 train_loop.py keys (train_batch_size is per core)."""
    del num_replicas
    data, options = self.data, self.data.selfplay
    return {
        'train_batch_size': per_replica_batch_size,
        'filter_amount': data.filter_amount,
        'window_size': data.window,
        'min_selfplay_games_per_generation': data.games_per_generation,
        'num_readouts': options.num_readouts,
        'value_init_penalty': options.search.value_init_penalty,
        'holdout_pct': 0.0,
        'disable_resign_pct': options.disable_resign_pct,
        'resign_threshold': (options.min_resign_threshold +
                             options.max_resign_threshold) / 2,
        'parallel_games': self.parallel_games,
        'virtual_losses': options.virtual_losses,
        'gating_win_rate': self.target_quality,
        'eval_games': self.eval_games,
    }

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    """The generation (Google's log: epoch_num is the model's number)."""
    del global_batch_size
    return step // self.data.steps_per_generation

  def explain_input_error(self, error: Exception) -> str | None:
    if isinstance(error, tf.errors.DataLossError):
      return (f'A self-play record under {self.data.directory} is damaged '
              f'({error.message.splitlines()[0]}); delete that generation\'s '
              'folder and rerun: it is played again.')
    return None

  def serving_fn(self, model):
    """features [b, size, size, 13] uint8 -> policy probabilities and the
    value (Black's view)."""
    size = self.data.board_size

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, size, size, 13], tf.uint8, name='features')])
    def serve(features):
      logits, value, _ = model(features, training=False)
      return {'policy': tf.nn.softmax(logits), 'value': value}

    return serve

  # MiniGo has no MLPerf Inference benchmark.
  inference_model = None
  inference_output = ('policy', 'float32')
  inference_references = ()
  inference_performance_samples = 0
  inference_settings = {}

  @staticmethod
  def inference_inputs(batch: dict) -> dict:
    return {'features': batch['x']}

  @staticmethod
  def inference_quality(responses: dict, references: dict) -> float:
    raise NotImplementedError('MiniGo has no MLPerf Inference benchmark.')
