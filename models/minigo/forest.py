"""MiniGo's search trees for a batch of games, as arrays.

mcts.py's tree (Google's cc/mcts_tree.cc) with the nodes of every game in
fixed-size arrays, as DeepMind's mctx lays them out: game g owns node slots
[g * capacity, (g + 1) * capacity), and a node's position (boards.py's
fields), its legal moves and its edges (children's N, W, P, the prior
before noise, the child's slot) are rows. Selecting a leaf, virtual loss,
expansion and backup run for one leaf of every game at once, a NumPy
operation a tree level; the arithmetic is mcts.py's own functions, and each
game's numbers equal its mcts.Tree's (tests/models/minigo/test_forest.py).

A node's own N and W live in its parent's edge, the first root's in
`root_n`/`root_w`; after a move the new root keeps its parent's edge, as the
C++ keeps the node. A tree that would outgrow its slots is compacted (its
live nodes copied to the front); a cleared tree keeps its root alone. A
node a selection adds holds its parent and move until its position is
asked for (a round's leaves are played out together, for their
evaluation) and its legal moves until it is expanded.
"""

import dataclasses
import math

import numpy as np

from models.minigo import boards as boards_lib
from models.minigo import go
from models.minigo import mcts

_POSITION = ('board', 'history', 'to_play', 'ko', 'passes', 'n', 'hash',
             'groups')
_EDGES = ('child_n', 'child_w', 'child_p', 'original_p')


class Forest:
  """The search trees of `games` games on a size x size board."""

  def __init__(self, *, size: int, games: int, capacity: int,
               options: mcts.SearchOptions = mcts.SearchOptions(),
               komi: float = go.KOMI, superko: bool = True):
    self.size, self.games, self.capacity = size, games, capacity
    self.options, self.komi, self.superko = options, komi, superko
    points, slots = size * size, games * capacity
    self.moves = points + 1
    self.board = np.zeros((slots, points), np.int8)
    self.history = np.zeros((slots, go.HISTORY, points), np.int8)
    self.to_play = np.ones(slots, np.int8)
    self.ko = np.full(slots, -1, np.int32)
    self.passes = np.zeros(slots, np.int32)
    self.n = np.zeros(slots, np.int32)
    self.hash = np.zeros(slots, np.uint64)
    self.groups = np.full((slots, points), points, np.int32)
    # A node made by a selection holds its parent and move; its position
    # is worked out when first asked for (`boards`: all of a round's
    # leaves at once, for their evaluation), its legal moves when it is
    # expanded.
    self.ready = np.zeros(slots, bool)
    self.legal_ready = np.zeros(slots, bool)
    # Whether the mover may pass (SearchOptions.pass_when_settled).
    self.settled = np.zeros(slots, bool)
    self.legal = np.zeros((slots, self.moves), bool)
    self.illegal = np.zeros((slots, self.moves), np.float32)
    self.expanded = np.zeros(slots, bool)
    self.parent = np.full(slots, -1, np.int64)
    self.move = np.full(slots, -1, np.int64)
    self.depth = np.zeros(slots, np.int64)
    self.child_n = np.zeros((slots, self.moves), np.int32)
    self.child_w = np.zeros((slots, self.moves), np.float32)
    self.child_p = np.zeros((slots, self.moves), np.float32)
    self.original_p = np.zeros((slots, self.moves), np.float32)
    self.children = np.full((slots, self.moves), -1, np.int64)
    self.root = np.arange(games, dtype=np.int64) * capacity
    self.root_n = np.zeros(games, np.int32)
    self.root_w = np.zeros(games, np.float32)
    self.next_free = np.ones(games, np.int64)
    # The hashes of each game's arrangements before its root (superko).
    self.seen = np.zeros((games, 8), np.uint64)
    self.seen_count = np.zeros(games, np.int32)
    self.new_games(np.arange(games))

  # -- Nodes -------------------------------------------------------------

  def new_games(self, games) -> None:
    """Starts games (indices) afresh: the empty board at their first
    slot."""
    games = np.asarray(games, np.int64)
    slots = games * self.capacity
    empty = boards_lib.Boards.empty(self.size, len(games), komi=self.komi,
                                    superko=self.superko)
    self._clear_slots(slots)
    self._write(slots, empty)
    self.parent[slots] = -1
    self.move[slots] = -1
    self.depth[slots] = 0
    self.root[games] = slots
    self.root_n[games] = 0
    self.root_w[games] = 0
    self.next_free[games] = 1
    self.seen_count[games] = 0

  def _clear_slots(self, slots) -> None:
    self.expanded[slots] = False
    for name in _EDGES:
      getattr(self, name)[slots] = 0
    self.children[slots] = -1

  def _write(self, slots, boards: boards_lib.Boards,
             legal: bool = True) -> None:
    if boards.groups is None:
      boards = dataclasses.replace(boards, groups=boards.labels())
    for name in _POSITION:
      getattr(self, name)[slots] = getattr(boards, name)
    self.ready[slots] = True
    if legal:
      self._set_legal(slots, boards)

  def _set_legal(self, slots, boards: boards_lib.Boards) -> None:
    legal = boards.legal()
    self.legal[slots] = legal
    self.illegal[slots] = mcts.illegal_penalty(legal)
    self.legal_ready[slots] = True
    if self.options.pass_when_settled:
      self.settled[slots] = mcts.settled(
          boards.board, boards.to_play, legal, self.size,
          boards.territory() if self.options.settled_by_territory else None)

  def _materialize(self, nodes) -> None:
    """Works out the positions of nodes made but not yet played out, from
    their parents' (expanded, so known)."""
    nodes = np.asarray(nodes, np.int64)
    pending = np.unique(nodes[~self.ready[nodes]])
    if len(pending):
      parents = self.parent[pending]
      self._write(pending, self.boards(parents).play(
          self.move[pending], legal=self.legal[parents]), legal=False)

  def ensure_legal(self, nodes) -> None:
    """Works out the legal moves of the nodes that lack them (all of a
    round's leaves at once, before their expansion)."""
    nodes = np.asarray(nodes, np.int64)
    pending = np.unique(nodes[~self.legal_ready[nodes]])
    if len(pending):
      self._set_legal(pending, self.boards(pending))

  def game_of(self, nodes) -> np.ndarray:
    return np.asarray(nodes) // self.capacity

  def boards(self, nodes) -> boards_lib.Boards:
    """The nodes' positions, each with its superko history: its game's
    arrangements before the root and the path from the root to it."""
    nodes = np.asarray(nodes, np.int64)
    self._materialize(nodes)
    games = self.game_of(nodes)
    above = self.depth[nodes] - self.depth[self.root[games]]
    count = self.seen_count[games] if self.superko else np.zeros_like(games)
    width = self.seen.shape[1] + int(above.max(initial=0))
    seen = np.zeros((len(nodes), width), np.uint64)
    if self.superko:
      seen[:, :self.seen.shape[1]] = self.seen[games]
      # The arrangements from the root down to the node's parent, oldest
      # first (their order does not matter to superko).
      rows = np.arange(len(nodes))
      cur = self.parent[nodes]
      for step in range(int(above.max(initial=0))):
        on = step < above
        seen[rows[on], count[on] + above[on] - 1 - step] = self.hash[cur[on]]
        cur = np.where(on, self.parent[np.maximum(cur, 0)], cur)
      count = count + above
    return boards_lib.Boards(
        size=self.size, board=self.board[nodes],
        history=self.history[nodes], to_play=self.to_play[nodes],
        ko=self.ko[nodes], passes=self.passes[nodes], n=self.n[nodes],
        hash=self.hash[nodes], seen=seen, seen_count=count.astype(np.int32),
        komi=self.komi, superko=self.superko, groups=self.groups[nodes])

  def reserve(self, games, counts) -> None:
    """Makes room for counts[i] new nodes in games[i], compacting those
    that lack it. Node slots held outside the forest (leaves being
    evaluated) move in a compaction: call it between searches' rounds."""
    games = np.asarray(games, np.int64)
    counts = np.broadcast_to(np.asarray(counts, np.int64), games.shape)
    short = self.next_free[games] + counts > self.capacity
    for g, count in zip(games[short].tolist(), counts[short].tolist()):
      if self.next_free[g] + count > self.capacity:
        self.compact(g)
        if self.next_free[g] + count > self.capacity:
          raise RuntimeError(
              f'MiniGo search tree of game {g} keeps {self.next_free[g]} '
              f'live nodes and needs {count} more, its capacity is '
              f'{self.capacity}: raise the capacity.')

  def _add_children(self, parents, moves) -> np.ndarray:
    """New nodes for (parent, move) pairs of different games (MaybeAddChild);
    returns their slots (`reserve` made room)."""
    parents = np.asarray(parents, np.int64)
    games = self.game_of(parents)
    if (self.next_free[games] >= self.capacity).any():
      raise RuntimeError('MiniGo search tree out of node slots: reserve '
                         'them before the round.')
    children = games * self.capacity + self.next_free[games]
    self.next_free[games] += 1
    self._clear_slots(children)
    # What the search reads before the position (game over, whose turn).
    passed = moves == self.moves - 1
    self.passes[children] = np.where(passed, self.passes[parents] + 1, 0)
    self.n[children] = self.n[parents] + 1
    self.to_play[children] = -self.to_play[parents]
    self.ready[children] = False
    self.legal_ready[children] = False
    self.parent[children] = parents
    self.move[children] = moves
    self.depth[children] = self.depth[parents] + 1
    self.children[parents, moves] = children
    return children

  def compact(self, game: int) -> dict:
    """Copies the game's live tree (its root and the root's descendants)
    to the front of its slots, breadth first; returns {old slot: new}."""
    start = game * self.capacity
    self._materialize([self.root[game]])  # Its parent is not kept.
    order, frontier = [int(self.root[game])], [int(self.root[game])]
    while frontier:
      kids = self.children[frontier]
      frontier = kids[kids >= 0].tolist()
      order += frontier
    order = np.array(order, np.int64)
    new = start + np.arange(len(order))
    where = np.full(self.capacity, -1, np.int64)
    where[order - start] = new
    root_n, root_w = self.node_n([order[0]])[0], self.node_w([order[0]])[0]
    for name in (*_POSITION, 'ready', 'legal_ready', 'legal', 'illegal',
                 'settled',
                 'expanded', 'move', 'depth', *_EDGES):
      array = getattr(self, name)
      array[new] = array[order]
    kids = self.children[order]
    self.children[new] = np.where(kids >= 0, where[np.maximum(kids - start,
                                                               0)], -1)
    self.parent[new] = np.where(self.parent[order] >= 0,
                                where[np.maximum(self.parent[order] - start,
                                                 0)], -1)
    self.parent[new[0]] = -1  # The root's own N and W: in root_n/root_w.
    self.root_n[game], self.root_w[game] = root_n, root_w
    self.root[game] = new[0]
    self.next_free[game] = len(order)
    return dict(zip(order.tolist(), new.tolist()))

  # -- Statistics --------------------------------------------------------

  def node_n(self, nodes) -> np.ndarray:
    """N of each node (its parent's edge; a first root's own)."""
    nodes = np.asarray(nodes, np.int64)
    parent = self.parent[nodes]
    is_root = parent < 0
    out = self.child_n[np.maximum(parent, 0), np.maximum(self.move[nodes],
                                                         0)]
    return np.where(is_root, self.root_n[self.game_of(nodes)], out)

  def node_w(self, nodes) -> np.ndarray:
    nodes = np.asarray(nodes, np.int64)
    parent = self.parent[nodes]
    out = self.child_w[np.maximum(parent, 0), np.maximum(self.move[nodes],
                                                         0)]
    return np.where(parent < 0, self.root_w[self.game_of(nodes)], out)

  def _add_to_path(self, leaves, dn: int, dw) -> None:
    """Adds dn to N and dw (per leaf: float32, or 'to_play': each node's
    own to_play, signed) to W of every node from each leaf to its root;
    the leaves are of different games."""
    cur = np.asarray(leaves, np.int64)
    sign = None
    if isinstance(dw, str):
      sign = {'to_play': 1, '-to_play': -1}[dw]
    games = self.game_of(cur)
    roots = self.root[games]
    live = np.ones(len(cur), bool)
    while live.any():
      nodes = cur[live]
      add = (np.float32(sign) * self.to_play[nodes].astype(np.float32)
             if sign is not None else dw[live])
      parent, move = self.parent[nodes], self.move[nodes]
      edge = parent >= 0
      if dn:
        self.child_n[parent[edge], move[edge]] += dn
        self.root_n[games[live][~edge]] += dn
      self.child_w[parent[edge], move[edge]] += add[edge]
      self.root_w[games[live][~edge]] += add[~edge]
      done = nodes == roots[live]
      idx = np.flatnonzero(live)
      live[idx[done]] = False
      cur[idx[~done]] = parent[~done]

  def add_virtual_loss(self, leaves) -> None:
    self._add_to_path(leaves, 0, 'to_play')

  def revert_virtual_loss(self, leaves) -> None:
    self._add_to_path(leaves, 0, '-to_play')

  def backup(self, leaves, values) -> None:
    """W += value (Black's view) and N += 1 from each leaf to its root."""
    self._add_to_path(leaves, 1, np.asarray(values, np.float32))

  # -- Search ------------------------------------------------------------

  def game_over(self, nodes) -> np.ndarray:
    nodes = np.asarray(nodes, np.int64)
    return (self.passes[nodes] >= 2) | (self.n[nodes] >= 2 * self.size**2)

  def select_leaves(self, games) -> np.ndarray:
    """One leaf for each of `games` (indices), descending from its root by
    the action scores and adding the child a move reaches first (mcts.Tree
    .select_leaf, every game a level at a time)."""
    games = np.asarray(games, np.int64)
    node = self.root[games].copy()
    pass_move = self.moves - 1
    going = self.expanded[node]
    # (parent, move) of the games whose descent reached a child not made
    # yet: made together at the end (each such child is its game's leaf).
    wanted = np.full(len(games), -1, np.int64)
    wanted_move = np.zeros(len(games), np.int64)
    while going.any():
      rows = node[going]
      n = self.node_n(rows)
      u_common = np.array([mcts.u_scale(int(k)) * math.sqrt(max(1, int(k) - 1))
                           for k in n], np.float32)[:, None]
      scores = mcts.action_scores(self.child_w[rows], self.child_n[rows],
                                  self.child_p[rows],
                                  self.to_play[rows, None], u_common,
                                  self.illegal[rows])
      no_pass = np.full(len(rows), not self.options.allow_pass)
      if self.options.pass_when_settled:
        no_pass |= ~self.settled[rows]
      scores[no_pass, pass_move] = -100000.0
      best = np.argmax(scores, 1)
      best = np.where(self.legal[rows, best], best, pass_move)
      child = self.children[rows, best]
      new = child < 0
      at = np.flatnonzero(going)
      wanted[at[new]] = rows[new]
      wanted_move[at[new]] = best[new]
      node[going] = child
      going[at[new]] = False
      going[at[~new]] = self.expanded[child[~new]]
    made = wanted >= 0
    if made.any():
      node[made] = self._add_children(wanted[made], wanted_move[made])
    return node

  def expand(self, leaves, policies, values) -> None:
    """IncorporateResults for leaves of different games: each policy
    renormalised over the leaf's legal moves, every child's W started at
    the value less the penalty, the value backed up; a leaf expanded
    already is left alone (no backup), as mcts.Tree's."""
    leaves = np.asarray(leaves, np.int64)
    fresh = ~self.expanded[leaves]
    leaves, policies = leaves[fresh], np.asarray(policies)[fresh]
    self.ensure_legal(leaves)
    values = np.asarray(values)[fresh]
    if not len(leaves):
      return
    legal = self.legal[leaves]
    tiny = np.finfo(np.float32).tiny
    totals = np.array([float(p[m].sum(dtype=np.float32))
                       for p, m in zip(policies, legal)])
    scale = np.where(totals > tiny, 1.0 / np.where(totals > tiny, totals, 1),
                     0.0)
    # As a Python float times the policy: in the policy's precision.
    if np.issubdtype(policies.dtype, np.floating):
      scale = scale.astype(policies.dtype)
    probs = np.where(legal, policies * scale[:, None], 0).astype(np.float32)
    penalty = self.options.value_init_penalty
    reduced = np.array([min(1.0, max(-1.0, float(v) - penalty * int(t)))
                        for v, t in zip(values, self.to_play[leaves])],
                       np.float32)
    self.expanded[leaves] = True
    self.original_p[leaves] = probs
    self.child_p[leaves] = probs
    self.child_w[leaves] += reduced[:, None]
    self.backup(leaves, np.array([float(v) for v in values], np.float32))

  def inject_noise(self, game: int, noise: np.ndarray, mix: float) -> None:
    root = self.root[game]
    legal_noise = np.where(self.legal[root], noise, 0)
    total = float(legal_noise.sum())
    scale = 1.0 / total if total > np.finfo(np.float32).tiny else 0.0
    self.child_p[root] = ((1 - mix) * self.child_p[root]
                          + mix * scale * legal_noise).astype(np.float32)

  # -- Moves -------------------------------------------------------------

  def _soft_picking(self, game: int) -> bool:
    return (self.options.soft_pick_enabled and self.n[self.root[game]]
            < self.options.cutoff(self.size))

  def _root_args(self, game: int):
    root = self.root[game]
    return (self.child_n[root], self.child_w[root], self.child_p[root],
            int(self.to_play[root]), int(self.node_n([root])[0]),
            self.illegal[root])

  def most_visited_move(self, game: int) -> int:
    return mcts.most_visited(*self._root_args(game))

  def pick_move(self, game: int, rng: np.random.Generator) -> int:
    root = self.root[game]
    if self._soft_picking(game):
      return mcts.soft_pick(self.child_n[root],
                            self.options.policy_softmax_temp, rng,
                            self.moves - 1)
    move = self.most_visited_move(game)
    return move if self.legal[root, move] else self.moves - 1

  def search_pi(self, game: int) -> np.ndarray:
    return mcts.visits_policy(self.child_n[self.root[game]],
                              self._soft_picking(game),
                              self.options.policy_softmax_temp)

  def reshape_final_visits(self, game: int) -> None:
    self.child_n[self.root[game]] = mcts.reshaped_visits(
        *self._root_args(game))

  def play_move(self, game: int, move: int) -> None:
    """Descends the game's root to the move's child."""
    root = int(self.root[game])
    self.ensure_legal([root])
    if self.game_over([root])[0] or not self.legal[root, move]:
      raise go.IllegalMove(f'{move} in game {game}\'s tree at move '
                           f'{self.n[root]}.')
    if self.children[root, move] < 0:
      self.reserve([game], 1)
      root = int(self.root[game])  # A compaction may have moved it.
      self._add_children(np.array([root]), np.array([move]))
    if self.superko:
      if self.seen_count[game] >= self.seen.shape[1]:
        self.seen = np.concatenate([self.seen, np.zeros_like(self.seen)], 1)
      self.seen[game, self.seen_count[game]] = self.hash[root]
      self.seen_count[game] += 1
    child = self.children[root, move]
    keep = self.children[root, move]
    self.children[root] = -1  # The other subtrees are dropped.
    self.children[root, move] = keep
    self.root[game] = child

  def clear_subtrees(self, game: int) -> None:
    """ClearSubtrees: the root's children and statistics dropped, its own
    N and W too; its slots freed but the root's, which moves first."""
    root = int(self.root[game])
    first = game * self.capacity
    self._materialize([root])  # Its parent is not kept.
    for name in (*_POSITION, 'ready', 'legal_ready', 'legal', 'illegal',
                 'settled'):
      array = getattr(self, name)
      array[first] = array[root]
    self._clear_slots([first])
    self.parent[first], self.move[first] = -1, -1
    self.depth[first] = self.depth[root]
    self.root[game] = first
    self.root_n[game] = 0
    self.root_w[game] = 0
    self.next_free[game] = 1
