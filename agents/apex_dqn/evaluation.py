"""The Ape-X DQN evaluator node: the no-op starts protocol, into the run record.

Sec. 4.1 evaluates "under the no-op starts testing regime (Mnih et al., 2015)":
each episode starts with 1 to 30 random no-ops, then the agent acts
eps-greedily with a small evaluation epsilon. The paper does not state that
epsilon; `ApeXDQNConfig.evaluation_epsilon` documents the choice (0.001). The
environment itself applies the no-ops and the evaluation episode cap (see
`AtariConfig.apex_evaluation`). The score recorded is the raw game score,
never the clipped training reward.

Each episode starts from the learner's latest parameters and is written to
`evaluation_episodes.csv` with how many frames the actors had generated and
how many learner steps had been taken when it started (the x-axes of the
paper's curves).
"""

import time
from typing import Any, Dict, Optional

import dm_env
import numpy as np
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from reproductions import run_records


class ApeXDQNEvaluator:
  """Plays evaluation episodes with the learner's parameters, forever."""

  def __init__(self, environment: dm_env.Environment, network: Any,
               variable_source: Any, config: config_lib.ApeXDQNConfig,
               run_dir: str, game: str, counter: Optional[Any] = None,
               frames_per_step: int = 4, seed: int = 0,
               node: str = 'evaluator/0'):
    self._environment = environment
    self._network = network
    self._variable_source = variable_source
    self._config = config
    self._record = run_records.RunRecord(run_dir)
    self._game = game
    self._counter = counter
    self._frames_per_step = frames_per_step
    self._rng = np.random.default_rng(seed)
    self._node = node
    self._start = time.time()
    spec = environment.observation_spec()
    network(tf.zeros((1,) + tuple(spec.shape), spec.dtype))
    self._num_actions = int(environment.action_spec().num_values)

    @tf.function(jit_compile=config.jit_compile)
    def greedy(observation):
      return tf.argmax(self._network(tf.expand_dims(observation, 0))[0],
                       output_type=tf.int32)
    self._greedy = greedy
    self._scores = []

  def _pull_parameters(self) -> int:
    values = self._variable_source.get_variables(['policy', 'version'])
    for variable, value in zip(self._network.variables, values[0]):
      variable.assign(value)
    return int(np.asarray(values[1][0]))

  def run_episode(self) -> Dict[str, Any]:
    learner_steps = self._pull_parameters()
    counts = self._counter.get_counts() if self._counter is not None else {}
    training_frames = int(counts.get('actor_steps', 0)) * self._frames_per_step
    timestep = self._environment.reset()
    episode_return, steps = 0.0, 0
    epsilon = self._config.evaluation_epsilon
    while not timestep.last():
      if self._rng.random() < epsilon:
        action = int(self._rng.integers(self._num_actions))
      else:
        action = int(self._greedy(timestep.observation).numpy())
      timestep = self._environment.step(action)
      episode_return += float(timestep.reward)
      steps += 1
    score = float(getattr(self._environment, 'episode_raw_return',
                          episode_return))
    frames = int(getattr(self._environment, 'episode_frames',
                         steps * self._frames_per_step))
    self._record.append_evaluation_episode(
        game=self._game, score=score, frames=frames,
        wall_time_s=time.time() - self._start,
        training_frames=training_frames, learner_steps=learner_steps,
        node=self._node)
    self._scores.append(score)
    return {'score': score, 'frames': frames, 'learner_steps': learner_steps}

  def run(self) -> None:
    import launchpad as lp  # pylint: disable=g-import-not-at-top
    while not lp.wait_for_stop(0):
      self.run_episode()

  def report(self) -> Dict[str, Any]:
    recent = self._scores[-20:]
    return {'episodes': len(self._scores),
            'recent_mean_score': float(np.mean(recent)) if recent else None}
