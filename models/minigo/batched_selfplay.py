"""MiniGo self-play with every game's tree in one Forest: selfplay.py's
games (Google's concurrent self-play: virtual losses, playout cap
randomisation, root noise, resignation, target pruning), their leaves
selected, expanded and backed up for all games at once.

`play` takes selfplay.play's arguments and yields the same games (moves,
examples, results) from the same seeds and network: each game draws from
its own generator in the same order, and the network sees the same
batches (tests/models/minigo/test_forest.py).
"""

import dataclasses
from typing import Iterator

import numpy as np

from models.minigo import features as go_features
from models.minigo import forest as forest_lib
from models.minigo import selfplay


@dataclasses.dataclass
class Game:
  """One game's state beside its tree (selfplay.Game's, without the
  tree)."""
  slot: int
  rng: np.random.Generator
  resign_threshold: float
  resign_enabled: bool
  symmetry_mix: int
  target_readouts: int
  fastplay: bool = False
  inject_noise_next: bool = False
  examples: list = dataclasses.field(default_factory=list)
  moves: list = dataclasses.field(default_factory=list)
  result: int = 0
  resigned: bool = False

  @property
  def over(self) -> bool:
    return self.result != 0

  @classmethod
  def start(cls, slot: int, options: selfplay.SelfplayOptions,
            rng: np.random.Generator) -> 'Game':
    threshold, enabled, mix = selfplay.game_draws(options, rng)
    return cls(slot=slot, rng=rng, resign_threshold=threshold,
               resign_enabled=enabled, symmetry_mix=mix,
               target_readouts=options.num_readouts)


class Selfplay:
  """Concurrent games in one Forest, moved a round at a time."""

  def __init__(self, evaluate: selfplay.Evaluate, *, size: int,
               concurrent: int, options: selfplay.SelfplayOptions,
               capacity: int = 0, symmetries: bool = True):
    """symmetries: each leaf evaluated under a symmetry of its position's
    hash and its game's draw (self-play), or as it stands."""
    self.evaluate, self.size, self.options = evaluate, size, options
    self.symmetries = symmetries
    # A search adds a node a readout; with fast moves the tree also keeps
    # their subtrees until the next full search clears it.
    capacity = capacity or 4 * (options.num_readouts
                                + 4 * options.fastplay_readouts) + 64
    self.forest = forest_lib.Forest(
        size=size, games=concurrent, capacity=capacity,
        options=options.search, komi=options.komi, superko=options.superko)
    self.free = list(range(concurrent))

  def start(self, rng: np.random.Generator) -> Game:
    slot = self.free.pop(0)
    self.forest.new_games([slot])
    return Game.start(slot, self.options, rng)

  def round(self, playing: list[Game]) -> None:
    """One round: each game's leaves (up to its virtual losses), one
    evaluation of all of them, then the moves whose searches are done."""
    self.search(playing)
    forest = self.forest
    roots = forest.root[[game.slot for game in playing]]
    ready = forest.node_n(roots) >= [game.target_readouts for game in playing]
    for game, searched in zip(playing, ready.tolist()):
      while searched and not game.over and self._maybe_play_move(game):
        pass

  def search(self, playing: list[Game]) -> None:
    """A round's search: each game's leaves (up to its virtual losses,
    short of its target_readouts), one evaluation of all of them, each
    expanded and backed up."""
    forest, options = self.forest, self.options
    # A selection adds at most a node; a round selects its leaves and the
    # game-over leaves it scores on the way, at most one a readout still
    # to do. No node may move while its leaf is queued.
    slots = np.array([game.slot for game in playing])
    left = np.array([game.target_readouts for game in playing]) - (
        forest.node_n(forest.root[slots]))
    forest.reserve(slots, options.virtual_losses + np.maximum(left, 0) + 1)
    for game in playing:
      root = forest.root[game.slot]
      if game.inject_noise_next and forest.expanded[root]:
        game.inject_noise_next = False
        forest.inject_noise(game.slot, game.rng.dirichlet(
            [options.dirichlet_alpha] * forest.moves), options.noise_mix)
    queued = self._queue_leaves(playing)
    for game, leaves in zip(playing, queued):
      if (leaves and leaves[0] == forest.root[game.slot]
          and not game.fastplay):
        game.inject_noise_next = True  # Once the root is expanded.
    batch = [(game, leaf) for game, leaves in zip(playing, queued)
             for leaf in leaves]
    if batch:
      policies, values = self._evaluate(batch)
      # Each game's j-th leaf together, in the games' own order.
      start, rows = 0, []
      for leaves in queued:
        rows.append(list(range(start, start + len(leaves))))
        start += len(leaves)
      for j in range(max(map(len, queued))):
        at = [r[j] for r in rows if len(r) > j]
        leaves = np.array([batch[i][1] for i in at])
        forest.expand(leaves, policies[at], values[at])
        forest.revert_virtual_loss(leaves)

  def _queue_leaves(self, playing: list[Game]) -> list[list[int]]:
    """selfplay.queue_leaves for every game, a leaf of each at a time."""
    forest, limit = self.forest, self.options.virtual_losses
    queued = [[] for _ in playing]
    slots = np.array([game.slot for game in playing], np.int64)
    targets = np.array([game.target_readouts for game in playing])
    counts = np.zeros(len(playing), np.int64)
    going = np.arange(len(playing))
    while len(going):
      leaves = forest.select_leaves(slots[going])
      over = forest.game_over(leaves)
      if over.any():
        scores = forest.boards(leaves[over]).score()
        forest.backup(leaves[over], np.where(scores > 0, 1.0, -1.0))
      forest.add_virtual_loss(leaves[~over])
      for i, leaf in zip(going[~over].tolist(), leaves[~over].tolist()):
        queued[i].append(leaf)
      counts[going[~over]] += 1
      roots = forest.root[slots[going]]
      at_root = ~over & (leaves == roots)
      done = (at_root | (counts[going] >= limit)
              | (forest.node_n(roots) >= targets[going]))
      going = going[~done]
    return queued

  def _evaluate(self, batch):
    """(policies, values) of [(game, leaf)]: features under each leaf's
    symmetry, one call, each policy mapped back."""
    forest = self.forest
    leaves = np.array([leaf for _, leaf in batch])
    boards = forest.boards(leaves)
    forest.ensure_legal(leaves)  # For their expansion, all at once.
    x = boards.features()
    names = np.array([
        selfplay.symmetry(int(forest.hash[leaf]), game.symmetry_mix)
        if self.symmetries else 'identity' for game, leaf in batch])
    for name in set(names.tolist()) - {'identity'}:
      at = names == name
      x[at] = go_features.apply_to_batch(name, x[at])
    policies, values = self.evaluate(x)
    policies = np.array(policies)
    size = self.size
    for name in set(names.tolist()) - {'identity'}:
      at = names == name
      grids = policies[at, :-1].reshape(-1, size, size)
      policies[at, :-1] = go_features.apply_to_batch(
          go_features.INVERSES[name], grids).reshape(-1, size * size)
    return policies, np.asarray(values)

  def _maybe_play_move(self, game: Game) -> bool:
    """selfplay.Game.maybe_play_move on the game's tree."""
    forest, options, g = self.forest, self.options, game.slot
    root = int(forest.root[g])
    n = int(forest.node_n([root])[0])
    if n < game.target_readouts:
      return False
    to_play = int(forest.to_play[root])
    q = float(forest.node_w([root])[0]) / (1 + n) * to_play
    if game.resign_enabled and q < game.resign_threshold:
      game.result, game.resigned = -to_play, True
    else:
      move = forest.pick_move(g, game.rng)
      if not game.fastplay:
        if options.target_pruning:
          forest.reshape_final_visits(g)
        game.examples.append(selfplay.Example(
            forest.boards([root]).features()[0], forest.search_pi(g)))
      game.moves.append(move)
      forest.play_move(g, move)
      root = int(forest.root[g])
      if forest.game_over([root])[0]:
        game.result = 1 if forest.boards([root]).score()[0] > 0 else -1
    if selfplay.after_move(game, options, int(forest.node_n([root])[0])):
      forest.clear_subtrees(g)
    return True


def play(evaluate: selfplay.Evaluate, *, size: int, games: int,
         concurrent: int, options: selfplay.SelfplayOptions, seed: int,
         capacity: int = 0) -> Iterator[Game]:
  """selfplay.play with one Forest: plays `games` games, `concurrent` at a
  time; yields each game when it ends. `capacity`: node slots a game (0:
  enough for its searches)."""
  rng = np.random.default_rng(seed)
  runner = Selfplay(evaluate, size=size, concurrent=min(concurrent, games),
                    options=options, capacity=capacity)
  started, playing = 0, []
  while playing or started < games:
    while len(playing) < concurrent and started < games:
      playing.append(runner.start(np.random.default_rng(
          rng.integers(2**63))))
      started += 1
    runner.round(playing)
    still = []
    for game in playing:
      if game.over:
        runner.free.append(game.slot)
        yield game
      else:
        still.append(game)
    playing = still
