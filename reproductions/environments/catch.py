"""Catch, as in bsuite (Osband et al. 2020): a tiny, fast sanity-check task.

Why it is here: the distributed agents need an environment on which a test
can show learning in seconds on two CPU cores. Atari needs hours; Catch
needs a few thousand steps. The rules follow bsuite's `catch`: a ball starts
in a random column of the top row and falls one row per step; the paddle sits
on the bottom row, starts in the middle column and moves left, stays or moves
right; when the ball reaches the bottom row the episode ends with reward +1
if the paddle is under it and -1 otherwise (rows - 1 = 9 steps an episode).

Written directly (no bsuite dependency, no per-step spec checks) so that a
step costs next to nothing beside the agent's own work.
"""

from typing import Any, Optional

import dm_env
from dm_env import specs
import numpy as np

_FIRST = dm_env.StepType.FIRST
_MID = dm_env.StepType.MID
_LAST = dm_env.StepType.LAST
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_MINUS_ONE = np.float32(-1.0)
# Action index -> paddle move (bsuite: left, stay, right).
_MOVES = (-1, 0, 1)


class Catch(dm_env.Environment):
  """bsuite's Catch: observation [rows, columns] of 0/1 cells, 3 actions.

  `dtype` is float32 by default; uint8 lets agents whose replay stores uint8
  frames (Ape-X DQN) run on Catch unchanged.
  """

  def __init__(self, rows: int = 10, columns: int = 5,
               seed: Optional[int] = None, dtype: Any = np.float32):
    if rows < 2 or columns < 1:
      raise ValueError(f'Catch needs rows >= 2 and columns >= 1, got '
                       f'rows={rows}, columns={columns}')
    self._rows = rows
    self._columns = columns
    self._dtype = np.dtype(dtype)
    self._rng = np.random.default_rng(seed)
    self._ball_x = 0
    self._ball_y = 0
    self._paddle_x = columns // 2
    self._paddle_y = rows - 1
    self._reset_next_step = True
    self.episode_return = 0.0

  def _observation(self) -> np.ndarray:
    board = np.zeros((self._rows, self._columns), self._dtype)
    board[self._ball_y, self._ball_x] = 1.0
    board[self._paddle_y, self._paddle_x] = 1.0
    return board

  def reset(self) -> dm_env.TimeStep:
    self._reset_next_step = False
    self._ball_x = int(self._rng.integers(self._columns))
    self._ball_y = 0
    self._paddle_x = self._columns // 2
    self.episode_return = 0.0
    return dm_env.TimeStep(_FIRST, None, None, self._observation())

  def step(self, action) -> dm_env.TimeStep:
    if self._reset_next_step:
      return self.reset()
    if action < 0:  # A tuple would silently wrap a negative index.
      raise IndexError(f'action {action} out of range')
    paddle_x = self._paddle_x + _MOVES[action]
    self._paddle_x = min(max(paddle_x, 0), self._columns - 1)
    self._ball_y += 1
    if self._ball_y == self._paddle_y:
      self._reset_next_step = True
      reward = _ONE if self._paddle_x == self._ball_x else _MINUS_ONE
      self.episode_return += float(reward)
      return dm_env.TimeStep(_LAST, reward, _ZERO, self._observation())
    return dm_env.TimeStep(_MID, _ZERO, _ONE, self._observation())

  def observation_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray((self._rows, self._columns), self._dtype,
                              minimum=0, maximum=1, name='board')

  def action_spec(self) -> specs.DiscreteArray:
    return specs.DiscreteArray(len(_MOVES), dtype=np.int32, name='action')

  def reward_spec(self) -> specs.Array:
    return specs.Array((), np.float32, name='reward')

  def discount_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray((), np.float32, minimum=0.0, maximum=1.0,
                              name='discount')

  @property
  def ball_column(self) -> int:
    """Column of the ball (for scripted policies in tests)."""
    return self._ball_x

  @property
  def paddle_column(self) -> int:
    return self._paddle_x
