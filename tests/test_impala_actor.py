"""The IMPALA actor and queue against a real Reverb server.

A scripted environment logs every transition it makes; the test reads the
queue back and checks the stored unrolls against that log (n + 1 steps, the
one-step overlap, episode boundaries), the behaviour logits against the
network recomputed here with the parameters the actor fetched for each
unroll, and the initial core state against the LSTM state carried through
the previous unroll.
"""

import collections
import threading
import time

from acme.utils import counting
import dm_env
from dm_env import specs
import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

from agents.impala import actor as actor_lib
from agents.impala import config as config_lib
from agents.impala import queue as queue_lib
from networks import impala as impala_networks

NUM_ACTIONS = 3
UNROLL = 6


class ScriptedEnvironment(dm_env.Environment):
  """Features [env_id, step in episode, total steps, episode]; fixed lengths.

  Odd episodes end by termination (discount 0), even ones by truncation
  (discount 1). Rewards depend on the action and the step, and reach
  beyond [-1, 1]. Every transition is logged.
  """

  def __init__(self, env_id, episode_length=4):
    self.env_id = env_id
    self.episode_length = episode_length
    self.total = 0
    self.episode = 0
    self.t = 0
    self.log = []  # (observation, action, reward, ended) per transition.
    self.returns = []
    self._return = 0.0

  def _obs(self):
    return np.array([self.env_id, self.t, self.total, self.episode],
                    np.float32)

  def reset(self):
    self.episode += 1
    self.t = 0
    self._return = 0.0
    return dm_env.restart(self._obs())

  def step(self, action):
    before = self._obs()
    self.t += 1
    self.total += 1
    reward = float(action) - 1.5 + 0.25 * (self.total % 3)
    self._return += reward
    ended = self.t == self.episode_length
    self.log.append((before, int(action), reward, ended))
    if not ended:
      return dm_env.transition(reward, self._obs())
    self.returns.append(self._return)
    if self.episode % 2:
      return dm_env.termination(reward, self._obs())
    return dm_env.truncation(reward, self._obs())

  def observation_spec(self):
    return specs.Array((4,), np.float32)

  def action_spec(self):
    return specs.DiscreteArray(NUM_ACTIONS, dtype=np.int32)


class ChangingSource:
  """A variable source whose parameters change at every fetch."""

  def __init__(self, network):
    self.base = [v.numpy() for v in network.variables]
    self.calls = 0

  def params(self, call):
    return [b * (1.0 + 0.2 * call) + 0.01 * call for b in self.base]

  def get_variables(self, names):
    self.calls += 1
    values = {'policy': self.params(self.calls),
              'version': [np.int64(100 + self.calls)]}
    return [values[name] for name in names]


def _config(**overrides):
  settings = dict(network='mlp', mlp_sizes=(8,), use_lstm=False, lstm_size=5,
                  unroll_length=UNROLL, batch_size=2, queue_capacity=64,
                  action_repeat=1, jit_compile=False)
  settings.update(overrides)
  return config_lib.ImpalaConfig.local(**settings)


class Setup:
  """A Reverb server with the config's tables, an actor and its envs."""

  def __init__(self, config, num_envs=1, source=None, counter=None,
               logger=None, episode_length=4, after_first_unroll=None):
    self.config = config
    self.network = impala_networks.make_network_from_config(config,
                                                            NUM_ACTIONS)
    self.envs = [ScriptedEnvironment(i, episode_length)
                 for i in range(num_envs)]
    self.signature = queue_lib.trajectory_signature(
        self.envs[0].observation_spec(), NUM_ACTIONS, config.unroll_length,
        impala_networks.core_state_spec(self.network))
    self.server = reverb.Server(queue_lib.make_tables(config, self.signature))
    self.address = f'localhost:{self.server.port}'
    self.client = reverb.Client(self.address)
    impala_networks.create_variables(self.network,
                                     self.envs[0].observation_spec())
    self.source = source(self.network) if source else None
    self.actor = actor_lib.ImpalaActor(
        self.envs, self.network, self.client, config, actor_id=0,
        variable_source=self.source, counter=counter, logger=logger,
        wait_slice_ms=100, after_first_unroll=after_first_unroll)
    self.threads = []

  def drain(self, count, table=None):
    """Takes exactly `count` items from a table (FIFO order for the queue)."""
    samples = self.client.sample(table or self.config.queue_table_name,
                                 num_samples=count, emit_timesteps=False,
                                 unpack_as_table_signature=True)
    return [queue_lib.Trajectory(*sample.data) for sample in samples]

  def table_info(self, name):
    return self.client.server_info(timeout=5)[name]

  def start(self):
    thread = threading.Thread(target=self.actor.run, daemon=True)
    thread.start()
    self.threads.append(thread)
    return thread

  def close(self):
    self.actor.stop()
    for thread in self.threads:
      thread.join(5)
    self.actor.close()
    self.server.stop()


@pytest.fixture
def setups():
  made = []

  def make(*args, **kwargs):
    setup = Setup(*args, **kwargs)
    made.append(setup)
    return setup

  yield make
  for setup in made:
    setup.close()


def _by_environment(items):
  grouped = collections.defaultdict(list)
  for item in items:
    grouped[int(item.observation[0, 0])].append(item)
  return grouped


@pytest.mark.parametrize('use_lstm', [False, True])
def test_unrolls_overlap_and_follow_the_environment(setups, use_lstm):
  setup = setups(_config(use_lstm=use_lstm), num_envs=2)
  unrolls = 5
  for _ in range(unrolls):
    assert setup.actor.run_unroll()
  items = setup.drain(2 * unrolls)
  for env_id, env_items in _by_environment(items).items():
    env = setup.envs[env_id]
    assert len(env_items) == unrolls
    first = env_items[0]
    assert first.first[0] and first.last_action[0] == 0
    assert first.last_reward[0] == 0.0
    for item in env_items:
      assert item.observation.shape == (UNROLL + 1, 4)
      np.testing.assert_array_equal(item.behaviour_logits[-1], 0.0)
    for previous, item in zip(env_items, env_items[1:]):
      for field in ('observation', 'first', 'last_action', 'last_reward',
                    'discount'):
        np.testing.assert_array_equal(getattr(previous, field)[-1],
                                      getattr(item, field)[0], err_msg=field)
    # Transitions t = 0..n-1 of the unrolls, in order, are the environment's.
    stored = []
    for item in env_items:
      for t in range(UNROLL):
        stored.append((item.observation[t], int(item.last_action[t + 1]),
                       float(item.last_reward[t + 1]), bool(item.first[t + 1]),
                       float(item.discount[t + 1])))
    assert len(stored) == len(env.log) == unrolls * UNROLL
    for (obs, action, reward, first_next, discount), logged in zip(
        stored, env.log):
      np.testing.assert_array_equal(obs, logged[0])
      assert (action, reward, first_next) == (logged[1],
                                              pytest.approx(logged[2]),
                                              logged[3])
      # Terminations and truncations alike end the bootstrap.
      assert discount == (0.0 if logged[3] else 1.0)
    # The first observation of every episode starts at step 0 of it.
    for item in env_items:
      np.testing.assert_array_equal(item.observation[item.first, 1], 0.0)


def test_behaviour_logits_core_state_and_refresh_at_every_unroll(setups):
  setup = setups(_config(use_lstm=True), num_envs=2, source=ChangingSource)
  unrolls = 4
  for k in range(unrolls):
    assert setup.actor.run_unroll()
    assert setup.source.calls == k + 1
    assert setup.actor.parameter_version == 100 + k + 1
  check = impala_networks.make_network_from_config(setup.config, NUM_ACTIONS)
  impala_networks.create_variables(check, setup.envs[0].observation_spec())
  items = setup.drain(2 * unrolls)
  for env_items in _by_environment(items).values():
    state = tree.map_structure(lambda x: x.numpy()[0],
                               check.initial_state(1))
    for k, item in enumerate(env_items):
      # The initial core state is the state carried out of the last unroll.
      tree.map_structure(
          lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
          item.core_state, state)
      # Every action of unroll k came from the parameters fetched before it.
      for variable, value in zip(check.variables, setup.source.params(k + 1)):
        variable.assign(value)
      steps = tree.map_structure(lambda x: x[:UNROLL, None], item)
      outputs, final = check.unroll(
          impala_networks.ImpalaInputs(steps.observation, steps.first,
                                       steps.last_action, steps.last_reward),
          tree.map_structure(lambda x: x[None], item.core_state))
      np.testing.assert_allclose(outputs.policy_logits[:, 0],
                                 item.behaviour_logits[:UNROLL], atol=1e-5)
      # Not the same logits as under other parameters (the check bites).
      assert np.abs(item.behaviour_logits[:UNROLL]).max() > 0
      state = tree.map_structure(lambda x: x.numpy()[0], final)
    # An episode reset inside the unrolls is exercised.
    assert any(item.first[1:].any() for item in env_items)


def test_after_first_unroll_runs_once_when_the_first_unroll_is_sent(setups):
  # The program pins an actor to its cores there (launch_programs/impala.py).
  sizes = []
  setup = setups(_config(), num_envs=2, after_first_unroll=lambda: sizes.append(
      setup.table_info(setup.config.queue_table_name).current_size))
  for _ in range(3):
    assert setup.actor.run_unroll()
  assert sizes == [2]  # once, with both environments' first unrolls queued


def test_queue_items_are_consumed_exactly_once(setups):
  setup = setups(_config())
  for _ in range(3):
    setup.actor.run_unroll()
  name = setup.config.queue_table_name
  assert setup.table_info(name).current_size == 3
  setup.drain(3)
  info = setup.table_info(name)
  assert info.current_size == 0
  assert info.rate_limiter_info.insert_stats.completed == 3
  assert info.rate_limiter_info.sample_stats.completed == 3
  # Empty: a sampler now times out on the rate limiter.
  dataset = reverb.TrajectoryDataset(
      server_address=setup.address, table=name,
      dtypes=tree.map_structure(lambda s: s.dtype, setup.signature),
      shapes=tree.map_structure(lambda s: s.shape, setup.signature),
      max_in_flight_samples_per_worker=1, num_workers_per_iterator=1,
      rate_limiter_timeout_ms=200)
  with pytest.raises((tf.errors.DeadlineExceededError,
                      tf.errors.OutOfRangeError, StopIteration)):
    next(iter(dataset))


def test_a_full_queue_blocks_the_actor_until_stopped(setups):
  setup = setups(_config(queue_capacity=2))
  thread = setup.start()
  name = setup.config.queue_table_name

  def wait_until(condition, timeout_s=120):
    # Ends as soon as `condition` holds; the bound only catches a hang and
    # leaves room for a loaded machine.
    deadline = time.time() + timeout_s
    while not condition() and time.time() < deadline:
      time.sleep(0.02)

  # Two unrolls in the queue, the third taken: the actor acts until then
  # (however slowly), and then must not act on.
  wait_until(lambda: setup.table_info(name).current_size >= 2 and
             setup.actor.num_steps >= 3 * UNROLL)
  steps = setup.actor.num_steps
  time.sleep(0.5)
  assert thread.is_alive()
  assert setup.table_info(name).current_size == 2
  # Two unrolls in the queue, the third taken and waiting to get in.
  assert setup.actor.num_steps == steps == 3 * UNROLL
  # Taking one item lets exactly the waiting unroll in (Client.sample takes
  # exactly one; a dataset would keep one more in flight).
  list(setup.client.sample(name, num_samples=1, emit_timesteps=False))
  wait_until(lambda: setup.actor.num_steps >= 4 * UNROLL)
  time.sleep(0.5)
  assert setup.actor.num_steps == 4 * UNROLL
  assert setup.table_info(name).current_size == 2
  start = time.time()
  setup.actor.stop()
  thread.join(30)
  # The wait on the full queue has no end of its own: without its 100 ms
  # slices the thread would never stop. 10 s tells the two apart on a loaded
  # machine too.
  assert not thread.is_alive() and time.time() - start < 10.0


def test_counter_and_logger_report_steps_episodes_and_returns(setups):
  counter = counting.Counter()

  class Logger:

    def __init__(self):
      self.rows = []

    def write(self, row):
      self.rows.append(row)

  logger = Logger()
  setup = setups(_config(), num_envs=2, counter=counter, logger=logger)
  setup.actor.run(num_steps=5 * UNROLL * 2 - 1)  # Rounded up to 5 unrolls.
  assert setup.actor.flush_counter()
  counts = counter.get_counts()
  assert counts['actor_steps'] == setup.actor.num_steps == 5 * UNROLL * 2
  episodes = sum(len(env.returns) for env in setup.envs)
  assert counts['actor_episodes'] == episodes == len(logger.rows)
  for env in setup.envs:
    rows = [r for r in logger.rows if r['environment_index'] == env.env_id]
    np.testing.assert_allclose([r['episode_return'] for r in rows],
                               env.returns, rtol=1e-6)
    assert all(r['episode_steps'] == 4 for r in rows)
    assert [r['truncated'] for r in rows] == [
        e % 2 == 0 for e in range(1, len(rows) + 1)]
  report = setup.actor.report()
  assert report['items_sent'] == 10 and report['episodes'] == episodes


def test_replay_mixing_half_queue_half_replay(setups):
  config = _config(batch_size=4, replay_proportion=0.5, replay_capacity=100)
  setup = setups(config)
  for _ in range(6):
    setup.actor.run_unroll()
  # Every queue trajectory is in the replay as well.
  assert setup.table_info(config.replay_table_name).current_size == 6
  dataset = queue_lib.make_dataset(setup.address, config, setup.signature,
                                   rate_limiter_timeout_ms=300)
  batch = next(iter(dataset))
  totals = batch.observation[:, 0, 2].numpy()  # Total steps at step 0.
  assert batch.observation.shape == (4, UNROLL + 1, 4)
  # The first half is the queue, oldest first; the second half is drawn from
  # the replay's six.
  np.testing.assert_array_equal(totals[:2], [0, UNROLL])
  assert set(totals[2:]) <= {float(k * UNROLL) for k in range(6)}


def test_actor_rejects_a_network_for_another_action_count(setups):
  setup = setups(_config())
  other = impala_networks.make_network(NUM_ACTIONS + 1, 'mlp')
  with pytest.raises(ValueError, match='actions'):
    actor_lib.ImpalaActor(ScriptedEnvironment(9), other, setup.client,
                          setup.config)


def test_make_environment_atari_action_sets():
  config = config_lib.ImpalaConfig.paper()
  minimal = actor_lib.make_environment('atari/pong', config, seed=0)
  full = actor_lib.make_environment(
      'atari/pong', config_lib.ImpalaConfig.paper(action_set='full'), seed=0)
  assert minimal.action_spec().num_values == 6
  assert full.action_spec().num_values == 18
  assert minimal.observation_spec().shape == (84, 84, 4)
  assert minimal.observation_spec().dtype == np.uint8
  assert minimal.config.clip_rewards and minimal.config.terminal_on_life_loss
  catch = actor_lib.make_environment('catch', config, seed=0)
  assert catch.action_spec().num_values == 3
