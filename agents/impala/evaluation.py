"""How IMPALA acts in evaluation: by sampling from its policy, as in training.

IMPALA Sec. 5.3.2: "each game-score is the mean over 200 evaluation
episodes, each episode was started with a random number of no-op actions
(uniformly chosen from [1, 30])" (agents/evaluation.py runs the protocol;
`AtariConfig.impala_evaluation` ends an episode at a game over, not a lost
life). The paper describes no greedy evaluation policy and the released
agent evaluates with the same sampling actor, so actions are sampled from
softmax(logits). In a multi-task run there is one evaluator per game, so the
run record holds per-game evaluation (Table 4's "multi-task" row).
"""

from typing import Sequence

import dm_env
import numpy as np
import tree

from agents.impala import config as config_lib
from networks import impala as impala_networks


class SampledPolicy:
  """a ~ softmax(logits), with the core state and last action and reward."""

  def __init__(self, network: impala_networks.ImpalaNetwork,
               observation_spec, config: config_lib.ImpalaConfig,
               seed: int = 0):
    self._network = network
    self._rng = np.random.default_rng(seed)
    impala_networks.create_variables(network, observation_spec)
    self._policy_step = impala_networks.make_policy_step(network,
                                                         config.jit_compile)
    self._assign = impala_networks.make_assign(network)

  @property
  def network(self):
    """The network the learner's 'policy' collection (and checkpoint) fill."""
    return self._network

  def assign(self, values: Sequence[np.ndarray]) -> None:
    self._assign([np.asarray(v) for v in values])

  def begin_episode(self) -> None:
    self._state = tree.map_structure(lambda x: x.numpy(),
                                     self._network.initial_state(1))
    self._first, self._last_action = True, 0

  def select_action(self, timestep: dm_env.TimeStep) -> int:
    # The network saw clipped rewards in training (App. G); so here.
    last_reward = (0.0 if self._first else
                   float(np.clip(timestep.reward, -1.0, 1.0)))
    logits, self._state = self._policy_step(
        timestep.observation[None], np.array([self._first]),
        np.array([self._last_action], np.int32),
        np.array([last_reward], np.float32), self._state)
    logits = logits.numpy()[0].astype(np.float64)
    probs = np.exp(logits - logits.max())
    action = int(self._rng.choice(len(probs), p=probs / probs.sum()))
    self._first, self._last_action = False, action
    return action
