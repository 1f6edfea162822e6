"""dm_control suite tasks of Ape-X DPG, with one flat float32 observation.

Horgan et al. 2018 (Ape-X) s4.2 runs Ape-X DPG on four continuous-control
tasks: humanoid stand, walk and run, and manipulator ("bring a ball to a
specified location", s4.2; "catching a randomly-initialized moving ball",
App. D). No action repeat is used there (s4.2).
The suite returns an OrderedDict of float64 arrays; the DPG networks (an MLP
critic and actor, Ape-X App. D) take one vector, so the entries are flattened
and concatenated in the suite's order and cast to float32 (the networks'
dtype; halves replay memory).

Deviation (also in the README, "Deviations from the papers"): Ape-X App. D
reports |A| = 2 and |O| = 37 for its manipulator task; dm_control 1.0.50's
`manipulator/bring_ball` has |A| = 5 and |O| = 44. The suite's task differs
from the 2018 one and that version is not available, so the current one is
used. Humanoid (|A| = 21, |O| = 67) matches App. D.
"""

import os
from typing import Optional, Tuple

# Features-only tasks need no rendering; without this dm_control probes for
# GL/X11 at import and can fail or hang on headless machines. Set before any
# dm_control import (which happens lazily in make_control).
os.environ.setdefault('MUJOCO_GL', 'disable')

import difflib  # pylint: disable=g-import-not-at-top

import dm_env  # pylint: disable=g-import-not-at-top
from dm_env import specs  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

# Horgan et al. 2018 (Ape-X) s4.2 / Figure 3: the four DPG tasks, as
# '<domain>_<task>' of the dm_control suite.
CONTROL_TASKS: Tuple[str, ...] = (
    'humanoid_stand', 'humanoid_walk', 'humanoid_run',
    'manipulator_bring_ball',
)

_SUITE_NAMES = {
    'humanoid_stand': ('humanoid', 'stand'),
    'humanoid_walk': ('humanoid', 'walk'),
    'humanoid_run': ('humanoid', 'run'),
    'manipulator_bring_ball': ('manipulator', 'bring_ball'),
}


def validate_task(task: str) -> str:
  """Returns `task` if it is one of CONTROL_TASKS, else a helpful ValueError."""
  if task in CONTROL_TASKS:
    return task
  close = difflib.get_close_matches(str(task), CONTROL_TASKS, n=2)
  hint = f' Did you mean {" or ".join(repr(c) for c in close)}?' if close else ''
  raise ValueError(f'Unknown control task {task!r}.{hint} Valid tasks: '
                   f'{", ".join(CONTROL_TASKS)}.')


class FlatControlEnvironment(dm_env.Environment):
  """A dm_control task whose observation is one flat float32 vector.

  Rewards and discounts are cast to float32 to match the specs; the action
  spec is the suite's own (float64 BoundedArray in [-1, 1]).
  """

  def __init__(self, environment: dm_env.Environment):
    self._env = environment
    obs_spec = environment.observation_spec()
    self._keys = tuple(obs_spec.keys())
    size = sum(int(np.prod(obs_spec[k].shape)) for k in self._keys)
    self._observation_spec = specs.Array((size,), np.float32,
                                         name='observation')

  def _flatten(self, observation) -> np.ndarray:
    return np.concatenate(
        [np.asarray(observation[k], np.float32).ravel() for k in self._keys])

  def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
    reward = None if timestep.reward is None else np.float32(timestep.reward)
    discount = (None if timestep.discount is None
                else np.float32(timestep.discount))
    return dm_env.TimeStep(timestep.step_type, reward, discount,
                           self._flatten(timestep.observation))

  def reset(self) -> dm_env.TimeStep:
    return self._convert(self._env.reset())

  def step(self, action) -> dm_env.TimeStep:
    return self._convert(self._env.step(action))

  def observation_spec(self) -> specs.Array:
    return self._observation_spec

  def action_spec(self) -> specs.BoundedArray:
    return self._env.action_spec()

  def reward_spec(self) -> specs.Array:
    return specs.Array((), np.float32, name='reward')

  def discount_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray((), np.float32, minimum=0.0, maximum=1.0,
                              name='discount')

  def close(self) -> None:
    self._env.close()

  @property
  def physics(self):
    """The suite environment's physics (for diagnostics)."""
    return self._env.physics


def make_control(task: str, seed: Optional[int] = None
                 ) -> FlatControlEnvironment:
  """Loads one of CONTROL_TASKS with the suite's default time limit.

  Args:
    task: e.g. 'humanoid_run'.
    seed: seeds the task's initial states; None draws one.
  """
  domain, name = _SUITE_NAMES[validate_task(task)]
  from dm_control import suite  # pylint: disable=g-import-not-at-top
  environment = suite.load(domain, name, task_kwargs={'random': seed})
  return FlatControlEnvironment(environment)
