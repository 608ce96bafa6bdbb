"""A match of the network against OpenSpiel's MCTS, every game at once:
the network's searches in one Forest (models/minigo/forest.py), its leaves
of all games in one evaluation a round; OpenSpiel deciding each game's
rules and playing the opponent (models/minigo/referee.py).

The network's side is games.NetworkPlayer's, batched, and plays its moves
(tests/models/minigo/test_referee.py): `readouts` more visits a move on
the tree kept from the moves before (cleared only if it would outgrow its
node slots), `virtual_losses` leaves a round, positions evaluated as they
stand, the move picked as MCTS picks it (soft pick in the opening, then
the most visited), no noise, no resignation, positional superko off
(OpenSpiel's rules have simple ko only). The network plays Black in the
even-numbered games.
"""

import numpy as np

from models.minigo import batched_selfplay
from models.minigo import go
from models.minigo import referee
from models.minigo import selfplay

BLACK = 0  # OpenSpiel's player numbers.


def play(evaluate: selfplay.Evaluate, *, size: int, options, first: int,
         games: int, seed: int) -> dict:
  """Games `first` .. `first + games - 1`; returns {'wins', 'games',
  'moves', 'colours' (the network's, +1 Black), 'scores' (Black's
  return: +1, -1)}.

  options: games.MatchOptions (readouts, virtual_losses, komi, search,
    target_simulations).
  """
  game = referee.load_game(size, options.komi)
  to_ours = referee.from_openspiel(size)
  to_theirs = referee.to_openspiel(size)
  search = selfplay.SelfplayOptions(
      num_readouts=options.readouts, fastplay_frequency=0.0,
      fastplay_readouts=0, virtual_losses=options.virtual_losses,
      komi=options.komi, superko=False, search=options.search)
  # A move's search adds at most readouts + virtual_losses nodes to the
  # kept tree (root N + 1 nodes at most), cleared when that would not fit.
  capacity = 4 * options.readouts + 64
  keep = capacity - options.readouts - options.virtual_losses - 8
  runner = batched_selfplay.Selfplay(evaluate, size=size, concurrent=games,
                                     options=search, capacity=capacity,
                                     symmetries=False)
  players, states, targets, colours = [], [], [], []
  for index in range(first, first + games):
    game_seed = int(np.random.default_rng([seed, index]).integers(2**31))
    player = runner.start(np.random.default_rng(game_seed))
    # No noise, no examples, no resignation: a match game.
    player.fastplay, player.resign_enabled = True, False
    players.append(player)
    states.append(game.new_initial_state())
    targets.append(referee.MctsPlayer(game, options.target_simulations,
                                      game_seed))
    colours.append(BLACK if index % 2 == 0 else 1)
  forest = runner.forest
  searching = [False] * games  # The network's move under way.
  while True:
    # The opponent's moves, then a round of the network's searches.
    for i, state in enumerate(states):
      while not state.is_terminal() and state.current_player() != colours[i]:
        _apply(forest, players[i], state, targets[i].select(state), to_ours)
    turns = [i for i, state in enumerate(states) if not state.is_terminal()]
    if not turns:
      break
    for i in turns:
      if not searching[i]:
        slot, searching[i] = players[i].slot, True
        if forest.node_n([forest.root[slot]])[0] > keep:
          forest.clear_subtrees(slot)
        players[i].target_readouts = options.readouts + int(
            forest.node_n([forest.root[slot]])[0])
    runner.search([players[i] for i in turns])
    for i in turns:
      player = players[i]
      if forest.node_n([forest.root[player.slot]])[0] >= (
          player.target_readouts):
        move = forest.pick_move(player.slot, player.rng)
        _apply(forest, player, states[i], int(to_theirs[move]), to_ours)
        searching[i] = False
  results = [state.returns()[0] for state in states]
  wins = sum(int((result > 0) == (colour == BLACK))
             for result, colour in zip(results, colours))
  return dict(wins=wins, games=games,
              moves=sum(state.move_number() for state in states),
              colours=[1 if colour == BLACK else -1 for colour in colours],
              scores=[float(result) for result in results])


def _apply(forest, player, state, action: int, to_ours) -> None:
  """Plays OpenSpiel's `action` in the game and in the network's tree."""
  if action not in state.legal_actions():
    raise go.IllegalMove(
        f'Action {action}, which OpenSpiel refuses:\n{state}')
  state.apply_action(action)
  if not state.is_terminal():
    forest.play_move(player.slot, int(to_ours[action]))
