"""Ape-X DQN's replay on real Reverb servers (no mocks).

Reverb's samplers cannot be seeded from Python, so the statistical check uses
a tolerance of several standard deviations instead of a fixed seed.
"""

import collections
import dataclasses

import numpy as np
import pytest
import reverb
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import replay
from agents.apex_dqn import targets
from agents.replay import png
from agents.replay import prioritized


def _config(**overrides):
  settings = dict(replay_soft_capacity=20, min_replay_size=1, batch_size=1,
                  compress_observations=False)
  settings.update(overrides)
  return config_lib.ApeXDQNConfig.local(**settings)


def _small_signature(compressed=False):
  return replay.transition_signature(observation_shape=(2, 2, 1),
                                     compressed=compressed)


def _transition(actor_id, step, compressed=False):
  obs = np.full((2, 2, 1), step % 256, np.uint8)
  if compressed:
    obs = png.encode_observation(obs)
  return replay.to_replay_transition(obs, step % 4, 0.5, 0.9, obs,
                                     actor_id=actor_id, actor_step=step)


class _Server:
  """A Reverb server that is always stopped, even when a test fails."""

  def __init__(self, tables):
    self.server = reverb.Server(tables)
    self.address = f'localhost:{self.server.port}'
    self.client = reverb.Client(self.address)

  def __enter__(self):
    return self

  def __exit__(self, *_):
    self.server.stop()


def _write(client, table, transitions, priorities):
  # A writer object that outlives its `with` block keeps its stream open and
  # makes `Server.stop()` wait 5 s: keep writers local to a function.
  with client.trajectory_writer(num_keep_alive_refs=1) as writer:
    prioritized.write_items(writer, table, transitions, priorities)
    # Raises DeadlineExceeded if the server held any insert back.
    writer.flush(timeout_ms=10_000)


def _sample(client, table, num):
  return list(client.sample(table, num, emit_timesteps=False,
                            unpack_as_table_signature=True))


def test_provenance_round_trip():
  p = prioritized.make_provenance(359, 16_000_000)
  assert p.dtype == np.int64 and p > 0
  actor, step = prioritized.split_provenance(
      [p, prioritized.make_provenance(0, 7)])
  np.testing.assert_array_equal(actor, [359, 0])
  np.testing.assert_array_equal(step, [16_000_000, 7])
  with pytest.raises(ValueError):
    prioritized.make_provenance(-1, 0)
  with pytest.raises(ValueError):
    prioritized.make_provenance(0, 1 << 40)


def test_paper_table_settings():
  (table,) = replay.make_replay_tables(config_lib.ApeXDQNConfig.paper())
  info = table.info
  assert info.name == 'priority_table'
  assert info.max_size == 2_000_000
  assert info.sampler_options.prioritized.priority_exponent == pytest.approx(
      0.6)
  assert info.remover_options.fifo
  assert info.rate_limiter_info.min_size_to_sample == 50_000
  assert info.max_times_sampled == 0
  # Compressed observations: one PNG string per state.
  assert info.signature.observation.dtype == tf.string


def test_capacity_removes_exactly_the_oldest_excess_and_never_refuses():
  config = _config()
  cap = config.replay_soft_capacity
  with _Server(replay.make_replay_tables(config, _small_signature())) as s:
    table = config.replay_table_name
    # Two actors, 3x the capacity, in batches of B = 5; none is refused.
    written = [(actor, step) for step in range(30) for actor in (0, 1)]
    for start in range(0, len(written), 5):
      chunk = written[start:start + 5]
      _write(s.client, table, [_transition(a, t) for a, t in chunk],
             [1.0] * len(chunk))
    info = s.client.server_info()[table]
    assert info.current_size == cap
    assert info.rate_limiter_info.insert_stats.completed == len(written)
    # Exactly the newest `cap` items remain: the oldest were removed first.
    seen = set()
    for sample in _sample(s.client, table, 3000):
      actor, step = prioritized.split_provenance(
          sample.data.extras['provenance'])
      seen.add((int(actor), int(step)))
      assert sample.info.table_size == cap
    assert seen == set(written[-cap:])


def test_keys_are_per_table_and_random():
  """Why the capacity is the FIFO remover and not an external trimmer.

  The same step written into two tables gets unrelated keys, so a Fifo
  "index" table cannot tell which keys of the prioritised table are oldest
  (see agents/apex_dqn/replay.py). If Reverb ever shares keys across tables,
  this fails and the trimmer design can be revisited.
  """
  signature = _small_signature()
  tables = [
      reverb.Table(name, sampler, reverb.selectors.Fifo(), 10,
                   reverb.rate_limiters.MinSize(1), signature=signature)
      for name, sampler in (('prioritized', reverb.selectors.Prioritized(0.6)),
                            ('fifo_index', reverb.selectors.Fifo()))
  ]

  def write_one_step_into_both(client):
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
      writer.append(_transition(0, 0))
      step = tf.nest.map_structure(lambda c: c[-1], writer.history)
      writer.create_item('prioritized', 1.0, step)
      writer.create_item('fifo_index', 1.0, step)
      writer.flush()

  with _Server(tables) as s:
    write_one_step_into_both(s.client)
    (a,) = _sample(s.client, 'prioritized', 1)
    (b,) = _sample(s.client, 'fifo_index', 1)
    assert (int(a.data.extras['provenance']) ==
            int(b.data.extras['provenance']))
    assert a.info.key != b.info.key


def test_accumulator_output_round_trips_with_provenance():
  config = _config(compress_observations=True)
  frames = [np.full((84, 84, 4), 10 * t, np.uint8) for t in range(6)]
  acc = targets.NStepAccumulator(n=3, discount=0.99)
  acc.start(png.encode_observation(frames[0]))
  out = []
  for t in range(5):
    out += acc.step(t % 3, 1.0, 0.0 if t == 4 else 1.0,
                    png.encode_observation(frames[t + 1]), last=t == 4)
  items = [replay.from_nstep_transition(tr, actor_id=7) for tr in out]
  with _Server(replay.make_replay_tables(config)) as s:
    table = config.replay_table_name
    _write(s.client, table, items, [1.0] * len(items))
    by_step = {}
    for sample in _sample(s.client, table, 300):
      actor, step = prioritized.split_provenance(
          sample.data.extras['provenance'])
      assert int(actor) == 7
      by_step[int(step)] = sample.data
  assert sorted(by_step) == [0, 1, 2, 3, 4]
  for tr in out:
    data = by_step[tr.step]
    np.testing.assert_array_equal(
        png.decode_observation(data.observation), frames[tr.step])
    np.testing.assert_array_equal(
        png.decode_observation(data.next_observation),
        frames[tr.step + tr.num_steps])
    assert float(data.reward) == pytest.approx(tr.reward)
    assert float(data.discount) == pytest.approx(tr.discount)
    assert int(data.action) == tr.action


def test_prioritized_sampling_follows_p_to_the_alpha():
  config = _config()
  alpha = config.priority_exponent
  priorities = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 8.0])
  expected = priorities**alpha / np.sum(priorities**alpha)
  with _Server(replay.make_replay_tables(config, _small_signature())) as s:
    table = config.replay_table_name
    _write(s.client, table, [_transition(0, t) for t in range(6)], priorities)
    num = 10_000
    counts = collections.Counter()
    for sample in _sample(s.client, table, num):
      step = int(prioritized.split_provenance(
          sample.data.extras['provenance'])[1])
      counts[step] += 1
      # Reverb reports P(i) exactly; the learner's IS weights rely on it.
      assert sample.info.probability == pytest.approx(expected[step],
                                                      rel=1e-6)
    freq = np.array([counts[i] for i in range(6)]) / num
    # Binomial std <= 0.0049 at n = 10000: 0.03 is more than 6 sigma, so a
    # false failure is a ~1e-8 event (at 6000 draws it was 4.8 sigma, 1e-5).
    np.testing.assert_allclose(freq, expected, atol=0.03)


def test_priority_updates_change_sampling():
  config = _config()
  with _Server(replay.make_replay_tables(config, _small_signature())) as s:
    table = config.replay_table_name
    _write(s.client, table, [_transition(0, t) for t in range(4)], [1.0] * 4)
    keys = {}
    for sample in _sample(s.client, table, 400):
      step = int(prioritized.split_provenance(
          sample.data.extras['provenance'])[1])
      keys[step] = int(sample.info.key)
    assert sorted(keys) == [0, 1, 2, 3]
    # The learner writes back |delta|: step 2 becomes dominant.
    s.client.mutate_priorities(table, updates={keys[2]: 100.0})
    samples = _sample(s.client, table, 2000)
    p2 = 100.0**0.6 / (100.0**0.6 + 3.0)
    share = np.mean([
        int(prioritized.split_provenance(x.data.extras['provenance'])[1]) == 2
        for x in samples
    ])
    # Binomial std 0.0082 at n = 2000: 0.05 is more than 6 sigma.
    assert share == pytest.approx(p2, abs=0.05)
    first = next(x for x in samples if int(x.info.key) == keys[2])
    assert first.info.priority == pytest.approx(100.0)


def test_dataset_decodes_png_and_gives_importance_weight_inputs():
  config = _config(compress_observations=True, batch_size=4,
                   min_replay_size=4, prefetch_batches=1)
  rng = np.random.default_rng(0)
  observations = [rng.integers(0, 256, (84, 84, 4), dtype=np.uint8)
                  for _ in range(6)]
  with _Server(replay.make_replay_tables(config)) as s:
    table = config.replay_table_name
    transitions = [
        replay.to_replay_transition(
            png.encode_observation(observations[t]), t, float(t), 0.9,
            png.encode_observation(observations[t + 1]), actor_id=3,
            actor_step=t) for t in range(5)
    ]
    _write(s.client, table, transitions, [1.0, 2.0, 3.0, 4.0, 5.0])
    dataset = replay.make_dataset(s.address, config)
    batch = next(iter(dataset))
    assert batch.data.observation.dtype == tf.uint8
    assert batch.data.observation.shape == (4, 84, 84, 4)
    actors, steps = prioritized.split_provenance(
        batch.data.extras['provenance'].numpy())
    assert np.all(actors == 3)
    for i, t in enumerate(steps):
      np.testing.assert_array_equal(batch.data.observation[i],
                                    observations[t])
      np.testing.assert_array_equal(batch.data.next_observation[i],
                                    observations[t + 1])
      assert int(batch.data.action[i]) == t
    weights = targets.importance_weights(batch.info.probability,
                                         batch.info.table_size,
                                         config.importance_sampling_exponent)
    assert weights.shape == (4,) and float(tf.reduce_max(weights)) == 1.0


def test_negative_priority_exponent_rejected_before_reverb():
  # Reverb's Prioritized selector CHECK-fails on a negative exponent and
  # aborts the whole server process.
  with pytest.raises(ValueError, match='priority_exponent'):
    dataclasses.replace(config_lib.ApeXDQNConfig.paper(),
                        priority_exponent=-0.4)
