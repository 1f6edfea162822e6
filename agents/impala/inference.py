"""Central inference: the actors' forward passes, batched across actors.

Table 1's "IMPALA (dyn. batch)" row (Sec. 5.1): "For single-machine
experiments using GPUs, we use dynamic batching in the forward pass to avoid
several batch size 1 forward passes. Our dynamic batching module is
implemented by specialised TensorFlow operations but is conceptually similar
to the queues used in GA3C." Here it is a node that owns a copy of the
policy and serves `policy_step` calls from every actor:

  * a request is one actor's environments (K rows); requests wait in a queue;
  * the serving thread takes the oldest request, then more, until the batch
    holds `config.inference_batch_limit` rows or the first request has waited
    `config.inference_timeout_ms`; one forward pass serves them all and each
    actor gets its rows back (logits, next core state) with the parameter
    version that computed them;
  * parameters: a refresher thread asks the learner for its version every
    `config.inference_refresh_period_s` and fetches the parameters when a
    newer one exists. The actors fetch no parameters; the policy may change
    within an unroll, and the behaviour logits each actor records are exactly
    the ones its actions were sampled from, which is all V-trace needs.

On a GPU host the forward pass is where batching pays; on this 2-core CPU it
trades the actors' own batched passes for a round trip per step (README,
"Measured performance").
"""

import dataclasses
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf
import tree

from agents import node_runtime
from agents.impala import config as config_lib
from networks import impala as impala_networks


@dataclasses.dataclass
class _Request:
  inputs: Tuple[Any, ...]  # observation, first, last_action, last_reward, state
  rows: int
  done: threading.Event = dataclasses.field(default_factory=threading.Event)
  result: Optional[Tuple[np.ndarray, Any, int]] = None
  error: Optional[BaseException] = None


class InferenceServer:
  """Serves `policy_step` for many actors with dynamically batched passes."""

  def __init__(self,
               network: impala_networks.ImpalaNetwork,
               config: config_lib.ImpalaConfig,
               observation_spec: Any,
               variable_source: Optional[Any] = None,
               request_timeout_s: float = 60.0):
    """Builds the policy and starts the serving (and refresher) threads.

    Args:
      network: an ImpalaNetwork of the learner's architecture.
      config: the run's ImpalaConfig (batch limit, timeout, refresh period).
      observation_spec: one environment's observation spec.
      variable_source: the learner (or a Courier handle to it), anything with
        `get_variables(['policy', 'version'])`; None keeps the initial
        parameters (tests).
      request_timeout_s: how long a caller waits for its rows before a
        TimeoutError (a stuck server must not hang the actors for ever).
    """
    config.validate()
    self._config = config
    self._source = variable_source
    self._request_timeout_s = float(request_timeout_s)
    self._batch_limit = config.inference_batch_limit
    self._timeout_s = config.inference_timeout_ms / 1000.0
    impala_networks.create_variables(network, observation_spec)

    def batched(spec):
      return tf.TensorSpec([None] + list(spec.shape), spec.dtype)

    state_spec = tree.map_structure(batched,
                                    impala_networks.core_state_spec(network))
    # Courier delivers namedtuples (an LSTM state) as plain tuples.
    self._state_structure = state_spec
    signature = (batched(tf.TensorSpec(observation_spec.shape,
                                       observation_spec.dtype)),
                 tf.TensorSpec([None], tf.bool),
                 tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None], tf.float32),
                 state_spec)

    # One trace for every batch size (the batch dimension is None).
    self._forward = impala_networks.make_policy_step(
        network, config.jit_compile, input_signature=signature)
    self._assign = impala_networks.make_assign(network)
    self._parameters_lock = threading.Lock()
    self._version = -1 if variable_source is not None else 0
    self._requests: 'queue.Queue[_Request]' = queue.Queue()
    self._stop_event = threading.Event()
    self._batches = 0
    self._rows = 0
    self._requests_served = 0
    self._refreshes = 0

    self._threads = [threading.Thread(target=self._serve, daemon=True,
                                      name='inference_serve')]
    if variable_source is not None:
      self._refresh()  # the first parameters, before any request is served
      self._threads.append(threading.Thread(
          target=self._refresh_loop, daemon=True, name='inference_refresh'))
    for thread in self._threads:
      thread.start()

  # --- The actors' call ------------------------------------------------------

  def policy_step(self, observation, first, last_action, last_reward,
                  core_state) -> Tuple[np.ndarray, Any, int]:
    """Logits and next core state for K environments, and the version used."""
    rows = int(np.shape(observation)[0])
    if not rows:
      raise ValueError('policy_step needs at least one environment row.')
    request = _Request(
        inputs=(np.asarray(observation), np.asarray(first, np.bool_),
                np.asarray(last_action, np.int32),
                np.asarray(last_reward, np.float32),
                tree.unflatten_as(self._state_structure, [
                    np.asarray(x) for x in tree.flatten(core_state)])),
        rows=rows)
    self._requests.put(request)
    if not request.done.wait(self._request_timeout_s):
      raise TimeoutError(f'central inference gave no answer in '
                         f'{self._request_timeout_s:.0f} s')
    if request.error is not None:
      raise request.error
    return request.result

  # --- Serving ---------------------------------------------------------------

  def _take_batch(self) -> List[_Request]:
    """The oldest request, then more until full or its wait is over."""
    try:
      batch = [self._requests.get(timeout=0.1)]
    except queue.Empty:
      return []
    rows = batch[0].rows
    deadline = time.monotonic() + self._timeout_s
    while rows < self._batch_limit:
      remaining = deadline - time.monotonic()
      try:
        request = (self._requests.get(timeout=remaining) if remaining > 0
                   else self._requests.get_nowait())
      except queue.Empty:
        break
      batch.append(request)
      rows += request.rows
    return batch

  def _serve(self) -> None:
    while not self._stop_event.is_set():
      batch = self._take_batch()
      if not batch:
        continue
      try:
        inputs = tree.map_structure(lambda *xs: np.concatenate(xs, axis=0),
                                    *[r.inputs for r in batch])
        with self._parameters_lock:
          logits, next_state = self._forward(*inputs)
          version = self._version
        logits = logits.numpy()
        next_state = tree.map_structure(lambda x: x.numpy(), next_state)
        start = 0
        for request in batch:
          rows = slice(start, start + request.rows)
          request.result = (logits[rows],
                            tree.map_structure(lambda x, r=rows: x[r],
                                               next_state),
                            version)
          start = rows.stop
        self._batches += 1
        self._rows += start
        self._requests_served += len(batch)
      except Exception as e:  # pylint: disable=broad-except
        logging.exception('central inference failed on a batch')
        for request in batch:
          request.error = e
      finally:
        for request in batch:
          request.done.set()

  # --- Parameters ------------------------------------------------------------

  def _refresh(self) -> bool:
    """Fetches the learner's parameters if its version is newer."""
    version = int(np.asarray(self._source.get_variables(['version'])[0][0]))
    if version == self._version:
      return False
    values, version_now = self._source.get_variables(['policy', 'version'])
    with self._parameters_lock:
      self._assign([np.asarray(v) for v in values])
      self._version = int(np.asarray(version_now[0]))
    self._refreshes += 1
    return True

  def _refresh_loop(self) -> None:
    """Refreshes every period on a helper thread, one call at a time.

    A Courier call to a learner that died can block for good; serving goes on
    with the parameters it has, and a new call starts once that one returns
    or fails (a restarted learner answers the next one).
    """
    period = self._config.inference_refresh_period_s
    pending: Optional[threading.Thread] = None

    def refresh():
      try:
        self._refresh()
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('central inference: no new parameters (%s: %s)',
                        type(e).__name__, e)

    while not self._stop_event.wait(period):
      if pending is not None and pending.is_alive():
        continue
      pending = threading.Thread(target=refresh, daemon=True,
                                 name='inference_refresh_call')
      pending.start()

  # --- Node lifecycle --------------------------------------------------------

  def run(self) -> None:
    """Launchpad's entry point: serve until the program stops."""
    while not self._stop_event.wait(0.5):
      if node_runtime.launchpad_stop_requested():
        break
    self.stop()

  def stop(self) -> None:
    self._stop_event.set()
    for thread in self._threads:
      thread.join(5.0)

  def report(self) -> Dict[str, Any]:
    return {
        'batches': self._batches,
        'requests': self._requests_served,
        'mean_batch_rows': self._rows / max(self._batches, 1),
        'batch_limit': self._batch_limit,
        'parameter_version': self._version,
        'parameter_refreshes': self._refreshes,
    }
