"""Prioritized replay on Reverb, shared by Ape-X DQN and Ape-X DPG.

Ape-X (Horgan et al. 2018) keeps one prioritized memory for both agents:
actors compute initial priorities and send their local buffers in batches
(Sec. 3, App. F "Adding Data"); the learner samples by priority and writes
the new priorities of what it trained on back (Sec. 3, Algorithm 2); each
item records which actor and environment step it came from (App. F). This
module holds those mechanisms; each agent's replay module holds its table's
policy (sampler, remover, capacity) and its item signature.

Provenance: Reverb assigns keys itself (random uint64s, drawn per item and per
table), so the paper's "key records the actor and step" cannot live in the
key. Each item carries it in its data instead: one int64 packing
(actor_id << 40) | actor_step. 40 bits hold 1.1e12 steps (the paper's 22.8B
frames over 360 actors are ~16M steps per actor); 23 bits hold 8M actors and
keep the value positive.
"""

import threading
from typing import Any, Callable, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import reverb
import tree

# --- Provenance ---------------------------------------------------------------

PROVENANCE_STEP_BITS = 40
_MAX_ACTOR_ID = (1 << (63 - PROVENANCE_STEP_BITS)) - 1
_MAX_ACTOR_STEP = (1 << PROVENANCE_STEP_BITS) - 1


def make_provenance(actor_id: int, actor_step: int) -> np.int64:
  """Packs (actor_id, actor_step) into one non-negative int64."""
  if not 0 <= actor_id <= _MAX_ACTOR_ID:
    raise ValueError(f'actor_id must be in [0, {_MAX_ACTOR_ID}], got '
                     f'{actor_id}.')
  if not 0 <= actor_step <= _MAX_ACTOR_STEP:
    raise ValueError(f'actor_step must be in [0, {_MAX_ACTOR_STEP}], got '
                     f'{actor_step}.')
  return np.int64((int(actor_id) << PROVENANCE_STEP_BITS) | int(actor_step))


def split_provenance(provenance) -> Tuple[np.ndarray, np.ndarray]:
  """Inverse of `make_provenance`, elementwise: (actor_id, actor_step)."""
  provenance = np.asarray(provenance, dtype=np.int64)
  return (provenance >> PROVENANCE_STEP_BITS,
          provenance & np.int64(_MAX_ACTOR_STEP))


# --- The table ----------------------------------------------------------------


def make_table(name: str, *, priority_exponent: float, max_size: int,
               min_size: int, signature: Any,
               remover: Optional[Any] = None) -> reverb.Table:
  """A prioritized table that never refuses an insert.

  `Prioritized(alpha)` samples P(i) = p_i^alpha / sum_j p_j^alpha; the remover
  (Fifo by default) makes room at `max_size`; `MinSize` holds the learner
  back until `min_size` items are in, never blocks writers, and after a
  server restart pauses the learner until the table refills (App. F
  "Failure Tolerance"). Items are sampled with replacement for as long as
  they are in the memory.
  """
  return reverb.Table(
      name=name,
      sampler=reverb.selectors.Prioritized(priority_exponent),
      remover=remover if remover is not None else reverb.selectors.Fifo(),
      max_size=max_size,
      rate_limiter=reverb.rate_limiters.MinSize(min_size),
      max_times_sampled=0,
      signature=signature)


# --- Actor side: batches with initial priorities --------------------------------


# Reverb's TrajectoryWriter logs "The number of pending items is alarmingly
# high, did you forget to call Flush?" once 50 items are unconfirmed, and an
# Ape-X batch is B = 50 items. Waiting until at most this many are pending
# after every this many items keeps a batch's stream below that mark (at most
# 2 x 24 = 48); the server confirms in order, so the wait costs little.
MAX_PENDING_ITEMS = 24


def write_items(writer: reverb.TrajectoryWriter, table: str,
                items: Sequence[Any], priorities: Sequence[float],
                wait: bool = False, timeout_ms: Optional[int] = None) -> None:
  """Writes each item (one step each) with its initial priority.

  The TrajectoryWriter streams items to the server from a background thread,
  so this returns without waiting for the last MAX_PENDING_ITEMS unless
  `wait`. `timeout_ms` bounds each wait (reverb.errors.DeadlineExceededError).
  """
  if len(items) != len(priorities):
    raise ValueError(f'{len(items)} items but {len(priorities)} priorities.')
  for i, (item, priority) in enumerate(zip(items, priorities)):
    writer.append(item)
    writer.create_item(
        table=table, priority=float(priority),
        trajectory=tree.map_structure(lambda column: column[-1],
                                      writer.history))
    if (i + 1) % MAX_PENDING_ITEMS == 0:
      writer.flush(block_until_num_items=MAX_PENDING_ITEMS,
                   timeout_ms=timeout_ms)
  if wait:
    writer.flush(timeout_ms=timeout_ms)


class BatchSender:
  """Sends an actor's batches; drops one that the replay cannot take in time.

  App. F: the replay server may restart. Its items are lost with it, and so
  is a batch in flight; the actor logs that and carries on (the new server
  is refilled by the next batches) instead of blocking for good on a stream
  to a dead server, which is what an unbounded flush does. After a failure
  the next batch opens a fresh channel: the old one may sit in gRPC's
  reconnect back-off (up to minutes) after its server died.
  """

  def __init__(self, client: reverb.Client, table: str,
               timeout_s: float = 10.0):
    self._client = client
    self._address = client.server_address
    self._table = table
    self._timeout_ms = int(1000 * timeout_s)
    self._renew = False

  def send(self, items: Sequence[Any], priorities: Sequence[float],
           what: str = 'a batch') -> bool:
    """True once the server confirmed every item; False if dropped."""
    try:
      if self._renew:
        self._client = reverb.Client(self._address)  # raises while down
        self._renew = False
      writer = self._client.trajectory_writer(num_keep_alive_refs=1)
      try:
        write_items(writer, self._table, items, priorities, wait=True,
                    timeout_ms=self._timeout_ms)
      finally:
        writer.close()
      return True
    except (reverb.errors.ReverbError, RuntimeError) as error:
      self._renew = True
      logging.warning('%s: dropped a batch of %d items (%s: %s)', what,
                      len(items), type(error).__name__, str(error)[:200])
      return False


# --- Learner side: priority write-back ------------------------------------------


class PriorityWriter:
  """Writes the learner's new priorities, in step with its updates.

  `mutate_priorities` has no timeout and blocks while the server is down
  (gRPC waits for it to come back, then unknown keys are ignored), so each
  write runs on a watched thread that the learner waits for in slices,
  checking for a stop and probing the server in between. A write that fails
  is dropped: the server went away with the items it refers to.
  """

  def __init__(self, client: Optional[reverb.Client], table: str, *,
               stop_requested: Callable[[], bool],
               probe: Callable[[], None] = lambda: None,
               wait_slice_s: float = 1.0):
    self._client = client
    self._table = table
    self._stop_requested = stop_requested
    self._probe = probe
    self._wait_slice_s = float(wait_slice_s)
    self._in_flight = None
    self.failures = 0

  def write(self, keys: np.ndarray, priorities: np.ndarray) -> None:
    """Writes step k's priorities before step k + 1 samples."""
    if self._client is None:
      return
    self.wait()
    updates = {int(k): float(p) for k, p in zip(keys, priorities)}
    box, done = {}, threading.Event()
    client, table = self._client, self._table

    def write():
      try:
        client.mutate_priorities(table, updates=updates)
      except BaseException as e:  # pylint: disable=broad-except
        box['error'] = e
      done.set()

    threading.Thread(target=write, daemon=True,
                     name='learner_priorities').start()
    self._in_flight = (box, done)
    self.wait()

  def wait(self) -> None:
    """Waits for the write in flight, or until a stop is asked."""
    if self._in_flight is None:
      return
    box, done = self._in_flight
    while not done.wait(self._wait_slice_s):
      if self._stop_requested():
        return
      self._probe()
    self._in_flight = None
    if 'error' in box:
      self.failures += 1
      logging.warning('Priority write-back failed (%s); dropped.',
                      type(box['error']).__name__)


def table_sizes(client: reverb.Client, table: str,
                timeout_s: int = 5) -> dict:
  """Size, items inserted and items sampled of `table`, from the server."""
  info = client.server_info(timeout=timeout_s)[table]
  limiter = info.rate_limiter_info
  return {'replay_size': int(info.current_size),
          'items_inserted': int(limiter.insert_stats.completed),
          'items_sampled': int(limiter.sample_stats.completed)}


