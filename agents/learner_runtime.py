"""What every learner node does besides its update, written once.

A learner of a Launchpad program steps until the program stops, saves
checkpoints on a period and on its way out, restores the latest one when a
run resumes, counts its steps in the shared counter off its critical path,
and serves its parameters to actors and evaluators. Each agent's learner
subclasses `DistributedLearner`, builds its networks and optimizer, and
implements `step()`; the rest is here.
"""

import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from agents import checkpointing
from agents import node_runtime
from agents import parameters
from agents import replay_feed


class DistributedLearner:
  """Run loop, stop, checkpoints and parameter service of a learner."""

  def __init__(self, config: Any, replay_client: Any = None, *,
               counter: Any = None, logger: Any = None,
               checkpoint_dir: Optional[str] = None,
               checkpoint_period_s: float = 600.0,
               max_checkpoints_to_keep: int = 3):
    """What every learner takes besides its own arguments.

    Args:
      config: the agent's config; validated here, before anything is built.
      replay_client: a Reverb client of the learner's replay or queue server,
        optional; it lets the feed wait out a restart and the learner report
        table sizes.
      counter: the shared counter (Acme's Counter or a handle), optional; it
        gets `learner_steps`, and its state goes into every checkpoint.
      logger: anything with write(dict), optional; written every step.
      checkpoint_dir: where to save and restore; None disables both.
      checkpoint_period_s: seconds between saves in run().
      max_checkpoints_to_keep: checkpoints kept in checkpoint_dir.
    """
    config.validate()
    self._config = config
    self._client = replay_client
    self._checkpoint_options = dict(
        directory=checkpoint_dir, period_s=checkpoint_period_s,
        max_to_keep=max_checkpoints_to_keep)
    self._counter = counter
    self._counter_increments = node_runtime.BackgroundIncrements(counter)
    self._logger = logger
    self._stop_event = threading.Event()
    self._checkpoint: Optional[checkpointing.LearnerCheckpoint] = None
    self._parameters: Optional[parameters.ParameterService] = None
    self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  name='learner_steps')

  def _set_up_services(self,
                       collections: Mapping[str, Callable[[], Sequence]],
                       **checkpointed: Any) -> None:
    """Restores the latest checkpoint (if any), then publishes parameters.

    Call once the variables exist. `checkpointed` names what the checkpoint
    stores (the step counter is added as `num_steps`).
    """
    options = dict(self._checkpoint_options)
    self._checkpoint = checkpointing.LearnerCheckpoint(
        options.pop('directory'), counter=self._counter,
        increments=self._counter_increments, num_steps=self._num_steps,
        **options, **checkpointed)
    self._checkpoint.restore_latest()
    self._parameters = parameters.ParameterService(
        collections, version=lambda: self._num_steps.numpy())
    self._parameters.publish()

  def _make_feed(self, dataset: Any, make_dataset: Any,
                 retry_period_s: float, **options: Any
                 ) -> replay_feed.ReplayFeed:
    """The learner's input from `dataset` or `make_dataset` (one of them)."""
    if make_dataset is not None and dataset is not None:
      raise ValueError('Pass either `dataset` or `make_dataset`, not both.')
    return replay_feed.ReplayFeed(
        make_dataset if make_dataset is not None else dataset,
        client=self._client,
        stop_requested=self._stop_requested, retry_period_s=retry_period_s,
        **options)

  # --- Stepping -------------------------------------------------------------

  def step(self) -> Optional[Dict[str, Any]]:
    """One update; its metrics, or None when a stop came first."""
    raise NotImplementedError

  def _updating(self):
    """Context for anything that writes the variables (the parameter
    service serves no fetch meanwhile; agents/parameters.py)."""
    return self._parameters.updating()

  def _after_update(self, metrics: Dict[str, Any]) -> None:
    """Counts the step and logs its metrics."""
    if self._counter is not None:
      self._counter_increments.increment(learner_steps=1)
    if self._logger is not None:
      self._logger.write(metrics)

  def warm_up(self) -> bool:
    """Work to do before the first batch arrives; False if there is none."""
    return False

  def _stop_requested(self) -> bool:
    return self._stop_event.is_set() or node_runtime.launchpad_stop_requested()

  def stop(self) -> None:
    """Asks step()/run() to return (from another thread, e.g. tests)."""
    self._stop_event.set()

  def run(self, num_steps: Optional[int] = None) -> None:
    """Steps until a stop (Launchpad or stop()), `num_steps`, or no data.

    Saves whenever a checkpoint is due and once more on the way out,
    whatever ends the loop.
    """
    self.warm_up()
    checkpoint = self._checkpoint if (self._checkpoint and
                                      self._checkpoint.enabled) else None
    taken = 0
    try:
      while not self._stop_requested():
        if num_steps is not None and taken >= num_steps:
          break
        if self.step() is None:
          break
        taken += 1
        if checkpoint is not None and checkpoint.due():
          checkpoint.save()
    finally:
      if checkpoint is not None:
        checkpoint.save()

  # --- Variables and checkpoints ----------------------------------------------

  def get_variables(self, names: Sequence[str]) -> List[List[np.ndarray]]:
    """A consistent snapshot of collections `names` (agents/parameters.py)."""
    return self._parameters.get_variables(names)

  @property
  def parameter_service(self) -> parameters.ParameterService:
    return self._parameters

  @property
  def num_steps(self) -> int:
    return int(self._num_steps.numpy())

  @property
  def restored_from(self) -> Optional[str]:
    return self._checkpoint.restored_from if self._checkpoint else None

  def save(self) -> Optional[str]:
    """Writes a checkpoint (keeps the latest few); returns its path."""
    return self._checkpoint.save()

  def restore(self, path: Optional[str] = None) -> None:
    """Restores `path` (default: the latest) and serves what it holds."""
    self._checkpoint.restore(path)
    self._parameters.publish()
