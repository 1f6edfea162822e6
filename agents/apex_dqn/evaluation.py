"""How Ape-X DQN acts in evaluation: epsilon-greedy with a small epsilon.

Sec. 4.1 evaluates "under the no-op starts testing regime (Mnih et al.,
2015)" (agents/evaluation.py runs it): the agent acts eps-greedily with a
small evaluation epsilon. The paper does not state that epsilon;
`ApeXDQNConfig.evaluation_epsilon` documents the choice (0.001).
"""

from typing import Any, Sequence

import dm_env
import numpy as np
import tensorflow as tf

from agents.apex_dqn import config as config_lib


class EpsilonGreedyPolicy:
  """argmax_a Q(x, a), or a uniform action with probability epsilon."""

  def __init__(self, network: Any, observation_spec: Any, num_actions: int,
               config: config_lib.ApeXDQNConfig, seed: int = 0):
    self._network = network
    self._num_actions = int(num_actions)
    self._epsilon = config.evaluation_epsilon
    self._rng = np.random.default_rng(seed)
    network(tf.zeros((1,) + tuple(observation_spec.shape),
                     observation_spec.dtype))

    @tf.function(jit_compile=config.jit_compile)
    def greedy(observation):
      return tf.argmax(self._network(tf.expand_dims(observation, 0))[0],
                       output_type=tf.int32)
    self._greedy = greedy

  @property
  def network(self):
    """The network the learner's 'policy' collection (and checkpoint) fill."""
    return self._network

  def assign(self, values: Sequence[np.ndarray]) -> None:
    for variable, value in zip(self._network.variables, values):
      variable.assign(value)

  def begin_episode(self) -> None:
    pass

  def select_action(self, timestep: dm_env.TimeStep) -> int:
    if self._rng.random() < self._epsilon:
      return int(self._rng.integers(self._num_actions))
    return int(self._greedy(timestep.observation).numpy())
