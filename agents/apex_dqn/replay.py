"""Ape-X DQN's replay policy on Reverb: one prioritised table, FIFO capacity.

What the paper specifies (Ape-X Sec. 4.1 and App. F):
  * proportional prioritisation: P(k) = p_k^alpha / sum_j p_j^alpha, with
    p_k = |delta_k| and alpha = 0.6; initial priorities come from the actors,
    the learner overwrites the priorities of the items it trains on;
  * a capacity "soft-limited to 2 million transitions: adding new data is
    always permitted, to not slow down the actors, but every 100 learning
    steps any excess data above this capacity threshold is removed en masse,
    in FIFO order. The median actual size of the memory is 2035050.";
  * a unique key per transition "which records which actor and environment
    step it came from";
  * observations PNG-compressed in transit and in storage.

What is built here, and why
---------------------------
One Reverb table, `Prioritized(alpha)` sampler, `Fifo` remover,
`max_size = replay_soft_capacity`, `MinSize(min_replay_size)` rate limiter.

The capacity is enforced by Reverb's FIFO remover on every insert, i.e. the
paper's removal rule with its removal period shrunk from 100 learner steps to
a single insert. How that matches the paper:
  * inserts are never refused or delayed: `MinSize` never blocks writers, and
    a full table makes room instead of refusing (tested above capacity);
  * removal is oldest-first and removes exactly the excess over the cap;
  * sampling, priorities and keys are otherwise untouched.
How it differs:
  * the table never holds more than the cap. The paper's table held between
    2M and 2M + one removal period of inserts (~100 learner steps / 19 per s
    * 12.5K transitions/s ~= 66K); its median 2,035,050 is 1.75% above the
    cap. The items we lack are, at any moment, the oldest 0-3.3% of what the
    paper's memory held;
  * removal costs one O(log N) heap update per insert instead of one bulk
    delete per period: in Reverb that is cheaper, not dearer, which is why
    the paper's batching (a throughput device for its own key-value store,
    App. F "Contention") has no counterpart here.

Why not a separate trimmer that deletes the excess every 100 learner steps:
Reverb 0.7 lets a client delete items only by key (`mutate_priorities`), and
reveals keys only to whoever samples the item. Keys are random uint64 drawn
per item *and per table*: the same step written into two tables gets two
unrelated keys (pinned by tests/test_apex_dqn_replay.py). A trimmer therefore
cannot learn which keys of a prioritised table are the oldest: sampling a
`Fifo`-selector "index" table yields the index table's own keys, and
deleting those leaves the prioritised table's copies in place; sampling the
prioritised table yields keys in priority order, not age order. Bulk FIFO
deletion would need a server-side C++ TableExtension, which Reverb's Python
API does not expose. The remover is the one FIFO mechanism Reverb offers on
a prioritised table, so it is what we use.

Provenance, the batched sender and the priority write-back are Ape-X DQN's
and Ape-X DPG's alike: agents/replay/prioritized.py.
"""

from typing import List, Optional, Sequence

from acme import types
import numpy as np
import reverb
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import targets
from agents.replay import png
from agents.replay import prioritized

# --- Signature and tables. -------------------------------------------------


def transition_signature(
    observation_shape: Sequence[int] = png.ATARI_OBSERVATION_SHAPE,
    compressed: bool = True) -> types.Transition:
  """The stored item: (S_t, A_t, R_{t:t+n}, gamma_{t:t+n}, S_{t+n}) (App. F).

  Both states are stored (the paper: "we are storing some data twice: this
  costs more RAM, but simplifies the code"). With `compressed`, each state is
  one PNG string (agents/replay/png.py); otherwise uint8 frames.

  Returns:
    acme.types.Transition of tf.TensorSpec, with extras {'provenance',
    'learner_step'}: where the transition came from, and the learner step of
    the parameters its actor acted with (-1 if unknown), from which the
    learner logs the age of what it samples.
  """
  if compressed:
    observation = tf.TensorSpec([], tf.string, name='observation')
  else:
    observation = tf.TensorSpec(list(observation_shape), tf.uint8,
                                name='observation')
  return types.Transition(
      observation=observation,
      action=tf.TensorSpec([], tf.int32, name='action'),
      reward=tf.TensorSpec([], tf.float32, name='reward'),
      discount=tf.TensorSpec([], tf.float32, name='discount'),
      next_observation=observation,
      extras={'provenance': tf.TensorSpec([], tf.int64, name='provenance'),
              'learner_step': tf.TensorSpec([], tf.int64,
                                            name='learner_step')})


def make_replay_tables(
    config: config_lib.ApeXDQNConfig,
    signature: Optional[types.Transition] = None) -> List[reverb.Table]:
  """The Reverb tables of Ape-X DQN (see the module docstring).

  Args:
    config: provides table name, alpha, soft capacity and minimum size.
    signature: item signature; defaults to `transition_signature` for
      84x84x4 frames, compressed as `config.compress_observations` says.

  Returns:
    [the prioritised table].
  """
  config.validate()
  if signature is None:
    signature = transition_signature(compressed=config.compress_observations)
  return [
      prioritized.make_table(
          config.replay_table_name,
          # Sec. 4.1: proportional prioritisation, exponent 0.6.
          priority_exponent=config.priority_exponent,
          # Sec. 4.1: excess removed "in FIFO order"; per insert, see above.
          max_size=config.replay_soft_capacity,
          # App. C: the learner waits for 50K transitions.
          min_size=config.min_replay_size,
          signature=signature)
  ]


# --- Writing (actor side). -------------------------------------------------


def to_replay_transition(observation,
                         action: int,
                         reward: float,
                         discount: float,
                         next_observation,
                         actor_id: int,
                         actor_step: int,
                         learner_step: int = -1) -> types.Transition:
  """Builds one item with the signature's dtypes.

  Observations are either PNG bytes (compressed tables) or uint8 arrays.
  """

  def as_observation(x):
    if isinstance(x, (bytes, np.bytes_)):
      return np.array(bytes(x), dtype=object)
    return np.asarray(x, dtype=np.uint8)

  return types.Transition(
      observation=as_observation(observation),
      action=np.int32(action),
      reward=np.float32(reward),
      discount=np.float32(discount),
      next_observation=as_observation(next_observation),
      extras={'provenance': prioritized.make_provenance(actor_id,
                                                             actor_step),
              'learner_step': np.int64(learner_step)})


def from_nstep_transition(transition: targets.NStepTransition,
                          actor_id: int,
                          learner_step: int = -1) -> types.Transition:
  """The replay item of an `NStepAccumulator` output, with its provenance."""
  return to_replay_transition(
      transition.observation, transition.action, transition.reward,
      transition.discount, transition.next_observation, actor_id=actor_id,
      actor_step=transition.step, learner_step=learner_step)


# --- Reading (learner side). -----------------------------------------------


def make_dataset(server_address: str,
                 config: config_lib.ApeXDQNConfig,
                 observation_shape: Sequence[int] = png.ATARI_OBSERVATION_SHAPE,
                 batch_size: Optional[int] = None,
                 prefetch_batches: Optional[int] = None,
                 rate_limiter_timeout_ms: int = -1) -> tf.data.Dataset:
  """Batches of prioritised samples, PNGs decoded on CPU threads (App. F).

  Each element is a `reverb.ReplaySample` whose `info` holds key, probability
  and table_size per item (for priority updates and importance weights, see
  targets.importance_weights) and whose `data` is a Transition with uint8
  observations of `observation_shape`. Decoding happens per item in parallel
  map calls before batching, and `prefetch_batches` batches (16 in the paper)
  are kept ready, so decompression overlaps the learner's updates.

  `rate_limiter_timeout_ms` (default -1: wait forever) bounds how long a
  sample may wait on the table's rate limiter (below `min_replay_size`); on
  timeout the dataset ends, so a learner that rebuilds its iterator (see
  agents/apex_dqn/learning.py) can notice a stop request while it waits for
  a restarted replay to refill (App. F "Failure Tolerance").
  """
  batch_size = config.batch_size if batch_size is None else batch_size
  prefetch_batches = (config.prefetch_batches if prefetch_batches is None
                      else prefetch_batches)
  dataset = reverb.TrajectoryDataset.from_table_signature(
      server_address=server_address,
      table=config.replay_table_name,
      max_in_flight_samples_per_worker=2 * batch_size,
      rate_limiter_timeout_ms=rate_limiter_timeout_ms)

  if config.compress_observations:
    shape = tuple(observation_shape)

    def decode(sample: reverb.ReplaySample) -> reverb.ReplaySample:
      data = sample.data._replace(
          observation=png.tf_decode_observation(sample.data.observation,
                                                shape),
          next_observation=png.tf_decode_observation(
              sample.data.next_observation, shape))
      return sample._replace(data=data)

    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
  dataset = dataset.batch(batch_size, drop_remainder=True)
  if prefetch_batches:
    dataset = dataset.prefetch(prefetch_batches)
  return dataset
