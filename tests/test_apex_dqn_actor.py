"""The Ape-X DQN actor against a real Reverb server.

The central check: the initial priority the actor stores for each transition
equals |G - q(S_t, A_t)| with the double-Q bootstrap, recomputed here from the
replay's own contents with plain numpy and the actor's network parameters.
That is what the learner computes for the same parameters and data (with the
target network equal to the online one, as an actor has no target network).
"""

import collections

import numpy as np
import pytest
import reverb
import sonnet as snt
import tensorflow as tf

from agents.apex_dqn import actor as actor_lib
from agents.apex_dqn import config as config_lib
from agents.apex_dqn import replay
from agents.replay import prioritized
from networks import dqn
from reproductions import environments


class CatchQNetwork(snt.Module):
  """Small Q-network for Catch boards stored as uint8 (0/1 cells)."""

  def __init__(self, num_actions=3):
    super().__init__()
    self._mlp = snt.nets.MLP([32, num_actions])

  def __call__(self, observation):
    x = tf.cast(snt.Flatten()(observation), tf.float32)
    return self._mlp(x)


class CountingCounter:

  def __init__(self):
    self.counts = collections.Counter()

  def increment(self, **counts):
    self.counts.update(counts)


def _config(**overrides):
  # A minimum of 1 lets the test sample every item it wrote.
  settings = dict(num_actors=4, n_step=3, discount=0.9, min_replay_size=1,
                  batch_size=1, replay_soft_capacity=10_000,
                  compress_observations=False, actor_send_batch_size=10,
                  actor_buffer_size=20)
  settings.update(overrides)
  return config_lib.ApeXDQNConfig.local(**settings)


class UInt8Catch:
  """Catch with its 0/1 board as uint8, the dtype the replay stores."""

  def __init__(self, seed):
    self._env = environments.make_environment('catch', seed=seed)

  def _cast(self, timestep):
    return timestep._replace(observation=timestep.observation.astype(np.uint8))

  def reset(self):
    return self._cast(self._env.reset())

  def step(self, action):
    return self._cast(self._env.step(action))

  def observation_spec(self):
    spec = self._env.observation_spec()
    return spec.replace(dtype=np.uint8)

  def action_spec(self):
    return self._env.action_spec()


@pytest.fixture
def catch_server():
  # Priority exponent 0: every stored item is drawn uniformly (|delta| itself
  # is unaffected), and the sums of Reverb's tree stay exact integers while
  # `_all_items` takes the items out of the draw one by one.
  config = _config(priority_exponent=0.0)
  signature = replay.transition_signature((10, 5), compressed=False)
  server = reverb.Server(replay.make_replay_tables(config, signature))
  client = reverb.Client(f'localhost:{server.port}')
  yield config, client
  server.stop()


def _all_items(client, table, expected):
  """Every item of the table with its priority, each read exactly once.

  Random draws could miss an item, so each sampled item is taken out of the
  draw: its priority is recorded, then set to 0 (weight 0 even with priority
  exponent 0), so the next sample is one not seen yet (exactly: with
  exponent 0 the tree sums are small integers). A repeat means the rest have
  priority 0. This overwrites the table's priorities.
  """
  items = {}
  for _ in range(expected + 1):
    if len(items) == expected:
      break
    (sample,) = client.sample(table, num_samples=1, emit_timesteps=False,
                              unpack_as_table_signature=True)
    key = int(sample.info.key)
    if key in items:
      break
    d = sample.data
    data = [np.asarray(d.observation), np.asarray(d.action),
            np.asarray(d.reward), np.asarray(d.discount),
            np.asarray(d.next_observation),
            {'provenance': np.asarray(d.extras['provenance']),
             'learner_step': int(np.asarray(d.extras['learner_step']))}]
    items[key] = (float(sample.info.priority), data)
    client.mutate_priorities(table, updates={key: 0.0})
  return items


def _numpy_double_q_priority(network, data):
  q_t = network(tf.constant(data[0][None])).numpy()[0]
  q_next = network(tf.constant(data[4][None])).numpy()[0]
  action, reward, discount = int(data[1]), float(data[2]), float(data[3])
  bootstrap = q_next[int(np.argmax(q_next))]  # selector = evaluator (no target)
  return abs(reward + discount * bootstrap - q_t[action])


def test_initial_priorities_equal_the_double_q_td_error(catch_server):
  config, client = catch_server
  network = CatchQNetwork()
  counter = CountingCounter()
  actor = actor_lib.ApeXDQNActor(UInt8Catch(seed=1), network, client, config,
                                 actor_id=2, counter=counter,
                                 frames_per_step=1)
  steps = 0
  for _ in range(5):
    steps += actor.run_episode()['episode_steps']
  actor.flush()

  info = client.server_info()[config.replay_table_name]
  # One n-step transition per agent step (episodes end with the tail flushed).
  assert info.current_size == steps == 45
  items = _all_items(client, config.replay_table_name, steps)
  assert len(items) == steps
  provenance_steps = []
  for priority, data in items.values():
    expected = _numpy_double_q_priority(network, data)
    assert priority == pytest.approx(expected, rel=1e-5, abs=1e-6)
    actor_id, step = prioritized.split_provenance(data[5]['provenance'])
    assert int(actor_id) == 2
    provenance_steps.append(int(step))
  assert sorted(provenance_steps) == list(range(steps))
  assert counter.counts['actor_episodes'] == 5
  assert counter.counts['actor_steps'] == steps


def test_truncated_episodes_bootstrap_their_priorities_from_their_own_state(
    catch_server):
  """A time-limit cut-off (Ape-X's 50,000-frame cap) bootstraps from x_T.

  Catch's 9-step episodes are cut at 4 steps, so every episode's tail has a
  non-zero discount, and its transitions wait in the actor's send buffer
  (batches of 10) while the next episode starts: their priorities must still
  come from the truncated state's Q-values, not the next episode's first.
  """
  config, client = catch_server
  network = CatchQNetwork()
  actor = actor_lib.ApeXDQNActor(UInt8Catch(seed=3), network, client, config,
                                 actor_id=1, frames_per_step=1)
  for _ in range(5):
    assert actor.run_episode(max_steps=4)['episode_steps'] == 4
  actor.flush()
  items = _all_items(client, config.replay_table_name, 20)
  assert len(items) == 20
  bootstrapped = 0
  for priority, data in items.values():
    bootstrapped += float(data[3]) > 0.0
    expected = _numpy_double_q_priority(network, data)
    assert priority == pytest.approx(expected, rel=1e-5, abs=1e-6)
  assert bootstrapped == 20  # No episode reached its terminal step.


class _VersionedSource:
  """A learner stand-in serving a network's values as learner step 7."""

  def __init__(self, network):
    self._network = network

  def get_variables(self, names):
    assert names == ['policy', 'version']
    return [[v.numpy() for v in self._network.variables],
            [np.asarray(7, np.int64)]]


def test_items_carry_the_learner_step_of_the_parameters_that_acted(
    catch_server):
  config, client = catch_server
  learner_network = CatchQNetwork()
  learner_network(tf.zeros([1, 10, 5]))
  actor = actor_lib.ApeXDQNActor(
      UInt8Catch(seed=4), CatchQNetwork(), client, config, actor_id=0,
      frames_per_step=1, variable_source=_VersionedSource(learner_network))
  actor.update_parameters()
  steps = actor.run_episode()['episode_steps']
  actor.flush()
  items = _all_items(client, config.replay_table_name, steps)
  assert {data[5]['learner_step'] for _, data in items.values()} == {7}


def test_epsilon_follows_the_paper_schedule(catch_server):
  config, client = catch_server
  for i in range(config.num_actors):
    actor = actor_lib.ApeXDQNActor(UInt8Catch(seed=i), CatchQNetwork(), client,
                                   config, actor_id=i)
    assert actor.epsilon == pytest.approx(0.4 ** (1 + 7 * i / 3))
  with pytest.raises(ValueError, match='actor_id'):
    actor_lib.ApeXDQNActor(UInt8Catch(seed=0), CatchQNetwork(), client, config,
                           actor_id=4)


def test_transitions_are_sent_in_batches_of_b(catch_server):
  config, client = catch_server
  actor = actor_lib.ApeXDQNActor(UInt8Catch(seed=3), CatchQNetwork(), client,
                                 config, actor_id=0)
  actor.run_episode()  # 9 steps: fewer than B = 10, nothing sent yet
  actor.wait_for_sends()
  assert client.server_info()[config.replay_table_name].current_size == 0
  actor.run_episode()  # 18 transitions: one batch of 10 sent, 8 buffered
  actor.wait_for_sends()
  assert client.server_info()[config.replay_table_name].current_size == 10
  actor.flush()
  assert client.server_info()[config.replay_table_name].current_size == 18


def test_png_compressed_atari_transitions_round_trip():
  config = _config(compress_observations=True)
  server = reverb.Server(replay.make_replay_tables(config))
  try:
    client = reverb.Client(f'localhost:{server.port}')
    environment = environments.make_environment(
        'atari/pong', config=environments.AtariConfig.apex_training(), seed=0)
    network = dqn.DuelingDQN(environment.action_spec().num_values)
    actor = actor_lib.ApeXDQNActor(environment, network, client, config,
                                   actor_id=3)
    actor.run_episode(max_steps=40)
    actor.flush()
    assert client.server_info()[config.replay_table_name].current_size == 40
    dataset = replay.make_dataset(client.server_address, config,
                                  batch_size=8, prefetch_batches=0)
    sample = next(iter(dataset))
    observation = sample.data.observation.numpy()
    assert observation.shape == (8, 84, 84, 4) and observation.dtype == np.uint8
    # Stored priorities match the network on the decoded frames.
    for i in range(8):
      data = [x[i].numpy() for x in (
          sample.data.observation, sample.data.action, sample.data.reward,
          sample.data.discount, sample.data.next_observation)]
      expected = _numpy_double_q_priority(network, data)
      assert float(sample.info.priority[i]) == pytest.approx(
          expected, rel=1e-4, abs=1e-5)
  finally:
    server.stop()


def test_lanes_of_one_process_keep_their_own_actor_semantics(catch_server):
  """Several of the paper's actors in one process: own epsilon, provenance,
  n-step stream and priorities; one forward pass per step covers them all."""
  config, client = catch_server
  network = CatchQNetwork()
  counter = CountingCounter()
  ids = [1, 3]
  actor = actor_lib.ApeXDQNActor([UInt8Catch(seed=5), UInt8Catch(seed=6)],
                                 network, client, config, actor_id=ids,
                                 counter=counter, frames_per_step=1)
  assert actor.actor_ids == ids
  finished = []
  while len(finished) < 6:
    finished.extend(actor.step())
  actor.flush()
  report = actor.report()
  assert [lane['actor_id'] for lane in report['actors']] == ids
  for lane, i in zip(report['actors'], ids):
    assert lane['epsilon'] == pytest.approx(0.4 ** (1 + 7 * i / 3))
  assert {r['actor_id'] for r in finished} == set(ids)
  steps = {i: report['actors'][k]['steps'] for k, i in enumerate(ids)}
  info = client.server_info()[config.replay_table_name]
  assert info.current_size == sum(steps.values())
  items = _all_items(client, config.replay_table_name, info.current_size)
  per_actor = collections.defaultdict(list)
  for priority, data in items.values():
    assert priority == pytest.approx(_numpy_double_q_priority(network, data),
                                     rel=1e-5, abs=1e-6)
    actor_id, step = prioritized.split_provenance(data[5]['provenance'])
    per_actor[int(actor_id)].append(int(step))
  for i in ids:  # each lane's items are numbered 0..steps-1 by its own clock
    assert sorted(per_actor[i]) == list(range(steps[i]))
  assert counter.counts['actor_episodes'] == len(finished)
  with pytest.raises(ValueError, match='one id per'):
    actor_lib.ApeXDQNActor([UInt8Catch(seed=5)], network, client, config,
                           actor_id=[1, 2])


def test_app_a_copies_and_app_b_fixed_epsilon_set():
  """Fig. 6: each transition stored k times; Fig. 7: six epsilons, cycled."""
  config = _config(transition_copies=3, num_actors=8,
                   epsilon_variant='fixed_set')
  six = [0.4 ** (1 + 7 * i / 5) for i in range(6)]
  assert list(config.epsilons) == pytest.approx(six + six[:2])
  with pytest.raises(ValueError, match='per_actor'):
    _config(epsilon_variant='three')
  server = reverb.Server(replay.make_replay_tables(
      config, replay.transition_signature((10, 5), compressed=False)))
  try:
    client = reverb.Client(f'localhost:{server.port}')
    actor = actor_lib.ApeXDQNActor(UInt8Catch(seed=2), CatchQNetwork(), client,
                                   config, actor_id=7)
    assert actor.epsilon == pytest.approx(six[1])
    steps = actor.run_episode()['episode_steps']
    actor.flush()
    size = client.server_info()[config.replay_table_name].current_size
    assert size == 3 * steps
  finally:
    server.stop()
