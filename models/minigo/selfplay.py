"""MiniGo self-play: many games searched at once, their leaves evaluated in
one batch (the point of Google's C++ concurrent self-play: each of their
threads played 64 games, every game queueing up to 4 leaves under virtual
loss per batch, and the TPU evaluated the batch).

A port of cc/concurrent_selfplay.cc's SelfplayGame (SelectLeaves,
ProcessInferences, MaybePlayMove) and the loop that drives it:

- A move searches until the root has `num_readouts` more visits (the C++
  sets the target before a full search clears the tree, so such a search
  runs its old visits over again); with probability fastplay_frequency a
  move is a fast one (fastplay_readouts, no noise, not a training example:
  playout cap randomisation).
- Dirichlet noise at the root of every full search, once it is expanded.
- Each leaf is evaluated under one of the 8 symmetries (chosen from its
  stone hash and the game's own random mix, as GetInferenceSymmetry); its
  policy is mapped back.
- Resignation below a per-game threshold drawn from
  [min_resign_threshold, max_resign_threshold) (Google's v0.7: -1 to -0.9;
  disabled in disable_resign_pct of the games).
- A full search's move is a training example: the root's features, the
  search's policy (target-pruned first) and, when the game ends, its
  result (+1 Black won, -1 White: the value target, Black's view).
"""

import dataclasses
from typing import Callable, Iterator

import numpy as np

from models.minigo import go
from models.minigo import features as go_features
from models.minigo import mcts

# features [B, size, size, 13] uint8 -> (policy [B, size*size + 1]
# probabilities, value [B] in [-1, 1], Black's view).
Evaluate = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

_SYMMETRIES = sorted(go_features.SYMMETRIES)
_MASK = 2**64 - 1
_LARGE_PRIME = 7_046_029_254_386_353_131


@dataclasses.dataclass(frozen=True)
class SelfplayOptions:
  """Defaults: Google's v0.7 19x19 self-play (ml_perf/flags/19/
  selfplay.flags and train_loop.py's mlperf_* flags)."""
  num_readouts: int = 800
  fastplay_frequency: float = 0.75
  fastplay_readouts: int = 80
  virtual_losses: int = 4
  dirichlet_alpha: float = 0.03
  noise_mix: float = 0.3
  target_pruning: bool = True
  min_resign_threshold: float = -1.0
  max_resign_threshold: float = -0.9
  disable_resign_pct: float = 0.0
  komi: float = go.KOMI
  superko: bool = True
  search: mcts.SearchOptions = mcts.SearchOptions()


def symmetry(position_hash: int, mix: int) -> str:
  """A leaf's inference symmetry (GetInferenceSymmetry): its stone hash
  and its game's mix, mixed by murmur3's 64-bit finaliser."""
  x = (position_hash * _LARGE_PRIME + mix) & _MASK
  for shift, factor in ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53)):
    x = ((x ^ (x >> shift)) * factor) & _MASK
  x ^= x >> 33
  return _SYMMETRIES[x % len(_SYMMETRIES)]


def game_draws(options: 'SelfplayOptions', rng: np.random.Generator):
  """A new game's draws, in the C++ order: (resign threshold, resignation
  enabled, symmetry mix)."""
  # Random::Uniform(a, b) = a + (b - a) * u, a > b allowed.
  a, b = (abs(options.min_resign_threshold),
          abs(options.max_resign_threshold))
  threshold = -(a + (b - a) * rng.uniform())
  enabled = rng.uniform() >= options.disable_resign_pct
  return threshold, enabled, int(rng.integers(2**62))


@dataclasses.dataclass
class Example:
  features: np.ndarray  # [size, size, 13] uint8: the root's.
  pi: np.ndarray  # [size * size + 1] float32: the search's policy.
  value: float = 0.0  # The game's result, Black's view.


class Game:
  """One self-play game and its tree (SelfplayGame)."""

  def __init__(self, size: int, options: SelfplayOptions,
               rng: np.random.Generator):
    self.options, self.rng = options, rng
    self.tree = mcts.Tree(go.Position(size, komi=options.komi,
                                      superko=options.superko),
                          options.search)
    (self.resign_threshold, self.resign_enabled,
     self.symmetry_mix) = game_draws(options, rng)
    self.fastplay = False
    self.inject_noise_next = False
    self.target_readouts = options.num_readouts
    self.examples: list[Example] = []
    self.moves: list[int] = []
    self.result = 0  # Until over.
    self.resigned = False

  @property
  def over(self) -> bool:
    return self.result != 0

  def symmetry(self, node: mcts.Node) -> str:
    return symmetry(node.position.hash, self.symmetry_mix)

  def select_leaves(self) -> list[mcts.Node]:
    """Leaves to evaluate, each under a virtual loss (at most
    virtual_losses; game-over leaves are scored on the spot)."""
    tree = self.tree
    if self.inject_noise_next and tree.root.is_expanded:
      self.inject_noise_next = False
      tree.inject_noise(
          self.rng.dirichlet([self.options.dirichlet_alpha]
                             * len(tree.root.legal)), self.options.noise_mix)
    queued = queue_leaves(tree, self.options.virtual_losses,
                          self.target_readouts)
    if queued and queued[0] is tree.root and not self.fastplay:
      self.inject_noise_next = True  # Once the root is expanded.
    return queued

  def process(self, leaves, policies, values) -> None:
    for leaf, policy, value in zip(leaves, policies, values):
      self.tree.incorporate_results(leaf, policy, float(value))
      self.tree.revert_virtual_loss(leaf)

  def maybe_play_move(self) -> bool:
    """Plays a move once the search has its readouts; True if it did."""
    tree, options = self.tree, self.options
    if tree.root.N < self.target_readouts:
      return False
    if self.resign_enabled and (tree.root.Q_perspective
                                < self.resign_threshold):
      self.result, self.resigned = -tree.to_play, True
    else:
      move = tree.pick_move(self.rng)
      if not self.fastplay:
        if options.target_pruning:
          tree.reshape_final_visits()
        self.examples.append(Example(
            go_features.features(tree.root.position), tree.search_pi()))
      self.moves.append(move)
      tree.play_move(move)
      if tree.is_game_over():
        self.result = 1 if tree.root.position.score() > 0 else -1
    if after_move(self, options, tree.root.N):
      tree.clear_subtrees()
    return True


def after_move(game, options: SelfplayOptions, root_n: int) -> bool:
  """A game's bookkeeping once a move is made or it ended (Game's, and
  batched_selfplay.Game's): an ended game's examples take its result;
  otherwise the next search is set up (fast or full, root noise, its
  readout target from the new root's `root_n` visits). Returns whether the
  tree is to be cleared (a full search when fast moves exist)."""
  if game.over:
    for example in game.examples:
      example.value = float(game.result)
    return False
  game.fastplay = (options.fastplay_frequency > 0 and
                   game.rng.uniform() < options.fastplay_frequency)
  game.inject_noise_next = not game.fastplay
  game.target_readouts = root_n + (
      options.fastplay_readouts if game.fastplay else options.num_readouts)
  return not game.fastplay and options.fastplay_frequency > 0


def queue_leaves(tree: mcts.Tree, limit: int, target: int) -> list:
  """SelectLeaves: up to `limit` leaves, each under a virtual loss (a
  game-over leaf is scored on the spot instead); stops early at an
  unexpanded root or when the root has `target` visits."""
  queued = []
  while True:
    leaf = tree.select_leaf()
    if leaf.game_over():
      tree.incorporate_end_game_result(
          leaf, 1.0 if leaf.position.score() > 0 else -1.0)
    else:
      tree.add_virtual_loss(leaf)
      queued.append(leaf)
      if leaf is tree.root:
        break
    if len(queued) >= limit or tree.root.N >= target:
      break
  return queued


def evaluate_leaves(pairs, evaluate: Evaluate):
  """(policies, values) of [(game, leaf)]: each leaf's features under its
  game's symmetry for it, one batch, each policy mapped back."""
  symmetries = [game.symmetry(leaf) for game, leaf in pairs]
  x = np.stack([go_features.apply_to_features(s, go_features.features(
      leaf.position)) for s, (_, leaf) in zip(symmetries, pairs)])
  policies, values = evaluate(x)
  return [go_features.apply_to_policy(go_features.INVERSES[s], p)
          for s, p in zip(symmetries, policies)], values


def play(evaluate: Evaluate, *, size: int, games: int, concurrent: int,
         options: SelfplayOptions, seed: int) -> Iterator[Game]:
  """Plays `games` games, `concurrent` at a time, every round's leaves of
  all of them evaluated in one batch; yields each game when it ends."""
  rng = np.random.default_rng(seed)
  started, playing = 0, []
  while playing or started < games:
    while len(playing) < concurrent and started < games:
      playing.append(Game(size, options, np.random.default_rng(
          rng.integers(2**63))))
      started += 1
    queued = [(game, game.select_leaves()) for game in playing]
    batch = [(game, leaf) for game, leaves in queued for leaf in leaves]
    if batch:
      policies, values = evaluate_leaves(batch, evaluate)
      start = 0
      for game, leaves in queued:
        end = start + len(leaves)
        game.process(leaves, policies[start:end], values[start:end])
        start = end
    still = []
    for game in playing:
      while not game.over and game.maybe_play_move():
        pass
      if game.over:
        yield game
      else:
        still.append(game)
    playing = still
