"""The smoke agent's config and builder: real distributed plumbing in seconds.

It exists to prove that the stack moves data before any paper agent is
trusted: a Reverb server, N actor nodes, a learner, a counter and a
supervisor, placed by the same program as every paper agent
(launch_programs/distributed.py). Actors play Catch with an epsilon-greedy
Sonnet Q-network, insert transitions through Acme's `NStepTransitionAdder`
and pull parameters from the learner over Courier; the learner takes
one-step Q-learning steps. Not a paper agent: no target network, no
prioritization, hyperparameters chosen only to learn Catch quickly.
"""

import dataclasses
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from agents import builders

REPLAY_TABLE = 'smoke_replay'


@dataclasses.dataclass(frozen=True)
class SmokeConfig:
  """Not paper values: small and fast enough to learn Catch in seconds."""
  num_actors: int = 2
  batch_size: int = 32
  min_replay_size: int = 100
  replay_capacity: int = 10_000
  actor_update_period: int = 25   # actor steps between parameter pulls
  learning_rate: float = 3e-3
  discount: float = 0.99
  epsilon: float = 0.1
  hidden_units: int = 64


def make_network(num_actions: int, hidden_units: int):
  import sonnet as snt  # pylint: disable=g-import-not-at-top
  return snt.Sequential([snt.Flatten(),
                         snt.nets.MLP([hidden_units, num_actions])])


def make_environment(seed: int):
  from reproductions import environments  # pylint: disable=g-import-not-at-top
  return environments.make_environment('catch', seed=seed)


class SmokeBuilder(builders.ActorLearnerBuilder):
  """The smoke agent on Catch."""

  name = 'smoke'
  config_class = SmokeConfig
  families = ('catch',)
  critical_groups = ('supervisor', 'replay', 'learner', 'counter')
  # No evaluation policy, so no final evaluation.
  final_evaluation_episodes = 0

  @classmethod
  def make_config(cls, profile: str, environment: str,
                  **overrides: Any) -> SmokeConfig:
    del profile, environment
    return SmokeConfig(**overrides)

  def validate(self) -> None:
    super().validate()
    if self.config.num_actors < 1:
      raise ValueError(f'num_actors must be >= 1, got {self.config.num_actors}')

  def make_replay_tables(self) -> List[Any]:
    """One uniform FIFO table with the signature of Acme's transition adder."""
    import reverb  # pylint: disable=g-import-not-at-top
    from acme import specs  # pylint: disable=g-import-not-at-top
    from acme.adders import reverb as adders  # pylint: disable=g-import-not-at-top
    spec = specs.make_environment_spec(make_environment(self.seed))
    return [reverb.Table(
        name=REPLAY_TABLE,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=self.config.replay_capacity,
        rate_limiter=reverb.rate_limiters.MinSize(self.config.min_replay_size),
        signature=adders.NStepTransitionAdder.signature(spec))]

  def make_learner(self, index: int, replay: Any, counter: Any, run_dir: str,
                   input_pipeline_cpus: Optional[Sequence[int]]) -> Any:
    del index, run_dir, input_pipeline_cpus
    from agents.smoke import nodes  # pylint: disable=g-import-not-at-top
    return nodes.SmokeLearner(replay, counter, self.config, self.seed)

  def make_actor(self, node_index: int, actor_ids: Sequence[int],
                 replay: Any, variable_source: Any, counter: Any,
                 run_dir: str, extras: Mapping[str, List[Any]],
                 after_start: Optional[Callable[[], None]]) -> Any:
    del actor_ids, run_dir, extras, after_start
    from agents.smoke import nodes  # pylint: disable=g-import-not-at-top
    return nodes.SmokeActor(replay, variable_source, counter, node_index,
                            self.config, self.seed)

  def make_evaluation_policy(self, index: int, seed: Optional[int] = None
                             ) -> Tuple[Any, Any]:
    raise NotImplementedError('the smoke agent has no evaluator')

  @classmethod
  def from_experiment(cls, keys: Mapping[str, Any],
                      total_frames: Optional[int]) -> Tuple[str, Any]:
    raise NotImplementedError('no paper experiment runs the smoke agent')
