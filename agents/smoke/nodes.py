"""The smoke agent's nodes: one-step Q-learning on Catch, through Reverb.

The learner samples uniform batches and serves its parameters over Courier;
each actor plays epsilon-greedily, inserts through Acme's
`NStepTransitionAdder` and pulls parameters every `actor_update_period`
steps. The learner's report says what flowed, from the Reverb server's own
rate-limiter statistics.
"""

import time
from typing import Any, Dict, List, Sequence

import launchpad as lp

from agents import node_runtime
from agents.smoke import builder as smoke_builder

REPLAY_TABLE = smoke_builder.REPLAY_TABLE
SmokeConfig = smoke_builder.SmokeConfig
make_environment = smoke_builder.make_environment
make_network = smoke_builder.make_network


class SmokeLearner:
  """One-step Q-learning from Reverb; a Courier variable source for actors."""

  def __init__(self, replay: Any, counter: Any, config: SmokeConfig,
               seed: int = 0):
    import reverb  # pylint: disable=g-import-not-at-top
    import sonnet as snt  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from acme.tf import utils as tf2_utils  # pylint: disable=g-import-not-at-top
    from acme import specs  # pylint: disable=g-import-not-at-top

    self._tf = tf
    self._config = config
    # Off the critical path: a Courier call to a stopped counter would block
    # this node at shutdown (agents/node_runtime.py).
    self._counter = node_runtime.BackgroundIncrements(counter)
    # The replay node's handle dereferences to a reverb.Client.
    self._client = replay
    spec = specs.make_environment_spec(make_environment(seed))
    self._network = make_network(spec.actions.num_values, config.hidden_units)
    tf2_utils.create_variables(self._network, [spec.observations])
    self._optimizer = snt.optimizers.Adam(config.learning_rate)
    self._version = tf.Variable(0, dtype=tf.int64, name='parameter_version')
    self._steps = 0
    self._start = time.time()
    self._dataset = reverb.TrajectoryDataset.from_table_signature(
        server_address=replay.server_address, table=REPLAY_TABLE,
        max_in_flight_samples_per_worker=2 * config.batch_size,
        rate_limiter_timeout_ms=1000
    ).batch(config.batch_size, drop_remainder=True).prefetch(2)

    @tf.function
    def step(sample):
      transition = sample.data
      with tf.GradientTape() as tape:
        q = self._network(transition.observation)
        q_taken = tf.gather(q, tf.cast(transition.action, tf.int32), batch_dims=1)
        q_next = tf.stop_gradient(self._network(transition.next_observation))
        target = (transition.reward + config.discount * transition.discount
                  * tf.reduce_max(q_next, axis=-1))
        loss = 0.5 * tf.reduce_mean(tf.square(target - q_taken))
      grads = tape.gradient(loss, self._network.trainable_variables)
      self._optimizer.apply(grads, self._network.trainable_variables)
      self._version.assign_add(1)
      return loss
    self._step = step

  def run(self) -> None:
    tf = self._tf
    while not lp.wait_for_stop(0):
      # The rate limiter times out every second so that a stop is noticed even
      # while the table is below its minimum size.
      try:
        for sample in self._dataset:
          self._step(sample)
          self._steps += 1
          self._counter.increment(learner_steps=1)
          if lp.wait_for_stop(0):
            break
      except (tf.errors.DeadlineExceededError, tf.errors.OutOfRangeError,
              tf.errors.UnavailableError):
        continue

  def get_variables(self, names: Sequence[str]) -> List[List[Any]]:
    sources = {'policy': self._network.variables, 'version': [self._version]}
    return [[v.numpy() for v in sources[name]] for name in names]

  def report(self) -> Dict[str, Any]:
    """What flowed through replay, from the Reverb server's own statistics."""
    info = self._client.server_info(timeout=5)[REPLAY_TABLE]
    limiter = info.rate_limiter_info
    return {'learner_steps': self._steps,
            'parameter_version': int(self._version.numpy()),
            'replay_size': int(info.current_size),
            'items_inserted': int(limiter.insert_stats.completed),
            'items_sampled': int(limiter.sample_stats.completed),
            'learner_steps_per_s': self._steps / max(time.time() - self._start, 1e-9)}


class SmokeActor:
  """Epsilon-greedy Catch player that inserts into Reverb and pulls parameters."""

  def __init__(self, replay: Any, learner: Any, counter: Any, actor_id: int,
               config: SmokeConfig, seed: int = 0):
    import numpy as np  # pylint: disable=g-import-not-at-top
    import reverb  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from acme import specs  # pylint: disable=g-import-not-at-top
    from acme.adders import reverb as adders  # pylint: disable=g-import-not-at-top
    from acme.tf import utils as tf2_utils  # pylint: disable=g-import-not-at-top
    from acme.tf import variable_utils  # pylint: disable=g-import-not-at-top

    self._np = np
    # Off the critical path: a Courier call to a stopped counter would block
    # this node at shutdown (agents/node_runtime.py).
    self._counter = node_runtime.BackgroundIncrements(counter)
    self._actor_id = actor_id
    self._config = config
    self._environment = make_environment(seed + 1 + actor_id)
    spec = specs.make_environment_spec(self._environment)
    self._num_actions = spec.actions.num_values
    self._network = make_network(self._num_actions, config.hidden_units)
    tf2_utils.create_variables(self._network, [spec.observations])
    self._version = tf.Variable(0, dtype=tf.int64)
    self._variable_client = variable_utils.VariableClient(
        learner, {'policy': self._network.variables, 'version': [self._version]},
        update_period=config.actor_update_period)
    self._adder = adders.NStepTransitionAdder(
        replay, n_step=1, discount=config.discount,
        priority_fns={REPLAY_TABLE: None})
    self._rng = np.random.default_rng(seed + 1000 * actor_id)
    self._policy = tf.function(lambda obs: tf.argmax(
        self._network(tf.expand_dims(obs, 0))[0], output_type=tf.int32))
    self._steps = 0
    self._episodes = 0
    self._returns: List[float] = []
    self._versions_seen = set()

  def _select_action(self, observation):
    if self._rng.random() < self._config.epsilon:
      return self._np.int32(self._rng.integers(self._num_actions))
    return self._np.int32(self._policy(observation).numpy())

  def run(self) -> None:
    self._variable_client.update_and_wait()
    while not lp.wait_for_stop(0):
      timestep = self._environment.reset()
      self._adder.add_first(timestep)
      episode_return, episode_steps = 0.0, 0
      while not timestep.last():
        action = self._select_action(timestep.observation)
        timestep = self._environment.step(action)
        self._adder.add(action, timestep)
        episode_return += float(timestep.reward)
        episode_steps += 1
        self._variable_client.update()
        self._versions_seen.add(int(self._version.numpy()))
      self._steps += episode_steps
      self._episodes += 1
      self._returns.append(episode_return)
      self._counter.increment(actor_steps=episode_steps, actor_episodes=1)

  def report(self) -> Dict[str, Any]:
    recent = self._returns[-50:]
    return {'actor_id': self._actor_id, 'steps': self._steps,
            'episodes': self._episodes,
            'parameter_version': int(self._version.numpy()),
            'distinct_versions_seen': len(self._versions_seen),
            'recent_mean_return': sum(recent) / len(recent) if recent else None}
