"""What every agent node needs from its surroundings, written once.

Nodes of a Launchpad program talk to other nodes (the counter, the replay)
that may be gone: stopped at the end of a run, or restarting (Ape-X App. F
"Failure Tolerance"). These helpers keep such calls off the critical path and
bounded, and name the errors that mean "the replay is not there right now".
Shared by every agent's learners and actors.
"""

import json
import threading
import time
from typing import Any, Callable, Dict, Optional

from absl import logging
import reverb
import tensorflow as tf
import tree

# Errors that mean "no batch right now, try again later": server gone or
# restarting (Unavailable, Cancelled, Internal, Aborted, Unknown), table
# missing on a fresh server (NotFound), rate limiter timeout
# (DeadlineExceeded, or the dataset ending: OutOfRange / StopIteration).
RETRYABLE_REPLAY_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
    tf.errors.OutOfRangeError,
    tf.errors.NotFoundError,
    tf.errors.InternalError,
    tf.errors.AbortedError,
    tf.errors.UnknownError,
    reverb.errors.ReverbError,  # e.g. the bounded server_info probe timing out
    StopIteration,
    ConnectionError,
    TimeoutError,
    RuntimeError,
    ValueError,  # from_table_signature: table missing while restarting.
)


def launchpad_stop_requested() -> bool:
  """lp.wait_for_stop(0) inside a Launchpad node, False elsewhere."""
  try:
    import launchpad as lp  # pylint: disable=g-import-not-at-top
    return bool(lp.wait_for_stop(0))
  except Exception:  # pylint: disable=broad-except
    # Outside a Launchpad program node the worker manager does not exist.
    return False


def call_with_timeout(function: Callable[[], Any], timeout_s: float) -> Any:
  """function() or None if it raises or takes longer than `timeout_s`."""
  result = {}

  def target():
    try:
      result['value'] = function()
    except Exception as error:  # pylint: disable=broad-except
      logging.warning('Call failed: %s', error)

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(timeout_s)
  return result.get('value')


class BackgroundIncrements:
  """Counter increments off the learner's critical path, batched.

  Why: the counter is another node, and a Courier call to a node that has
  already stopped blocks for good. Called inline, a node's per-step
  increment would hang it at shutdown before its final checkpoint. Here a
  daemon thread sends the accumulated counts; the learner never waits on it
  except through the bounded `flush`. The same thread keeps a snapshot of the
  counter's state (at most `snapshot_period_s` old) for checkpoints taken when
  the counter can no longer be reached.
  """

  def __init__(self, counter: Any, snapshot_period_s: float = 1.0):
    self._counter = counter
    self._snapshot_period_s = snapshot_period_s
    self._last_snapshot = -float('inf')
    self.latest_state: Optional[Dict[str, Any]] = None
    self._pending: Dict[str, float] = {}
    self._lock = threading.Lock()
    self._wake = threading.Event()
    self._idle = threading.Event()
    self._idle.set()
    if counter is not None:
      threading.Thread(target=self._loop, daemon=True,
                       name='counter_increments').start()

  def increment(self, **counts: float) -> None:
    with self._lock:
      for key, value in counts.items():
        self._pending[key] = self._pending.get(key, 0) + value
      self._idle.clear()
    self._wake.set()

  def flush(self, timeout_s: float) -> bool:
    """Waits (at most `timeout_s`) until every increment has been sent."""
    return self._idle.wait(timeout_s)

  def _loop(self) -> None:
    while True:
      self._wake.wait()
      self._wake.clear()
      with self._lock:
        counts, self._pending = self._pending, {}
      if counts:
        try:
          self._counter.increment(**counts)
          if (hasattr(self._counter, 'save') and time.time() -
              self._last_snapshot >= self._snapshot_period_s):
            self.latest_state = self._counter.save()
            self._last_snapshot = time.time()
        except Exception as error:  # pylint: disable=broad-except
          logging.warning('Counter increment failed: %s', error)
      with self._lock:
        if not self._pending:
          self._idle.set()


def counter_state_json(counter: Any,
                       increments: 'BackgroundIncrements') -> Optional[str]:
  """The shared counter's state as JSON, for a learner's checkpoint.

  At shutdown the counter node may stop before the learner, and a call to a
  stopped node never returns: if the pending increments cannot be delivered
  promptly, the counter is taken to be gone and its state as of the last
  snapshot (about a second old, more on a loaded machine) is used instead.
  None if the counter keeps no state.
  """
  if counter is None or not hasattr(counter, 'save'):
    return None
  state = None
  if increments.flush(timeout_s=2.0):
    state = call_with_timeout(counter.save, timeout_s=2.0)
  if state is None:
    state = increments.latest_state
    logging.warning('Counter unreachable; checkpointing its last snapshot.')
  if state is None:
    return None
  state = tree.map_structure(
      lambda x: x.item() if hasattr(x, 'item') else x, state)
  return json.dumps(state)


def restore_counter(counter: Any, state_json: str) -> None:
  """Puts a checkpointed counter state (counter_state_json) back."""
  if state_json and counter is not None and hasattr(counter, 'restore'):
    counter.restore(json.loads(state_json))
