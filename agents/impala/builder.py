"""Builds IMPALA's nodes (Espeholt et al. 2018, Sec. 3 and Fig. 1).

Actors unroll the latest policy for n = 20 steps and send each trajectory,
with its behaviour logits and initial core state, through a queue (a Reverb
queue table: each trajectory consumed once, a full queue blocks its actor);
one learner trains on batches of 32 with V-trace and serves parameters;
evaluators run the no-op starts protocol, one per game. Multi-task (Sec.
5.3, Table 4): the paper's actor i plays game i mod #games, so every game
gets the same fixed number of actors. Placement: one actor node may step K
of the paper's actors (one environment each) in lockstep with one batched
forward pass (agents/impala/actor.py); K = 1 is the paper's layout.
"""

import functools
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from agents import builders
from agents.impala import config as config_lib

# Local profile placement: the paper's actors one actor node steps together.
LOCAL_ACTORS_PER_NODE = 8


class ImpalaBuilder(builders.ActorLearnerBuilder):
  """IMPALA on one or several Atari games (or Catch, for tests)."""

  name = 'impala'
  config_class = config_lib.ImpalaConfig
  multi_task = True
  # Until the first batch arrives the learner's cores run only its warm-up,
  # while the actors' start-up (environments, tracing, first unroll) is the
  # launch's critical path.
  actors_pin_late = True
  # Sec. 5.3.2: "each game-score is the mean over 200 evaluation episodes".
  final_evaluation_episodes = 200

  @classmethod
  def make_config(cls, profile: str, environment: str,
                  **overrides: Any) -> config_lib.ImpalaConfig:
    """The profile's config; Catch gets the MLP torso and no repeat."""
    make = (config_lib.ImpalaConfig.paper if profile == 'paper'
            else config_lib.ImpalaConfig.local)
    if not environment.startswith('atari/'):
      overrides = {'network': 'mlp', 'action_repeat': 1, **overrides}
    return make(**overrides)

  @classmethod
  def schedule_overrides(cls, max_actor_frames: Optional[int]
                         ) -> Dict[str, Any]:
    """Table G.1: "linear anneal to 0 from start to end of training", so a
    frame-bounded run anneals over its own frames; a run bounded only by
    time keeps the profile's horizon (run_record_config records it)."""
    return {'total_frames': int(max_actor_frames)} if max_actor_frames else {}

  @classmethod
  def default_actors_per_node(cls, profile: str) -> int:
    """Paper: one environment per actor. Local: K share a forward pass."""
    return 1 if profile == 'paper' else LOCAL_ACTORS_PER_NODE

  def validate(self) -> None:
    super().validate()
    environments = self.environments
    if len(environments) > 1:
      if any(not e.startswith('atari/') for e in environments):
        raise ValueError('a multi-task run takes Atari games only, got '
                         f'{self.environment!r}')
      if self.config.num_actors % len(environments):
        raise ValueError(
            f'multi-task: num_actors ({self.config.num_actors}) must be a '
            f'multiple of the number of games ({len(environments)}), so that '
            'each game gets the same fixed number of actors (Sec. 5.3)')
      if self.config.action_set != 'full':
        raise ValueError('multi-task runs use the full 18-action set on every '
                         'game (Sec. 5.3.2): --set action_set=full')

  def actor_environment(self, actor_id: int) -> str:
    """A fixed number of actors per game: actor i plays game i mod #games."""
    return self.environments[actor_id % len(self.environments)]

  def run_record_config(self) -> Dict[str, Any]:
    c = self.config
    return {**super().run_record_config(),
            'architecture': c.network, 'correction': c.correction,
            'replay_mixing': c.replay_proportion > 0,
            'learning_rate_anneal_frames': c.total_frames,
            **({'replay_capacity': c.replay_capacity,
                'replay_fraction': c.replay_proportion}
               if c.replay_proportion > 0 else {})}

  def topology(self) -> Dict[str, Any]:
    return {'games': self.games}

  def extra_nodes(self) -> Sequence[builders.ExtraNode]:
    if not self.config.central_inference:
      return ()
    # Every actor's call waits in a server thread while its batch forms.
    return (builders.ExtraNode(
        group='inference', make=self._make_inference, needs=('learner',),
        courier_kwargs={'thread_pool_size': self.num_actors + 8}),)

  # --- Construction -----------------------------------------------------------

  def _build(self, environment_name: str, seed: int, evaluation: bool = False):
    from agents.impala import actor as actor_lib  # pylint: disable=g-import-not-at-top
    from networks import impala as impala_networks  # pylint: disable=g-import-not-at-top
    environment = actor_lib.make_environment(
        environment_name, self.config, seed=seed, evaluation=evaluation)
    network = impala_networks.make_network_from_config(
        self.config, int(environment.action_spec().num_values))
    return environment, network

  def _signature(self, environment, network):
    from agents.impala import queue  # pylint: disable=g-import-not-at-top
    from networks import impala as impala_networks  # pylint: disable=g-import-not-at-top
    return queue.trajectory_signature(
        environment.observation_spec(),
        int(environment.action_spec().num_values), self.config.unroll_length,
        impala_networks.core_state_spec(network))

  def make_replay_tables(self) -> List[Any]:
    from agents.impala import queue  # pylint: disable=g-import-not-at-top
    environment, network = self._build(self.environments[0], seed=0)
    return queue.make_tables(self.config,
                             self._signature(environment, network))

  def make_learner(self, index: int, replay: Any, counter: Any, run_dir: str,
                   input_pipeline_cpus: Optional[Sequence[int]]) -> Any:
    del index, input_pipeline_cpus
    from agents.impala import learning  # pylint: disable=g-import-not-at-top
    from agents.impala import queue  # pylint: disable=g-import-not-at-top
    from reproductions import run_records  # pylint: disable=g-import-not-at-top
    environment, network = self._build(self.environments[0], seed=0)
    signature = self._signature(environment, network)
    record = run_records.RunRecord(run_dir)
    return learning.ImpalaLearner(
        network, config=self.config, counter=counter,
        logger=record.metrics_logger(
            'learner', time_delta_s=5.0,
            window_means=learning.PERIOD_MEAN_METRICS),
        checkpoint_dir=str(record.checkpoint_dir / 'learner'),
        make_dataset=functools.partial(
            queue.make_dataset, replay.server_address, self.config, signature,
            rate_limiter_timeout_ms=1000),
        signature=signature, replay_client=replay)

  def _make_inference(self, index: int, handles: Mapping[str, Any]) -> Any:
    del index
    from agents.impala import inference  # pylint: disable=g-import-not-at-top
    environment, network = self._build(self.environments[0], seed=0)
    return inference.InferenceServer(network, self.config,
                                     environment.observation_spec(),
                                     variable_source=handles['learner'])

  def make_actor(self, node_index: int, actor_ids: Sequence[int],
                 replay: Any, variable_source: Any, counter: Any,
                 run_dir: str, extras: Mapping[str, List[Any]],
                 after_start: Optional[Callable[[], None]]) -> Any:
    from agents.impala import actor as actor_lib  # pylint: disable=g-import-not-at-top
    from reproductions import run_records  # pylint: disable=g-import-not-at-top
    environments, network = [], None
    for actor_id in actor_ids:
      environment, built = self._build(self.actor_environment(actor_id),
                                       seed=self.seed * 10_000 + 1 + actor_id)
      environments.append(environment)
      network = network or built
    record = run_records.RunRecord(run_dir)
    inference = extras.get('inference')
    return actor_lib.ImpalaActor(
        environments, network, replay, self.config, actor_id=node_index,
        variable_source=variable_source, counter=counter,
        logger=record.metrics_logger(f'actor/{node_index}', tensorboard=False),
        frames_per_step=self.frames_per_step,
        seed=self.seed * 10_000 + node_index,
        after_first_unroll=after_start,
        inference=inference[0] if inference else None)

  def make_evaluation_policy(self, index: int, seed: Optional[int] = None
                             ) -> Tuple[Any, Any]:
    from agents.impala import evaluation  # pylint: disable=g-import-not-at-top
    environment, network = self._build(
        self.environments[index],
        seed=self.seed * 10_000 + 9_000 + index if seed is None else seed,
        evaluation=True)
    return environment, evaluation.SampledPolicy(
        network, environment.observation_spec(), self.config,
        seed=self.seed + index if seed is None else seed)

  # --- Paper experiments ------------------------------------------------------

  @classmethod
  def from_experiment(cls, keys: Mapping[str, Any],
                      total_frames: Optional[int]) -> Tuple[str, Any]:
    games = keys['games']
    environment = ','.join(f'atari/{g}' for g in games)
    overrides = dict(num_actors=keys['num_actors'],
                     network=keys.get('architecture', 'deep'),
                     correction=keys.get('correction', 'vtrace'))
    if total_frames:
      overrides['total_frames'] = total_frames
    if keys.get('batch_size'):
      overrides['batch_size'] = keys['batch_size']
    if keys.get('central_inference'):
      overrides['central_inference'] = True
    if keys.get('replay_mixing'):
      overrides.update(replay_proportion=keys.get('replay_fraction', 0.5),
                       replay_capacity=keys['replay_capacity'])
    if len(games) > 1:
      overrides['action_set'] = 'full'
    return environment, cls.make_config(keys['profile'], environment,
                                        **overrides)
