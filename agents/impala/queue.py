"""IMPALA's actor -> learner queue (and optional replay) on Reverb.

What the paper specifies:
  * actors send trajectories "through a queue" to the learner, each with the
    behaviour policy's distributions mu(a_t|x_t) and the initial LSTM state
    (Sec. 3); the learner takes batches of them (Table G.1: 32);
  * each trajectory is used once: the queue is a queue, not a replay
    ([CODE]: a FIFOQueue; a full queue blocks the enqueueing actor);
  * only for Table 2's "With Replay" rows: "we draw 50% of the items in each
    batch uniformly at random from the replay buffer" (Sec. 5.2.2), a replay
    of 10,000 trajectories with uniform sampling and FIFO removal (Table D.3).

What is built here:
  * the queue is `reverb.Table.queue`: FIFO sampling, each item sampled
    exactly once (max_times_sampled=1), and a `Queue` rate limiter that
    blocks inserts while the table is full and samples while it is empty;
  * the replay (when `config.replay_proportion > 0`) is a Uniform-sampler,
    FIFO-remover table of `config.replay_capacity` items. The actor writes
    every trajectory into both tables in one go (two items referencing the
    same chunks, so the data is stored once). The paper does not say how its
    replay was filled; "every queue trajectory also goes into replay" is the
    simplest reading. A consequence: a trajectory can be drawn from the
    replay before the queue hands it to the learner.
  * `make_dataset` zips a queue stream of `queue_batch_size` items with a
    replay stream of `replay_batch_size` items and concatenates them, so each
    batch is exactly the configured mix (16 + 16 at 0.5 and batch 32).

The stored trajectory (`Trajectory`): n + 1 = 21 steps, each holding
  observation x_t (uint8 frames stay uint8 end to end), first (x_t starts an
  episode), last_action a_{t-1}, last_reward r_{t-1} (raw, clipped by the
  learner), discount (0 where the step before x_t ended an episode, else the
  environment's discount), behaviour_logits (mu's logits at x_t),
  behaviour_version (the learner step whose parameters computed them, -1
  when the parameter source does not say; the learner's policy lag),
plus core_state, the network's core state before x_0 (no time dimension; ()
for feed-forward networks). Step n of one unroll is step 0 of the next: the
usual one-step overlap ([CODE]), giving the learner the bootstrap observation
x_n. As in [CODE], the action at x_n is chosen in the next unroll, with the
parameters fetched for it, so behaviour_logits[n] of an item is not known
when it is sent and is stored as zeros (the learner never reads it); the
next item's step 0 carries the real logits. The
learner reads transitions t = 0..n-1 as (x_t, a_t = last_action[t+1],
r_t = last_reward[t+1], discount[t+1], behaviour_logits[t]).

Why each unroll is its own Reverb "episode" and the overlap step is appended
again instead of referenced: Reverb sends whole chunks to samplers. An item
whose first step sits at the end of the previous unroll's chunk would drag
that whole chunk (20 frame stacks) to the learner with it, doubling its
network and decompression load. Appending it twice costs one extra stored
step per unroll (5%) and keeps every item inside its own chunks.

Episode ends: the actor resets the environment at once and x_{t+1} is the new
episode's first observation. A time-limit truncation is therefore
bootstrapped like a termination (discount 0), as in [CODE], whose
environments report a single `done`: the observation that truncation would
bootstrap from is replaced by the reset one.
"""

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import reverb
import tensorflow as tf
import tree

from agents.impala import config as config_lib


class Trajectory(NamedTuple):
  """One unroll of n + 1 steps (see the module docstring for each field)."""
  observation: Any
  first: Any
  last_action: Any
  last_reward: Any
  discount: Any
  behaviour_logits: Any
  behaviour_version: Any
  core_state: Any


# Per-step fields (everything but core_state).
STEP_FIELDS = ('observation', 'first', 'last_action', 'last_reward',
               'discount', 'behaviour_logits', 'behaviour_version')


def trajectory_signature(observation_spec: Any,
                         num_actions: int,
                         unroll_length: int,
                         core_state_spec: Any = ()) -> Trajectory:
  """TensorSpecs of one stored unroll: [n + 1, ...] per step, core state bare.

  Args:
    observation_spec: the environment's observation spec (shape, dtype).
    num_actions: |A|, the width of the behaviour logits.
    unroll_length: n (Table G.1: 20); the item holds n + 1 steps.
    core_state_spec: unbatched specs of the network's core state
      (networks.impala.core_state_spec); () for a feed-forward network.
  """
  steps = unroll_length + 1
  shape = [steps] + list(observation_spec.shape)
  return Trajectory(
      observation=tf.TensorSpec(shape, tf.as_dtype(observation_spec.dtype),
                                name='observation'),
      first=tf.TensorSpec([steps], tf.bool, name='first'),
      last_action=tf.TensorSpec([steps], tf.int32, name='last_action'),
      last_reward=tf.TensorSpec([steps], tf.float32, name='last_reward'),
      discount=tf.TensorSpec([steps], tf.float32, name='discount'),
      behaviour_logits=tf.TensorSpec([steps, num_actions], tf.float32,
                                     name='behaviour_logits'),
      behaviour_version=tf.TensorSpec([steps], tf.int64,
                                      name='behaviour_version'),
      core_state=tree.map_structure(
          lambda s: tf.TensorSpec(s.shape, s.dtype), core_state_spec))


def make_tables(config: config_lib.ImpalaConfig,
                signature: Trajectory) -> List[reverb.Table]:
  """The queue, and the replay table when `config.replay_proportion > 0`."""
  config.validate()
  tables = [
      # Queue semantics: FIFO, each item sampled once, inserts block while
      # the table holds queue_capacity items (the actor waits, as in [CODE]).
      reverb.Table.queue(name=config.queue_table_name,
                         max_size=config.queue_capacity,
                         signature=signature)
  ]
  if config.use_replay:
    tables.append(
        reverb.Table(
            name=config.replay_table_name,
            # Table D.3: "sampling uniform, removal first-in-first-out".
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=config.replay_capacity,
            # NOT STATED: sampling starts once a batch's worth of distinct
            # trajectories is stored; never blocks inserts.
            rate_limiter=reverb.rate_limiters.MinSize(config.batch_size),
            max_times_sampled=0,
            signature=signature))
  return tables


def table_names(config: config_lib.ImpalaConfig) -> List[str]:
  """The tables each trajectory is written to (queue first)."""
  names = [config.queue_table_name]
  if config.use_replay:
    names.append(config.replay_table_name)
  return names


def _new_trajectory_writer(client: reverb.Client, num_keep_alive_refs: int,
                           should_stop: Callable[[], bool],
                           slice_ms: int) -> reverb.TrajectoryWriter:
  """A writer, once the server answers; waits in slices while it does not.

  Why: the writer fetches the tables' signatures from the server, by default
  within 3 s. In a program whose nodes all start at once the replay node may
  still be importing TensorFlow then (on a loaded 2-core host the call fails
  with "Deadline Exceeded"), so the actor waits for it instead.
  """
  while True:
    try:
      return client.trajectory_writer(
          num_keep_alive_refs=num_keep_alive_refs,
          get_signature_timeout_ms=max(slice_ms, 3000))
    except (RuntimeError, reverb.errors.ReverbError):
      if should_stop():
        raise
      time.sleep(slice_ms / 1000.0)


class UnrollWriter:
  """Writes one environment's unrolls; one item per table every n + 1 steps.

  `append(step, core_state)` adds step t (the fields of `STEP_FIELDS`) with
  the core state before x_t (stored for step 0 only). The append that makes
  n + 1 steps creates the item in every table and returns True; `wait()` then
  blocks until the server has taken it (a full queue blocks here: the
  paper's back-pressure) and starts the next unroll, whose first append must
  be the same observation again (the overlap; the actor does it, because
  that step's behaviour logits are computed with the next unroll's
  parameters, see agents/impala/actor.py).

  Waiting is done in slices of `wait_slice_ms`; `should_stop()` is checked in
  between, so a stopping actor never hangs on a full queue.
  """

  def __init__(self,
               client: reverb.Client,
               unroll_length: int,
               tables: Sequence[str],
               should_stop: Callable[[], bool] = lambda: False,
               wait_slice_ms: int = 1000):
    if unroll_length < 1:
      raise ValueError(f'unroll_length must be >= 1, got {unroll_length}.')
    if not tables:
      raise ValueError('UnrollWriter needs at least one table.')
    self._unroll_length = int(unroll_length)
    self._tables = list(tables)
    self._should_stop = should_stop
    self._wait_slice_ms = int(wait_slice_ms)
    self._writer = _new_trajectory_writer(client, self._unroll_length + 1,
                                          should_stop, self._wait_slice_ms)
    self._steps = 0
    self._pending = False
    self.items_written = 0

  @property
  def steps_in_unroll(self) -> int:
    """Steps appended to the current unroll (0 .. n + 1)."""
    return self._steps

  def append(self, step: Dict[str, Any], core_state: Any = ()) -> bool:
    """Appends one step; True if it completed an unroll (items created)."""
    if self._pending:
      raise RuntimeError('UnrollWriter.wait() must follow a completed unroll '
                         'before the next append.')
    data = dict(step)
    if self._steps == 0 and tree.flatten(core_state):
      data['core_state'] = core_state
    self._writer.append(data)
    self._steps += 1
    if self._steps < self._unroll_length + 1:
      return False
    n = self._unroll_length + 1
    history = self._writer.history
    trajectory = Trajectory(
        **{field: history[field][-n:] for field in STEP_FIELDS},
        core_state=(tree.map_structure(lambda column: column[-n],
                                       history['core_state'])
                    if 'core_state' in history else ()))
    for table in self._tables:
      self._writer.create_item(table=table, priority=1.0,
                               trajectory=trajectory)
    self._pending = True
    return True

  def wait(self) -> bool:
    """Blocks until the server took the unroll; False if stopped first.

    On True the next unroll starts (a new Reverb episode, so no item ever
    spans two unrolls' chunks). On False the unroll stays pending: call
    `wait()` again or `close()`.
    """
    if not self._pending:
      return True
    while True:
      try:
        self._writer.flush(timeout_ms=self._wait_slice_ms)
        break
      except reverb.errors.DeadlineExceededError:
        if self._should_stop():
          return False
    self._writer.end_episode(clear_buffers=True)
    self._pending = False
    self._steps = 0
    self.items_written += 1
    return True

  def close(self) -> None:
    self._writer.close()


def make_step(observation: Any, first: bool, last_action: int,
              last_reward: float, discount: float,
              behaviour_logits: np.ndarray,
              behaviour_version: Optional[int] = None) -> Dict[str, Any]:
  """One step with the signature's dtypes (version -1 when unknown)."""
  return dict(observation=np.asarray(observation),
              first=np.bool_(first),
              last_action=np.int32(last_action),
              last_reward=np.float32(last_reward),
              discount=np.float32(discount),
              behaviour_logits=np.asarray(behaviour_logits, np.float32),
              behaviour_version=np.int64(
                  -1 if behaviour_version is None else behaviour_version))


def _table_dataset(server_address: str, table: str, signature: Trajectory,
                   batch_size: int, fifo: bool,
                   rate_limiter_timeout_ms: int) -> tf.data.Dataset:
  dataset = reverb.TrajectoryDataset(
      server_address=server_address,
      table=table,
      dtypes=tree.map_structure(lambda s: s.dtype, signature),
      shapes=tree.map_structure(lambda s: s.shape, signature),
      # A queue's in-flight samples have already left the queue: keep them
      # to one batch. Reverb requires one worker for a FIFO sampler.
      max_in_flight_samples_per_worker=batch_size,
      num_workers_per_iterator=1 if fifo else -1,
      rate_limiter_timeout_ms=rate_limiter_timeout_ms)
  dataset = dataset.map(lambda sample: sample.data)
  return dataset.batch(batch_size, drop_remainder=True)


def make_dataset(server_address: str,
                 config: config_lib.ImpalaConfig,
                 signature: Trajectory,
                 rate_limiter_timeout_ms: int = -1) -> tf.data.Dataset:
  """Batches of `Trajectory`, batch-major [B, n + 1, ...], for the learner.

  With `config.replay_proportion` p > 0, each batch is B(1 - p) trajectories
  from the queue followed by B p drawn uniformly from the replay (Sec. 5.2.2).
  Observations stay in their stored dtype (uint8 frames); `prefetch_batches`
  batches are prepared while the learner trains ([CODE]'s StagingArea: 1).

  Building the dataset does not contact the server: the signature is given.
  `rate_limiter_timeout_ms` (-1: wait forever) ends the dataset when no item
  arrives in time.
  """
  dataset = _table_dataset(server_address, config.queue_table_name, signature,
                           config.queue_batch_size, fifo=True,
                           rate_limiter_timeout_ms=rate_limiter_timeout_ms)
  if config.use_replay:
    replay = _table_dataset(server_address, config.replay_table_name,
                            signature, config.replay_batch_size, fifo=False,
                            rate_limiter_timeout_ms=rate_limiter_timeout_ms)
    dataset = tf.data.Dataset.zip((dataset, replay)).map(
        lambda fresh, replayed: tree.map_structure(
            lambda a, b: tf.concat([a, b], axis=0), fresh, replayed))
  if config.prefetch_batches:
    dataset = dataset.prefetch(config.prefetch_batches)
  return dataset


def server_sizes(client: reverb.Client, config: config_lib.ImpalaConfig,
                 timeout_s: int = 5) -> Dict[str, int]:
  """Current sizes and insert/sample counts of the tables (for reports)."""
  info = client.server_info(timeout=timeout_s)
  result = {}
  for name, key in ((config.queue_table_name, 'queue'),
                    (config.replay_table_name, 'replay')):
    if name in info:
      table = info[name]
      limiter = table.rate_limiter_info
      result[f'{key}_size'] = int(table.current_size)
      result[f'{key}_inserted'] = int(limiter.insert_stats.completed)
      result[f'{key}_sampled'] = int(limiter.sample_stats.completed)
  return result

