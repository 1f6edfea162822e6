"""The smoke program: real distributed plumbing, end to end, in seconds.

It exists to prove that the stack moves data before any paper agent is trusted:
a Reverb server, N actor nodes, a learner, a counter and a supervisor, each a
Launchpad node (a process under `local_mp`). Actors play Catch with an
epsilon-greedy Sonnet Q-network, insert transitions through Acme's
`NStepTransitionAdder`, and pull parameters from the learner over Courier every
`actor_update_period` steps. The learner samples batches from Reverb and takes
one-step Q-learning steps. The supervisor stops the program at its bound and
records what flowed: items inserted and sampled (from the Reverb server's own
rate-limiter statistics), learner steps, and each actor's parameter version.

This is not a paper agent: it has no target network, no prioritization, and its
hyperparameters are chosen only to learn Catch quickly.
"""

import argparse
import dataclasses
import functools
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import launchpad as lp

from agents import node_runtime
from launch_programs import launching
from launch_programs import replay_node
from launch_programs import supervisor as supervisor_lib

REPLAY_TABLE = 'smoke_replay'


@dataclasses.dataclass
class SmokeConfig:
  num_actors: int = 2
  max_learner_steps: int = 300
  max_seconds: float = 40.0
  batch_size: int = 32
  min_replay_size: int = 100
  replay_capacity: int = 10_000
  actor_update_period: int = 25   # actor steps between parameter pulls
  learning_rate: float = 3e-3
  discount: float = 0.99
  epsilon: float = 0.1
  hidden_units: int = 64
  seed: int = 0
  launch_type: str = 'local_mp'
  report_period_s: float = 2.0

  def validate(self) -> None:
    if self.num_actors < 1:
      raise ValueError(f'num_actors must be >= 1, got {self.num_actors}')
    if self.launch_type not in launching.LAUNCH_TYPES:
      raise ValueError(f'launch_type {self.launch_type!r}: valid choices are '
                       f'{launching.LAUNCH_TYPES}')


def _make_network(num_actions: int, hidden_units: int):
  import sonnet as snt  # pylint: disable=g-import-not-at-top
  return snt.Sequential([snt.Flatten(), snt.nets.MLP([hidden_units, num_actions])])


def _environment(seed: int):
  from reproductions import environments  # pylint: disable=g-import-not-at-top
  return environments.make_environment('catch', seed=seed)


def make_replay_tables(config: SmokeConfig):
  """One uniform FIFO table with the signature of Acme's transition adder."""
  import reverb  # pylint: disable=g-import-not-at-top
  from acme import specs  # pylint: disable=g-import-not-at-top
  from acme.adders import reverb as adders  # pylint: disable=g-import-not-at-top
  spec = specs.make_environment_spec(_environment(config.seed))
  return [reverb.Table(
      name=REPLAY_TABLE,
      sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(),
      max_size=config.replay_capacity,
      rate_limiter=reverb.rate_limiters.MinSize(config.min_replay_size),
      signature=adders.NStepTransitionAdder.signature(spec))]


class SmokeLearner:
  """One-step Q-learning from Reverb; a Courier variable source for actors."""

  def __init__(self, replay: Any, counter: Any, config: SmokeConfig):
    launching.limit_tf_threads()
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
    spec = specs.make_environment_spec(_environment(config.seed))
    self._network = _make_network(spec.actions.num_values, config.hidden_units)
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
               config: SmokeConfig):
    launching.limit_tf_threads()
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
    self._environment = _environment(config.seed + 1 + actor_id)
    spec = specs.make_environment_spec(self._environment)
    self._num_actions = spec.actions.num_values
    self._network = _make_network(self._num_actions, config.hidden_units)
    tf2_utils.create_variables(self._network, [spec.observations])
    self._version = tf.Variable(0, dtype=tf.int64)
    self._variable_client = variable_utils.VariableClient(
        learner, {'policy': self._network.variables, 'version': [self._version]},
        update_period=config.actor_update_period)
    self._adder = adders.NStepTransitionAdder(
        replay, n_step=1, discount=config.discount,
        priority_fns={REPLAY_TABLE: None})
    self._rng = np.random.default_rng(config.seed + 1000 * actor_id)
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



def make_program(config: SmokeConfig, run_dir: str) -> lp.Program:
  config.validate()
  program = lp.Program('smoke')
  with program.group('replay'):
    replay = program.add_node(
        replay_node.ReplayNode(functools.partial(make_replay_tables, config)))
  with program.group('counter'):
    counter = program.add_node(lp.CourierNode(launching.make_counter))
  with program.group('learner'):
    learner = program.add_node(lp.CourierNode(SmokeLearner, replay, counter, config))
  actors = {}
  with program.group('actor'):
    for i in range(config.num_actors):
      actors[f'actor/{i}'] = program.add_node(
          lp.CourierNode(SmokeActor, replay, learner, counter, i, config))
  with program.group('supervisor'):
    program.add_node(lp.CourierNode(
        supervisor_lib.Supervisor, counter, run_dir=run_dir,
        max_learner_steps=config.max_learner_steps,
        max_seconds=config.max_seconds,
        report_period_s=config.report_period_s,
        final_reports={'learner': learner, **actors}))
  return program


def topology(config: SmokeConfig) -> Dict[str, Any]:
  return {'launch_type': config.launch_type,
          'nodes': {'replay': 1, 'counter': 1, 'learner': 1,
                    'actor': config.num_actors, 'supervisor': 1}}


def run(config: SmokeConfig, runs_root: Optional[str] = None,
        run_id: Optional[str] = None) -> Dict[str, Any]:
  """Creates the run record, runs the program to its bound, returns its summary."""
  config.validate()
  return launching.run_recorded(
      'smoke', dataclasses.asdict(config), topology(config),
      functools.partial(make_program, config),
      launch_type=config.launch_type, max_seconds=config.max_seconds,
      description=(f'stops at {config.max_learner_steps} learner steps or '
                   f'{config.max_seconds:.0f} s'),
      runs_root=runs_root, run_id=run_id,
      critical_groups=('supervisor', 'replay', 'learner', 'counter'),
      # Nothing to flush: nodes that linger after the stop are not waited for.
      stop_grace_s=3.0)


def describe(summary: Dict[str, Any]) -> str:
  """The human-readable account of what flowed."""
  nodes = summary.get('nodes', {})
  learner = nodes.get('learner', {})
  lines = [f'stop reason: {summary.get("stop_reason")}',
           f'replay: {learner.get("items_inserted")} items inserted, '
           f'{learner.get("items_sampled")} sampled, '
           f'{learner.get("replay_size")} held',
           f'learner: {learner.get("learner_steps")} steps, parameter version '
           f'{learner.get("parameter_version")}']
  for name in sorted(k for k in nodes if k.startswith('actor/')):
    actor = nodes[name]
    lines.append(f'{name}: {actor.get("steps")} steps, {actor.get("episodes")} '
                 f'episodes, parameter version {actor.get("parameter_version")}, '
                 f'recent mean return {actor.get("recent_mean_return")}')
  launcher = summary.get('launcher', {})
  lines.append(f'wall time {launcher.get("wall_s", float("nan")):.1f} s; '
               f'stopped by: {launcher.get("stop_cause")}; processes still '
               f'running after the stop grace, killed: '
               f'{launcher.get("killed_leftovers")}')
  return '\n'.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  defaults = SmokeConfig()
  parser.add_argument('--num_actors', type=int, default=defaults.num_actors)
  parser.add_argument('--max_learner_steps', type=int, default=defaults.max_learner_steps)
  parser.add_argument('--max_seconds', type=float, default=defaults.max_seconds)
  parser.add_argument('--launch_type', choices=launching.LAUNCH_TYPES,
                      default=defaults.launch_type)
  parser.add_argument('--runs_root', default=None,
                      help='where run records go (default: results/runs)')
  parser.add_argument('--run_id', default=None)
  args = parser.parse_args(argv)
  config = SmokeConfig(num_actors=args.num_actors,
                       max_learner_steps=args.max_learner_steps,
                       max_seconds=args.max_seconds, launch_type=args.launch_type)
  summary = run(config, args.runs_root, args.run_id)
  print(describe(summary), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
