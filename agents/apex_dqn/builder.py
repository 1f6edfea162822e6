"""Builds Ape-X DQN's nodes (Horgan et al. 2018, Sec. 3 and Fig. 1).

Many actors, each with its own epsilon, feed one prioritized replay; one
learner samples it, writes priorities back and serves parameters; an
evaluator runs the no-op starts protocol. Placement: one actor node may host
K of the paper's actors ("lanes", agents/apex_dqn/actor.py), each still with
its own environment, epsilon, n-step stream and buffer, sharing one batched
forward pass; K = 1 is the paper's one actor per machine.
"""

import dataclasses
import functools
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from agents import builders
from agents.apex_dqn import config as config_lib

# Local profile placement: measured in README "Measured performance".
LOCAL_ACTORS_PER_NODE = 4


class ApeXDQNBuilder(builders.ActorLearnerBuilder):
  """Ape-X DQN on one Atari game (or Catch, for tests)."""

  name = 'apex_dqn'
  config_class = config_lib.ApeXDQNConfig
  # NOT STATED: Sec. 4.1 evaluates under no-op starts without an episode
  # count; 30 is the count of DQN's protocol (Mnih et al. 2015), which Ape-X
  # cites for the regime.
  final_evaluation_episodes = 30

  @classmethod
  def make_config(cls, profile: str, environment: str,
                  **overrides: Any) -> config_lib.ApeXDQNConfig:
    """The profile's config; feature observations are stored uncompressed."""
    make = (config_lib.ApeXDQNConfig.paper if profile == 'paper'
            else config_lib.ApeXDQNConfig.local)
    if not environment.startswith('atari/'):
      # PNG is for frames; Catch boards are tiny, and its steps are 1 frame.
      overrides = {'compress_observations': False, 'action_repeat': 1,
                   **overrides}
    return make(**overrides)

  @classmethod
  def default_actors_per_node(cls, profile: str) -> int:
    """Paper: one actor per machine. Local: K actors share a forward pass."""
    return 1 if profile == 'paper' else LOCAL_ACTORS_PER_NODE

  def run_record_config(self) -> Dict[str, Any]:
    c = self.config
    return {**super().run_record_config(),
            'replay_capacity': c.replay_soft_capacity,
            'transition_copies': c.transition_copies,
            'epsilon_variant': c.epsilon_variant,
            'prioritized': c.priority_exponent > 0,
            'learning_rate': c.learning_rate}

  # --- Construction -----------------------------------------------------------

  def make_environment(self, evaluation: bool, seed: int):
    """The protocol's environment: Ape-X training or no-op-starts evaluation."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    from reproductions import environments  # pylint: disable=g-import-not-at-top
    c = self.config
    if self.environment == 'catch':
      return environments.make_environment('catch', seed=seed, dtype=np.uint8)
    if evaluation:
      atari = dataclasses.replace(
          environments.AtariConfig.apex_evaluation(),
          noop_max=c.evaluation_noop_max,
          max_episode_frames=c.evaluation_max_episode_frames)
    else:
      atari = dataclasses.replace(environments.AtariConfig.apex_training(),
                                  max_episode_frames=c.max_episode_frames)
    return environments.make_environment(self.environment, config=atari,
                                         seed=seed)

  def make_network(self, spec: Tuple[Tuple[int, ...], int]):
    """Dueling DQN on frames (App. C), a dueling MLP on feature observations."""
    from networks import dqn  # pylint: disable=g-import-not-at-top
    observation_shape, num_actions = spec
    c = self.config
    scale = dqn.DUELING_GRADIENT_SCALE if c.dueling_gradient_rescale else None
    if len(observation_shape) == 3:
      return dqn.DuelingDQN(num_actions, hidden_size=c.dueling_hidden_size,
                            gradient_scale=scale)
    return dqn.DuelingMLP(num_actions, gradient_scale=scale)

  def _spec(self, environment) -> Tuple[Tuple[int, ...], int]:
    """(observation shape, number of actions): what the network is built from."""
    return (tuple(environment.observation_spec().shape),
            int(environment.action_spec().num_values))

  def make_replay_tables(self) -> List[Any]:
    from agents.apex_dqn import replay  # pylint: disable=g-import-not-at-top
    observation_shape, _ = self._spec(
        self.make_environment(evaluation=False, seed=0))
    signature = replay.transition_signature(
        observation_shape, compressed=self.config.compress_observations)
    return replay.make_replay_tables(self.config, signature)

  def make_learner(self, index: int, replay: Any, counter: Any, run_dir: str,
                   input_pipeline_cpus: Optional[Sequence[int]]) -> Any:
    del index
    from acme import specs  # pylint: disable=g-import-not-at-top
    from agents.apex_dqn import learning  # pylint: disable=g-import-not-at-top
    from agents.apex_dqn import replay as replay_lib  # pylint: disable=g-import-not-at-top
    from reproductions import run_records  # pylint: disable=g-import-not-at-top
    environment = self.make_environment(evaluation=False, seed=0)
    spec = self._spec(environment)
    record = run_records.RunRecord(run_dir)
    return learning.ApeXDQNLearner(
        self.make_network(spec), self.make_network(spec),
        replay_client=replay, config=self.config, counter=counter,
        logger=record.metrics_logger(
            'learner', time_delta_s=5.0,
            window_means=learning.PERIOD_MEAN_METRICS),
        checkpoint_dir=str(record.checkpoint_dir / 'learner'),
        observation_spec=specs.make_environment_spec(environment).observations,
        input_pipeline_cpus=input_pipeline_cpus,
        make_dataset=functools.partial(
            replay_lib.make_dataset, replay.server_address, self.config,
            observation_shape=spec[0], rate_limiter_timeout_ms=1000))

  def make_actor(self, node_index: int, actor_ids: Sequence[int],
                 replay: Any, variable_source: Any, counter: Any,
                 run_dir: str, extras: Mapping[str, List[Any]],
                 after_start: Optional[Callable[[], None]]) -> Any:
    del extras, after_start
    from agents.apex_dqn import actor  # pylint: disable=g-import-not-at-top
    from reproductions import run_records  # pylint: disable=g-import-not-at-top
    environments = [
        self.make_environment(evaluation=False,
                              seed=self.seed * 10_000 + 1 + actor_id)
        for actor_id in actor_ids]
    record = run_records.RunRecord(run_dir)
    return actor.ApeXDQNActor(
        environments, self.make_network(self._spec(environments[0])),
        replay, self.config, list(actor_ids),
        variable_source=variable_source, counter=counter,
        logger=record.metrics_logger(f'actor/{node_index}', tensorboard=False),
        frames_per_step=self.frames_per_step,
        seed=self.seed * 10_000 + actor_ids[0])

  def make_evaluation_policy(self, index: int, seed: Optional[int] = None
                             ) -> Tuple[Any, Any]:
    from agents.apex_dqn import evaluation  # pylint: disable=g-import-not-at-top
    environment = self.make_environment(
        evaluation=True,
        seed=self.seed * 10_000 + 9_999 + index if seed is None else seed)
    spec = self._spec(environment)
    return environment, evaluation.EpsilonGreedyPolicy(
        self.make_network(spec), environment.observation_spec(), spec[1],
        self.config, seed=self.seed + index if seed is None else seed)

  # --- Paper experiments ------------------------------------------------------

  @classmethod
  def from_experiment(cls, keys: Mapping[str, Any],
                      total_frames: Optional[int]) -> Tuple[str, Any]:
    del total_frames
    environment = f'atari/{keys["games"][0]}'
    overrides = dict(
        num_actors=keys['num_actors'],
        replay_soft_capacity=keys['replay_capacity'],
        transition_copies=keys.get('transition_copies', 1),
        epsilon_variant=keys.get('epsilon_variant', 'per_actor'),
        learning_rate=keys['learning_rate'])
    if not keys.get('prioritized', True):
      # Fig. 12's uniform replay: Prioritized(0) draws uniformly, and with
      # uniform probabilities every importance weight is 1.
      overrides['priority_exponent'] = 0.0
    config = cls.make_config(keys['profile'], environment, **overrides)
    if config.min_replay_size > config.replay_soft_capacity:
      config = dataclasses.replace(
          config, min_replay_size=config.replay_soft_capacity // 2)
    return environment, config
