"""A learner's checkpoints: its variables, and the shared counter's state.

Why the counter too: the counter node holds the run's actor frames and
episodes, and it keeps nothing on disk. A run resumed from a learner
checkpoint must resume the counts as well, or its frame bound and its
curves' x-axes would start again from zero. So every checkpoint carries the
counter's state as JSON (agents/node_runtime.counter_state_json), and a
restore puts it back.
"""

import time
from typing import Any, Optional

from absl import logging
import tensorflow as tf

from agents import node_runtime


class LearnerCheckpoint:
  """Saves and restores `objects` and the counter, every `period_s`.

  Args:
    directory: where checkpoints go; None disables saving and restoring.
    counter: the shared counter (save()/restore()), optional.
    increments: the learner's BackgroundIncrements to `counter`.
    period_s: seconds between saves in the run loop (`due()`).
    max_to_keep: checkpoints kept in `directory`.
    **objects: what tf.train.Checkpoint tracks (networks, optimizer, step
      counters), by the names that the files store them under.
  """

  def __init__(self, directory: Optional[str], *, counter: Any,
               increments: node_runtime.BackgroundIncrements,
               period_s: float = 600.0, max_to_keep: int = 3, **objects: Any):
    self._counter = counter
    self._increments = increments
    self._period_s = float(period_s)
    self._state = tf.Variable('', dtype=tf.string, trainable=False,
                              name='counter_state')
    self._checkpoint = tf.train.Checkpoint(counter_state=self._state,
                                           **objects)
    self._step = objects.get('num_steps')
    self._manager = (tf.train.CheckpointManager(
        self._checkpoint, directory, max_to_keep=max_to_keep)
                     if directory else None)
    self._last_save = time.time()
    self.restored_from: Optional[str] = None

  @property
  def enabled(self) -> bool:
    return self._manager is not None

  @property
  def latest(self) -> Optional[str]:
    return self._manager.latest_checkpoint if self._manager else None

  def due(self) -> bool:
    return time.time() - self._last_save >= self._period_s

  def save(self) -> Optional[str]:
    """Writes a checkpoint numbered by the learner step; returns its path."""
    if self._manager is None:
      return None
    state = node_runtime.counter_state_json(self._counter, self._increments)
    if state is not None:
      self._state.assign(state)
    path = self._manager.save(checkpoint_number=self._step)
    self._last_save = time.time()
    logging.info('Learner checkpoint at step %s: %s',
                 None if self._step is None else int(self._step.numpy()), path)
    return path

  def restore(self, path: Optional[str] = None) -> str:
    """Restores `path` (default: the latest) and the counter's state."""
    path = path or self.latest
    if path is None:
      raise ValueError('No checkpoint to restore.')
    self._checkpoint.restore(path).assert_existing_objects_matched()
    node_runtime.restore_counter(self._counter, self._state.numpy().decode())
    self.restored_from = path
    logging.info('Learner restored from %s.', path)
    return path

  def restore_latest(self) -> Optional[str]:
    """Restores the latest checkpoint if there is one (a resumed run)."""
    return self.restore() if self.latest else None
