"""What an agent tells the one distributed program: how to build its parts.

Modelled on Acme's split between a builder (construction: replay tables,
dataset, learner, actor) and one generic distributed layout (placement:
which node runs what, where, how many), after `acme/agents/jax/builders.py`
and `acme/jax/layouts/distributed_layout.py`. A builder constructs; the
program in launch_programs/distributed.py places. So a builder never imports
launch_programs, and nothing in the program knows an agent's internals.

Every `make_*` method runs inside its node (its own process under
`local_mp`), after the program has pinned the node to its cores and capped
its TensorFlow threads; the handles it receives are already dereferenced
(a `reverb.Client` for the replay, a Courier client for another node).
Builders are plain picklable objects: Launchpad ships them to their nodes.
"""

import abc
import dataclasses
from typing import (Any, Callable, ClassVar, Dict, List, Mapping, Optional,
                    Sequence, Tuple)


@dataclasses.dataclass(frozen=True)
class ExtraNode:
  """A node kind of one agent only (IMPALA's inference node, Gorila's shards).

  The program places `count` nodes in group `group`; node i is built by
  `make(i, handles)`, where `handles` holds the nodes named in `needs`
  ('replay', 'counter', 'learner'). Actors and evaluators get the handles of
  the group's nodes in `extras[group]` (a list, one per node).
  """
  group: str
  make: Callable[[int, Mapping[str, Any]], Any]
  count: int = 1
  needs: Tuple[str, ...] = ()
  courier_kwargs: Optional[Mapping[str, Any]] = None


class ActorLearnerBuilder(abc.ABC):
  """Builds one agent's nodes for one environment (or one per game)."""

  # The run record's agent name and the program's name.
  name: ClassVar[str]
  # The agent config's dataclass (for `--set FIELD=VALUE`).
  config_class: ClassVar[type]
  # Environment families the agent acts in ('atari', 'catch', 'control').
  families: ClassVar[Tuple[str, ...]] = ('atari', 'catch')
  # Whether one run may train on several environments (multi-task).
  multi_task: ClassVar[bool] = False
  # Node groups whose exit ends the run at once.
  critical_groups: ClassVar[Tuple[str, ...]] = ('supervisor', 'learner',
                                                'counter')
  # Actors pin themselves to their cores after their first unit of work,
  # so that their start-up may use the learner's idle cores.
  actors_pin_late: ClassVar[bool] = False
  # Episodes per game of the paper's final evaluation (agents/final_evaluation).
  final_evaluation_episodes: ClassVar[int] = 30

  def __init__(self, config: Any, environment: str, seed: int = 0):
    self.config = config
    self.environment = environment
    self.seed = int(seed)
    self.validate()

  # --- Profiles and validation (in the launcher, before any node) -----------

  @classmethod
  @abc.abstractmethod
  def make_config(cls, profile: str, environment: str,
                  **overrides: Any) -> Any:
    """The profile's agent config ('paper' or 'local'), with overrides."""

  @classmethod
  def schedule_overrides(cls, max_actor_frames: Optional[int]
                         ) -> Dict[str, Any]:
    """Config fields that follow the run's frame bound (a schedule's
    horizon); the user's `--set` overrides win over these."""
    del max_actor_frames
    return {}

  @classmethod
  def default_actors_per_node(cls, profile: str) -> int:
    """How many of the paper's actors one actor node hosts by default."""
    del profile
    return 1

  @property
  def environments(self) -> Tuple[str, ...]:
    return tuple(e.strip() for e in self.environment.split(',') if e.strip())

  @property
  def games(self) -> List[str]:
    return [e.split('/', 1)[-1] for e in self.environments]

  def validate(self) -> None:
    """Raises ValueError naming what is wrong and the valid choices."""
    if not self.environments:
      raise ValueError('environment is empty: name atari/<game> or catch')
    families = self.families
    for environment in self.environments:
      family = environment.split('/')[0]
      if family not in families:
        valid = ' or '.join(f + '/...' if f in ('atari', 'control') else f
                            for f in families)
        raise ValueError(f'{self.name} acts in {valid}, not {environment!r}')
      if family == 'atari':
        from reproductions.environments import atari  # pylint: disable=g-import-not-at-top
        atari.validate_game(environment.split('/', 1)[1])
    if len(self.environments) > 1 and not self.multi_task:
      raise ValueError(f'{self.name} trains on one environment per run, got '
                       f'{self.environment!r}')

  # --- What the program places ----------------------------------------------

  @property
  def num_actors(self) -> int:
    """The paper's actors (each with one environment)."""
    return self.config.num_actors

  @property
  def frames_per_step(self) -> int:
    """Emulator frames per agent step: the action repeat on Atari."""
    if self.environment.startswith('atari/'):
      return self.config.action_repeat
    return 1

  @property
  def num_learners(self) -> int:
    """Learner nodes: one, except for agents with many (Gorila)."""
    return 1

  @property
  def variable_source(self) -> str:
    """The group that serves parameters to actors and evaluators.

    'learner' (its first node), or an extra node group: its handle, or the
    list of its handles when it has several nodes (shards).
    """
    return 'learner'

  def evaluator_environments(self) -> Tuple[str, ...]:
    """One evaluator per environment (per game, in a multi-task run)."""
    return self.environments

  def extra_nodes(self) -> Sequence[ExtraNode]:
    return ()

  def run_record_config(self) -> Dict[str, Any]:
    """The keys reproductions.compare and .figures select runs by."""
    return {'game': self.games[0], 'games': self.games,
            'num_actors': self.num_actors}

  def topology(self) -> Dict[str, Any]:
    """Agent-specific facts for the run record's topology."""
    return {}

  # --- Construction (inside the nodes) ---------------------------------------

  @abc.abstractmethod
  def make_replay_tables(self) -> List[Any]:
    """The Reverb tables (replay, queue) of the replay node."""

  @abc.abstractmethod
  def make_learner(self, index: int, replay: Any, counter: Any, run_dir: str,
                   input_pipeline_cpus: Optional[Sequence[int]]) -> Any:
    """Learner `index`; it serves `get_variables` and `report`."""

  @abc.abstractmethod
  def make_actor(self, node_index: int, actor_ids: Sequence[int],
                 replay: Any, variable_source: Any, counter: Any,
                 run_dir: str, extras: Mapping[str, List[Any]],
                 after_start: Optional[Callable[[], None]]) -> Any:
    """One actor node hosting the paper's actors `actor_ids`."""

  @abc.abstractmethod
  def make_evaluation_policy(self, index: int, seed: Optional[int] = None
                             ) -> Tuple[Any, Any]:
    """(environment, agents.evaluation.EvaluationPolicy) of evaluator i.

    `seed` (default: one derived from the run's seed and i) seeds both the
    environment's no-op starts and the policy's random choices.
    """

  def make_evaluator(self, index: int, variable_source: Any, counter: Any,
                     run_dir: str) -> Any:
    """Evaluator `index`, on `evaluator_environments()[index]`."""
    from agents import evaluation  # pylint: disable=g-import-not-at-top
    environment, policy = self.make_evaluation_policy(index)
    game = self.evaluator_environments()[index].split('/', 1)[-1]
    return evaluation.Evaluator(
        environment, policy, variable_source, run_dir, game, counter=counter,
        frames_per_step=self.frames_per_step, node=f'evaluator/{index}')

  # --- Paper experiments ------------------------------------------------------

  @classmethod
  @abc.abstractmethod
  def from_experiment(cls, keys: Mapping[str, Any],
                      total_frames: Optional[int]) -> Tuple[str, Any]:
    """The (environment, config) of a reproductions.experiments RunSpec."""


# Every agent's builder, by its run-record name: imported on demand, so that
# reading a run record does not import every agent.
BUILDERS = {
    'apex_dqn': 'agents.apex_dqn.builder.ApeXDQNBuilder',
    'impala': 'agents.impala.builder.ImpalaBuilder',
    'smoke': 'agents.smoke.builder.SmokeBuilder',
}


def builder_class(agent: str) -> type:
  """The builder class of `agent` (a run record's 'agent')."""
  import importlib  # pylint: disable=g-import-not-at-top
  if agent not in BUILDERS:
    raise ValueError(f'Unknown agent {agent!r}; valid choices: '
                     f'{", ".join(sorted(BUILDERS))}.')
  module, name = BUILDERS[agent].rsplit('.', 1)
  return getattr(importlib.import_module(module), name)


def from_run_config(config: Mapping[str, Any]) -> ActorLearnerBuilder:
  """The builder a run record's config.json describes (its own config)."""
  agent = config.get('agent')
  cls = builder_class(agent)
  fields = {f.name: f for f in dataclasses.fields(cls.config_class)}
  values = {}
  for key, value in config[agent].items():
    if key in fields and isinstance(value, list):
      value = tuple(value)  # JSON has no tuples; the configs use them.
    values[key] = value
  program = config['program']
  return cls(cls.config_class(**values), program['environment'],
             seed=program.get('seed', 0))
