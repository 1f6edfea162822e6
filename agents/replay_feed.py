"""A learner's input: batches from Reverb that outlive the server's restarts.

Ape-X App. F ("Failure Tolerance"): if the replay server restarts, it is
refilled and the learner waits until the minimum size is reached again.
IMPALA states nothing about failures; its queue is empty whenever the actors
are slower than the learner. Both learners therefore own a dataset *factory*
and this feed:

* a batch is fetched on a daemon thread and waited for in slices of
  `retry_period_s`, so a stop request is seen while the table is empty or the
  server is down (Reverb's sampler retries for as long as its server is
  unreachable, so a bare `next()` could block for good);
* sampling errors (server gone, table missing on a fresh server, the rate
  limiter's timeout ending the dataset) make the feed mark itself waiting,
  probe the server with a bounded `server_info` and rebuild the iterator; it
  resumes as soon as a batch arrives. A fetch abandoned by a stop is kept and
  collected by the next call.
"""

import os
import threading
import time
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from absl import logging
import tensorflow as tf

from agents import node_runtime

DatasetLike = Union[tf.data.Dataset, Iterator[Any],
                    Callable[[], tf.data.Dataset]]


class ReplayFeed:
  """Batches of a dataset (factory) with waiting, probing and rebuilding.

  Args:
    source: a dataset factory (rebuilt after errors), a tf.data.Dataset
      (re-iterated after errors) or a bare iterator (cannot be rebuilt:
      errors propagate).
    client: reverb.Client of the server, probed while waiting; optional.
    stop_requested: polled between waits; True makes `next()` return None.
    retry_period_s: the wait slice, and the pause between attempts.
    waiting_for: what a waiting learner waits for, for its log line.
    on_wait: called with the error when a wait starts (metrics rows).
    input_pipeline_cpus: cores for the input pipeline's threads (Reverb
      sampling, decoding), None: wherever the learner runs. Ape-X Sec. 4.1:
      the learner "decompresses data as it prefetches it, in parallel with
      computing and applying gradients"; on a CPU-only host this keeps
      decoding off the update's cores.
  """

  def __init__(self, source: DatasetLike, *, client: Any = None,
               stop_requested: Callable[[], bool] = lambda: False,
               retry_period_s: float = 1.0, waiting_for: str = 'replay',
               on_wait: Optional[Callable[[BaseException], None]] = None,
               input_pipeline_cpus: Optional[Sequence[int]] = None):
    if source is None:
      raise ValueError('A dataset, dataset iterator or dataset factory is '
                       'required.')
    if isinstance(source, tf.data.Dataset):
      self._make_dataset = lambda: source
    elif callable(source) and not hasattr(source, '__next__'):
      self._make_dataset = source
    else:
      self._make_dataset = None
    self._iterator = None if self._make_dataset else source
    self._client = client
    self._stop_requested = stop_requested
    self._retry_period_s = float(retry_period_s)
    self._waiting_for = waiting_for
    self._on_wait = on_wait
    self._cpus = set(input_pipeline_cpus) if input_pipeline_cpus else None
    self._kept_dataset = None
    self._pending = None
    self.waiting = False
    self.num_waits = 0
    self._wait_start = 0.0

  @property
  def element_spec(self) -> Any:
    """The batches' spec; None for a bare iterator that does not say.

    Building the dataset to read it asks the server for the table's
    signature; the dataset is kept for the first iterator.
    """
    if self._iterator is not None:
      return getattr(self._iterator, 'element_spec', None)
    if self._kept_dataset is None:
      self._kept_dataset = self._make_dataset()
    return self._kept_dataset.element_spec

  def _server_timeout_s(self) -> int:
    return max(1, int(self._retry_period_s))

  def _new_iterator(self):
    if self._client is not None:
      # Bounded probe: from_table_signature would otherwise block for good on
      # a server that is down.
      self._client.server_info(timeout=self._server_timeout_s())
    dataset, self._kept_dataset = self._kept_dataset, None
    return iter(dataset if dataset is not None else self._make_dataset())

  def _fetch(self):
    if self._pending is None:
      box, done, iterator, cpus = {}, threading.Event(), self._iterator, \
          self._cpus

      def fetch():
        if cpus:
          # Threads inherit their creator's CPU mask: the input pipeline's
          # threads, started by the first next(), run where this one does.
          os.sched_setaffinity(0, cpus)
        try:
          box['batch'] = next(iterator)
        except BaseException as e:  # pylint: disable=broad-except
          box['error'] = e
        done.set()

      threading.Thread(target=fetch, daemon=True, name='learner_fetch').start()
      self._pending = (box, done)
    box, done = self._pending
    while not done.wait(self._retry_period_s):
      if self._stop_requested():
        return None
      self.probe()
    self._pending = None
    if 'error' in box:
      raise box['error']
    return box['batch']

  def start_waiting(self, error: BaseException) -> None:
    """Marks the feed as waiting (once per wait) and says why."""
    if self.waiting:
      return
    self.waiting = True
    self.num_waits += 1
    self._wait_start = time.time()
    message = str(error).splitlines()[0] if str(error) else ''
    logging.warning('Learner waits for %s: %s: %s', self._waiting_for,
                    type(error).__name__, message)
    if self._on_wait is not None:
      self._on_wait(error)

  def probe(self) -> None:
    """Marks the feed as waiting if the server does not answer."""
    if self._client is None or self.waiting:
      return
    try:
      self._client.server_info(timeout=self._server_timeout_s())
    except Exception as e:  # pylint: disable=broad-except
      self.start_waiting(e)

  def next(self) -> Optional[Any]:
    """The next batch, waiting while none comes; None once a stop is asked."""
    while True:
      attempt_start = time.time()
      try:
        if self._iterator is None:
          self._iterator = self._new_iterator()
        batch = self._fetch()
        if batch is None:
          return None
        if self.waiting:
          logging.info('Learner resumes after waiting %.1f s for %s.',
                       time.time() - self._wait_start, self._waiting_for)
          self.waiting = False
        return batch
      except node_runtime.RETRYABLE_REPLAY_ERRORS as e:  # pylint: disable=catching-non-exception
        if self._make_dataset is None:
          raise
        self._iterator = None
        self.start_waiting(e)
      if self._stop_requested():
        return None
      # At most one attempt per retry period, but no pause after an attempt
      # that already waited that long (a dataset ended by the rate limiter's
      # timeout): data is taken as soon as it lands.
      time.sleep(max(0.0, self._retry_period_s - (time.time() - attempt_start)))
      if self._stop_requested():
        return None
