"""MiniGo's Monte Carlo tree search, as Google's v0.7 C++ self-play runs it.

A line-by-line port of cc/mcts_tree.{h,cc} of their submission (the
Python mcts.py beside it differs: it initialises a child's value to its
parent's without the penalty, and selects with sqrt(max(1, N - 1)) but
picks by N alone):

- A node's edges hold its children's N (visits), W (summed values, Black's
  view: +1 a Black win), P (prior) and the prior before noise.
- Selection: argmax over moves of Q * to_play + U - 1000 * illegal, with
  Q = W / (1 + N) and U = U_scale * sqrt(max(1, N_parent - 1)) * P / (1 + N),
  U_scale = 2 * (log((1 + N_parent + 19652) / 19652) + 1.25); an illegal
  argmax (every score -1000 or less) becomes the pass; `allow_pass=False`
  scores the pass -100000 (and so does `pass_when_settled`, ours, while
  the mover has a legal move that does not fill its own eye; with
  `settled_by_territory`, also ours, a move in either side's territory
  counts as such a fill: the pass is read once the board is divided).
- Expansion (IncorporateResults): the policy renormalised over the legal
  moves; every child's W starts at the network's value less
  value_init_penalty towards the player to move's loss (clamped to [-1, 1]),
  then the value is backed up.
- Virtual loss: W of each edge from the leaf to the root moves by the
  to-play sign of the node below it (a loss for the player choosing it);
  reverted when the inference comes back. N is not touched.
- Root noise: Dirichlet noise over the legal moves, mixed in at noise_mix.
- Move choice: for the first soft_pick_cutoff moves, sampled in proportion
  to N^policy_softmax_temp; then the most visited (ties broken by action
  score). Policy targets: N (^temp while soft-picking), normalised; with
  target pruning (ReshapeFinalVisits) the visits exploration alone
  explains are removed first.

Left out: pass-alive regions (Benson's algorithm; the C++ restricts moves in
them once the opponent has passed 4 times in a row, and ends a game whose
whole board is pass-alive) and the inference cache (a speed-up).
"""

import dataclasses
import math

import numpy as np

from models.minigo import go

C_PUCT_BASE = 19652.0
C_PUCT_INIT = 1.25


def u_scale(n: int) -> float:
  """The exploration scale of a node with `n` visits (U_scale)."""
  return 2.0 * (math.log((1.0 + n + C_PUCT_BASE) / C_PUCT_BASE)
                + C_PUCT_INIT)


def action_scores(child_w, child_n, child_p, to_play, u_common, illegal):
  """Q * to_play + U - 1000 * illegal over a node's edges: arrays [moves]
  with a Python to_play and u_common, or [nodes, moves] with to_play
  [nodes, 1] int8 and u_common [nodes, 1] float32 (the same float32
  products, each row equal to its node's alone)."""
  return (child_w * to_play + u_common * child_p) / (1 + child_n) - illegal


def most_visited(child_n, child_w, child_p, to_play: int, n: int,
                 illegal) -> int:
  """GetMostVisitedMove of a node's edges (ties broken by action score)."""
  best = np.flatnonzero(child_n == child_n.max())
  if len(best) == 1:
    return int(best[0])
  u_common = u_scale(n) * math.sqrt(1.0 + n)
  scores = action_scores(child_w, child_n, child_p, to_play, u_common,
                         illegal)[best]
  return int(best[int(np.argmax(scores))])


def reshaped_visits(child_n, child_w, child_p, to_play: int, n: int,
                    illegal) -> np.ndarray:
  """ReshapeFinalVisits: a root's visits with those exploration alone
  explains pruned (each move but the best keeps only the visits its action
  score still needs to stay below the best's)."""
  best = most_visited(child_n, child_w, child_p, to_play, n, illegal)
  u_common = u_scale(n) * math.sqrt(1.0 + n)
  scores = action_scores(child_w, child_n, child_p, to_play, u_common,
                         illegal)
  best_score = scores[best]
  q = child_w / (1 + child_n) * to_play
  with np.errstate(divide='ignore', invalid='ignore'):
    needed = -(u_scale(n) * child_p * math.sqrt(n)) / (q - best_score)
  # C++: max(0, min(N, (int) needed)); the float's cast truncates.
  needed = np.nan_to_num(needed, nan=0.0, posinf=2**31 - 1, neginf=-2**31)
  pruned = np.maximum(0, np.minimum(child_n,
                                    np.trunc(needed).astype(np.int64)))
  pruned[best] = child_n[best]
  if not (pruned > 0).any():
    pruned[-1] = 1  # The pass.
  return pruned


def soft_pick(child_n, temp: float, rng: np.random.Generator,
              pass_move: int) -> int:
  """SampleCdf over the points' visits ^ temp (the pass when none)."""
  weights = np.power(child_n[:-1].astype(np.float64), temp)
  cdf = np.cumsum(weights)
  if cdf[-1] == 0:
    return pass_move
  # The first entry above a uniform draw of the total.
  return int(np.searchsorted(cdf, rng.uniform() * cdf[-1], 'right'))


def visits_policy(child_n, soft: bool, temp: float) -> np.ndarray:
  """The policy target: visits (^temp while soft-picking), normalised."""
  n = child_n.astype(np.float32)
  if soft:
    n = np.power(n, np.float32(temp))
  total = n.sum()
  if total <= 0:
    raise ValueError('search_pi of a root without visits.')
  return n / total


def illegal_penalty(legal: np.ndarray) -> np.ndarray:
  return np.where(legal, 0.0, 1000.0).astype(np.float32)


def settled(board, to_play, legal, size: int, territory=None) -> np.ndarray:
  """[...] bool: may the mover pass (SearchOptions.pass_when_settled)?
  Yes when every legal move but the pass fills one of its own eyes (each
  neighbour its own stone) or, given the territory (go.Position.territory:
  each empty point's owner, 0 if none), lies in either side's territory:
  the board is divided, every empty region bordered by one colour.

  board [..., points], to_play [...], legal [..., points + 1]."""
  if territory is not None:
    return ~(legal[..., :-1] & (territory == 0)).any(-1)
  board = np.asarray(board)
  to_play = np.asarray(to_play)[..., None]
  mine = np.concatenate([board == to_play,
                         np.ones(board.shape[:-1] + (1,), bool)], -1)
  movable = legal[..., :-1] & ~mine[..., go.neighbour_table(size)].all(-1)
  return ~movable.any(-1)


@dataclasses.dataclass(frozen=True)
class SearchOptions:
  """The tree's options (mcts_tree.h's Options; values: Google's v0.7
  self-play flags, ml_perf/flags/19/selfplay.flags)."""
  value_init_penalty: float = 0.2
  policy_softmax_temp: float = 0.98
  soft_pick_enabled: bool = True
  # Moves played by soft pick: the C++ default, (N * N / 12) rounded down to
  # even (30 on 19x19), when 0.
  soft_pick_cutoff: int = 0
  allow_pass: bool = True
  # Not Google's (their searches pass freely): the pass is read and played
  # only when every other legal move fills one of the mover's own eyes
  # (each neighbour its own stone). For small boards searched shallowly,
  # where a free pass is exploited (docs/minigo.md).
  pass_when_settled: bool = False
  # Ours too: with pass_when_settled, a move into either side's territory
  # (an empty region one colour alone borders) counts as an own eye's: the
  # pass is read once the board is divided, not only when it is filled to
  # single eyes, so games end sooner (docs/minigo.md).
  settled_by_territory: bool = False

  def cutoff(self, size: int) -> int:
    return self.soft_pick_cutoff or (size * size // 12) // 2 * 2


class Node:
  """A position in the tree; its own N and W live in its parent's edges
  (the root's in the tree's)."""

  __slots__ = ('parent', 'move', 'position', 'legal', 'is_expanded',
               'child_N', 'child_W', 'child_P', 'original_P', 'children',
               'stats', 'virtual_losses', '_settled', '_illegal')

  def __init__(self, position: go.Position, parent=None, move: int = -1,
               stats=None):
    self.parent, self.move, self.position = parent, move, position
    self.legal = position.legal_moves()
    moves = position.pass_move + 1
    self.child_N = np.zeros(moves, np.int32)
    self.child_W = np.zeros(moves, np.float32)
    self.child_P = np.zeros(moves, np.float32)
    self.original_P = np.zeros(moves, np.float32)
    self.children = {}
    self.is_expanded = False
    self.virtual_losses = 0
    self._settled = self._illegal = None
    # (N array, W array, index) of this node's own edge.
    self.stats = stats if stats is not None else (
        (parent.child_N, parent.child_W, move))

  @property
  def N(self) -> int:  # pylint: disable=invalid-name
    n, _, i = self.stats
    return int(n[i])

  @property
  def W(self) -> float:  # pylint: disable=invalid-name
    _, w, i = self.stats
    return float(w[i])

  @property
  def Q(self) -> float:  # pylint: disable=invalid-name
    return self.W / (1 + self.N)

  @property
  def Q_perspective(self) -> float:  # pylint: disable=invalid-name
    """Q from the player to move's view."""
    return self.Q * self.position.to_play

  def U_scale(self) -> float:  # pylint: disable=invalid-name
    return u_scale(self.N)

  def child_Q(self) -> np.ndarray:  # pylint: disable=invalid-name
    return self.child_W / (1 + self.child_N)

  def illegal(self) -> np.ndarray:
    if self._illegal is None:
      self._illegal = illegal_penalty(self.legal)
    return self._illegal

  def action_scores(self, u_common: float) -> np.ndarray:
    return action_scores(self.child_W, self.child_N, self.child_P,
                         self.position.to_play, u_common, self.illegal())

  def settled(self, by_territory: bool = False) -> bool:
    """May the mover pass (the module's `settled`)? Cached: a tree asks
    with one `by_territory` throughout."""
    if self._settled is None:
      position = self.position
      self._settled = bool(settled(
          position.board, position.to_play, self.legal, position.size,
          position.territory() if by_territory else None))
    return self._settled

  def game_over(self) -> bool:
    return (self.position.is_game_over()
            or self.position.n >= 2 * self.position.size ** 2)

  def child(self, move: int) -> 'Node':
    """MaybeAddChild."""
    found = self.children.get(move)
    if found is None:
      found = self.children[move] = Node(self.position.play(move), self,
                                         move)
    return found

  def most_visited_move(self) -> int:
    """GetMostVisitedMove (without pass-alive restriction)."""
    return most_visited(self.child_N, self.child_W, self.child_P,
                        self.position.to_play, self.N, self.illegal())


class Tree:
  """One game's search tree (MctsTree)."""

  def __init__(self, position: go.Position,
               options: SearchOptions = SearchOptions()):
    self.options = options
    self._root_stats = (np.zeros(1, np.int32), np.zeros(1, np.float32), 0)
    self.root = Node(position, stats=self._root_stats)

  @property
  def to_play(self) -> int:
    return self.root.position.to_play

  def is_game_over(self) -> bool:
    return self.root.game_over()

  def select_leaf(self) -> Node:
    node = self.root
    while node.is_expanded:
      u_common = node.U_scale() * math.sqrt(max(1, node.N - 1))
      scores = node.action_scores(u_common)
      if not self.options.allow_pass or (
          self.options.pass_when_settled
          and not node.settled(self.options.settled_by_territory)):
        scores[node.position.pass_move] = -100000.0
      best = int(np.argmax(scores))
      if not node.legal[best]:
        best = node.position.pass_move
      node = node.child(best)
    return node

  def _to_root(self, leaf: Node):
    node = leaf
    while True:
      yield node
      if node is self.root:
        return
      node = node.parent

  def add_virtual_loss(self, leaf: Node) -> None:
    for node in self._to_root(leaf):
      node.virtual_losses += 1
      _, w, i = node.stats
      w[i] += node.position.to_play

  def revert_virtual_loss(self, leaf: Node) -> None:
    for node in self._to_root(leaf):
      node.virtual_losses -= 1
      _, w, i = node.stats
      w[i] -= node.position.to_play

  def incorporate_results(self, leaf: Node, policy: np.ndarray,
                          value: float) -> None:
    """Expands the leaf with the network's policy [moves] and value
    (Black's view, in [-1, 1])."""
    if leaf.is_expanded:
      return
    legal = leaf.legal
    total = float(policy[legal].sum(dtype=np.float32))
    scale = 1.0 / total if total > np.finfo(np.float32).tiny else 0.0
    probs = np.where(legal, policy * scale, 0).astype(np.float32)
    reduction = self.options.value_init_penalty * leaf.position.to_play
    reduced = min(1.0, max(-1.0, value - reduction))
    leaf.is_expanded = True
    leaf.original_P = probs
    leaf.child_P = probs.copy()
    leaf.child_W += np.float32(reduced)
    self.backup_value(leaf, value)

  def incorporate_end_game_result(self, leaf: Node, value: float) -> None:
    self.backup_value(leaf, value)

  def backup_value(self, leaf: Node, value: float) -> None:
    for node in self._to_root(leaf):
      n, w, i = node.stats
      w[i] += value
      n[i] += 1

  def inject_noise(self, noise: np.ndarray, mix: float) -> None:
    root = self.root
    legal_noise = np.where(root.legal, noise, 0)
    total = float(legal_noise.sum())
    scale = 1.0 / total if total > np.finfo(np.float32).tiny else 0.0
    root.child_P = ((1 - mix) * root.child_P
                    + mix * scale * legal_noise).astype(np.float32)

  def _soft_picking(self) -> bool:
    return (self.options.soft_pick_enabled and self.root.position.n
            < self.options.cutoff(self.root.position.size))

  def pick_move(self, rng: np.random.Generator) -> int:
    if self._soft_picking():
      return soft_pick(self.root.child_N, self.options.policy_softmax_temp,
                       rng, self.root.position.pass_move)
    move = self.root.most_visited_move()
    return move if self.root.legal[move] else self.root.position.pass_move

  def search_pi(self) -> np.ndarray:
    """The policy target: visits (^temp while soft-picking), normalised."""
    return visits_policy(self.root.child_N, self._soft_picking(),
                         self.options.policy_softmax_temp)

  def reshape_final_visits(self) -> None:
    """Target pruning (`reshaped_visits`)."""
    root = self.root
    root.child_N[:] = reshaped_visits(
        root.child_N, root.child_W, root.child_P, root.position.to_play,
        root.N, root.illegal())

  def play_move(self, move: int) -> None:
    """Descends to the move's child, dropping the other subtrees."""
    if self.is_game_over() or not self.root.legal[move]:
      raise go.IllegalMove(f'{move} in a tree at move {self.root.position.n}'
                           f' (game over: {self.is_game_over()}).')
    child = self.root.child(move)
    self.root.children = {move: child}
    self.root = child

  def clear_subtrees(self) -> None:
    """ClearSubtrees: the root's children and statistics dropped, its own N
    and W too (a full search after a fast one starts afresh; the C++ sets
    the next move's readout target before clearing, so that search runs
    the old N more readouts: SelfPlayer.play_move keeps that)."""
    root = self.root
    root.children = {}
    for array in (root.child_N, root.child_W, root.child_P, root.original_P):
      array[:] = 0
    n, w, i = root.stats
    n[i], w[i] = 0, 0
    root.is_expanded = False
