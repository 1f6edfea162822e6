"""The IMPALA evaluator node: no-op starts evaluation, into the run record.

IMPALA Sec. 5.3.2: "each game-score is the mean over 200 evaluation episodes,
each episode was started with a random number of no-op actions (uniformly
chosen from [1, 30])". The environment applies the no-ops and the evaluation
episode cap (`AtariConfig.impala_evaluation`, via agents/impala/actor.py's
`make_environment(..., evaluation=True)`): a game over ends the episode, not a
lost life, and the score is the raw game score.

The policy acts as the actors do, by sampling from softmax(logits): the paper
does not describe a greedy evaluation policy and the released agent evaluates
with the same sampling actor. Each episode starts from the learner's latest
parameters; its row in `evaluation_episodes.csv` carries the frames all actors
had generated and the learner steps taken when it started (the x-axes of the
curves). In a multi-task run there is one evaluator per game, so the run
record holds per-game evaluation (Table 4's "multi-task" row).
"""

import time
from typing import Any, Dict, Optional

import dm_env
import numpy as np
import tree

from agents.impala import config as config_lib
from networks import impala as impala_networks
from reproductions import run_records


class ImpalaEvaluator:
  """Plays evaluation episodes with the learner's parameters, until stopped."""

  def __init__(self, environment: dm_env.Environment,
               network: impala_networks.ImpalaNetwork, variable_source: Any,
               config: config_lib.ImpalaConfig, run_dir: str, game: str,
               counter: Optional[Any] = None,
               frames_per_step: Optional[int] = None, seed: int = 0,
               node: str = 'evaluator/0'):
    self._environment = environment
    self._network = network
    self._variable_source = variable_source
    self._record = run_records.RunRecord(run_dir)
    self._game = game
    self._counter = counter
    self._frames_per_step = (config.action_repeat if frames_per_step is None
                             else int(frames_per_step))
    self._rng = np.random.default_rng(seed)
    self._node = node
    self._start = time.time()
    self._scores = []
    impala_networks.create_variables(network, environment.observation_spec())

    self._policy_step = impala_networks.make_policy_step(network,
                                                         config.use_xla)

  def _pull_parameters(self) -> int:
    values = self._variable_source.get_variables(['policy', 'version'])
    for variable, value in zip(self._network.variables, values[0]):
      variable.assign(value)
    return int(np.asarray(values[1][0]))

  def _sample(self, logits: np.ndarray) -> int:
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max())
    return int(self._rng.choice(len(probs), p=probs / probs.sum()))

  def run_episode(self) -> Dict[str, Any]:
    learner_steps = self._pull_parameters()
    counts = self._counter.get_counts() if self._counter is not None else {}
    training_frames = int(counts.get('actor_steps', 0)) * self._frames_per_step
    timestep = self._environment.reset()
    state = tree.map_structure(lambda x: x.numpy(),
                               self._network.initial_state(1))
    first, last_action, last_reward = True, 0, 0.0
    episode_return, steps = 0.0, 0
    while not timestep.last():
      logits, state = self._policy_step(
          timestep.observation[None], np.array([first]),
          np.array([last_action], np.int32),
          np.array([last_reward], np.float32), state)
      action = self._sample(logits.numpy()[0])
      timestep = self._environment.step(action)
      # The network saw clipped rewards in training (App. G); so here.
      first, last_action = False, action
      last_reward = float(np.clip(timestep.reward, -1.0, 1.0))
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
    return {'game': self._game, 'episodes': len(self._scores),
            'recent_mean_score': float(np.mean(recent)) if recent else None}
