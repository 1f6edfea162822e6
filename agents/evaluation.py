"""The evaluator node every agent uses: the papers' no-op starts protocol.

Ape-X Sec. 4.1, IMPALA Sec. 5.3.2 and Gorila all evaluate "under the no-op
starts regime" (Mnih et al. 2015): each episode starts with 1 to 30 random
no-ops, a game over ends it, and the score is the raw game score, never the
clipped training reward. The environment applies the no-ops and the episode
cap (reproductions/environments: `AtariConfig.*_evaluation`); what differs
between agents is only how the policy picks an action, so that is the
agent's `EvaluationPolicy` and the rest is here.

Each episode starts from the learner's latest parameters and is written to
`evaluation_episodes.csv` with the frames the actors had generated and the
learner steps taken when it started (the x-axes of the papers' curves).
"""

import time
from typing import Any, Dict, Optional, Protocol, Sequence, Tuple

import dm_env
import numpy as np

from reproductions import run_records


class EvaluationPolicy(Protocol):
  """How an agent acts in evaluation episodes."""

  @property
  def network(self) -> Any:
    """The network that the learner checkpoints under the name 'network'."""

  def assign(self, values: Sequence[np.ndarray]) -> None:
    """Sets the network's variables to the learner's 'policy' collection."""

  def begin_episode(self) -> None:
    """Resets per-episode state (a recurrent core, the last action)."""

  def select_action(self, timestep: dm_env.TimeStep) -> int:
    """The action at `timestep`; may also read what the last step gave."""


def play_episode(environment: dm_env.Environment, policy: EvaluationPolicy,
                 frames_per_step: int) -> Tuple[float, int]:
  """One episode of the protocol: (raw game score, emulator frames)."""
  timestep = environment.reset()
  policy.begin_episode()
  episode_return, steps = 0.0, 0
  while not timestep.last():
    timestep = environment.step(policy.select_action(timestep))
    episode_return += float(timestep.reward)
    steps += 1
  score = float(getattr(environment, 'episode_raw_return', episode_return))
  frames = int(getattr(environment, 'episode_frames', steps * frames_per_step))
  return score, frames


class Evaluator:
  """Plays evaluation episodes with the learner's parameters until stopped."""

  def __init__(self, environment: dm_env.Environment,
               policy: EvaluationPolicy, variable_source: Any, run_dir: str,
               game: str, counter: Optional[Any] = None,
               frames_per_step: int = 4, node: str = 'evaluator/0'):
    self._environment = environment
    self._policy = policy
    self._variable_source = variable_source
    self._record = run_records.RunRecord(run_dir)
    self._game = game
    self._counter = counter
    self._frames_per_step = int(frames_per_step)
    self._node = node
    self._start = time.time()
    self._scores = []

  def _pull_parameters(self) -> int:
    policy, version = self._variable_source.get_variables(['policy',
                                                           'version'])
    self._policy.assign(policy)
    return int(np.asarray(version[0]))

  def run_episode(self) -> Dict[str, Any]:
    learner_steps = self._pull_parameters()
    counts = self._counter.get_counts() if self._counter is not None else {}
    training_frames = int(counts.get('actor_steps', 0)) * self._frames_per_step
    score, frames = play_episode(self._environment, self._policy,
                                 self._frames_per_step)
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
