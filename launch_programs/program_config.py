"""What every agent program shares: where it runs, when it stops, its CLI.

Why one module: every agent's program (launch_programs/distributed.py) takes
the same program-level settings (environment, profile, bounds, placement, CPU
pinning, run record) and the same `--set FIELD=VALUE` overrides of their
agent config. Agent settings live in each agent's config dataclass; these are
the settings of the *program*.
"""

import argparse
import dataclasses
from typing import Any, Dict, Optional, Sequence, Tuple, Type

from launch_programs import launching
from reproductions import experiments


@dataclasses.dataclass
class ProgramConfig:
  """What the program runs on and when it stops (not the agent's settings).

  `environment` is one name (`atari/pong`, `catch`) or, for programs that
  train on several at once (IMPALA multi-task), a comma-separated list.
  """
  environment: str = 'atari/pong'
  profile: str = 'local'
  max_seconds: float = 600.0
  max_actor_frames: Optional[int] = None
  max_learner_steps: Optional[int] = None
  launch_type: str = 'local_mp'
  evaluator: bool = True
  seed: int = 0
  report_period_s: float = 10.0
  # Placement, not a paper value: how many of the paper's actors one actor
  # node hosts (1 = the paper's one actor per machine).
  actors_per_node: int = 1
  # CPU pinning (None: the OS schedules freely). The learner node's cores,
  # and the cores of every other node.
  learner_cpus: Optional[Tuple[int, ...]] = None
  other_cpus: Optional[Tuple[int, ...]] = None
  # The final evaluation after the run (agents/final_evaluation.py): episodes
  # per game (None: the profile's count, 0: none) and its time budget in
  # seconds (None: the profile's).
  final_episodes: Optional[int] = None
  final_evaluation_seconds: Optional[float] = None

  def description(self) -> str:
    """What runs and when it stops, for the launch line."""
    bounds = [f'{self.max_seconds:.0f} s']
    if self.max_actor_frames:
      bounds.append(f'{self.max_actor_frames:,} frames')
    if self.max_learner_steps:
      bounds.append(f'{self.max_learner_steps:,} learner steps')
    return (f'{self.environment}, {self.profile} profile; stops at the first '
            f'of {", ".join(bounds)}')

  @property
  def environments(self) -> Tuple[str, ...]:
    return tuple(e.strip() for e in self.environment.split(',') if e.strip())

  def validate(self) -> None:
    """Raises ValueError naming the bad field and the valid choices.

    The agent's builder checks the environment names themselves.
    """
    if self.profile not in experiments.PROFILES:
      raise ValueError(f'profile {self.profile!r}: valid choices are '
                       f'{experiments.PROFILES}')
    if self.launch_type not in launching.LAUNCH_TYPES:
      raise ValueError(f'launch_type {self.launch_type!r}: valid choices are '
                       f'{launching.LAUNCH_TYPES}')
    if int(self.actors_per_node) != self.actors_per_node or (
        self.actors_per_node < 1):
      raise ValueError(f'actors_per_node must be an integer >= 1, got '
                       f'{self.actors_per_node!r}')
    for name in ('learner_cpus', 'other_cpus'):
      cpus = getattr(self, name)
      if cpus is not None and (not cpus or any(
          c not in launching.available_cpus() for c in cpus)):
        raise ValueError(f'{name} {cpus!r}: valid cores here are '
                         f'{sorted(launching.available_cpus())}')
    if not self.environments:
      raise ValueError('environment is empty: name atari/<game> or catch')
    if self.final_episodes is not None and (
        int(self.final_episodes) != self.final_episodes or
        self.final_episodes < 0):
      raise ValueError(f'final_episodes must be an integer >= 0 (0: no final '
                       f'evaluation), got {self.final_episodes!r}')


def add_arguments(parser: argparse.ArgumentParser, config_name: str,
                  default_minutes: float = 10.0) -> None:
  """The program-level flags every agent program takes."""
  parser.add_argument('--environment', default='atari/pong',
                      help='atari/<game> or catch')
  parser.add_argument('--profile', choices=experiments.PROFILES,
                      default='local')
  parser.add_argument('--minutes', type=float, default=default_minutes)
  parser.add_argument('--max_actor_frames', type=int, default=None)
  parser.add_argument('--max_learner_steps', type=int, default=None)
  parser.add_argument('--num_actors', type=int, default=None)
  parser.add_argument('--launch_type', choices=launching.LAUNCH_TYPES,
                      default='local_mp')
  parser.add_argument('--no_evaluator', action='store_true')
  parser.add_argument('--actors_per_node', type=int, default=None,
                      help='how many of the paper\'s actors one actor node '
                           'hosts, with batched inference (default: the '
                           'profile\'s; 1 = one process per actor)')
  parser.add_argument('--learner_cpus', type=cpu_list, default=None,
                      help='pin the learner to these cores, e.g. 0')
  parser.add_argument('--other_cpus', type=cpu_list, default=None,
                      help='pin every other node to these cores, e.g. 1')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--final_episodes', type=int, default=None,
                      help='episodes per game of the final evaluation of the '
                           'last checkpoint, played after the run (default: '
                           'the paper\'s count in the paper profile, '
                           f'{LOCAL_FINAL_EPISODES} locally; 0: none)')
  parser.add_argument('--final_evaluation_minutes', type=float, default=None,
                      help='time budget of the final evaluation (default: '
                           f'none in the paper profile, '
                           f'{LOCAL_FINAL_EVALUATION_S / 60:.0f} locally)')
  parser.add_argument('--set', action='append', default=[],
                      metavar='FIELD=VALUE',
                      help=f'override a {config_name} field (repeatable), '
                           'e.g. --set learning_rate=0.001')
  parser.add_argument('--report_period_s', type=float, default=10.0,
                      help='seconds between progress lines and counter polls')
  parser.add_argument('--runs_root', default=None)
  parser.add_argument('--run_id', default=None)
  parser.add_argument('--resume', action='store_true',
                      help='continue the run --run_id from its checkpoints')
  parser.add_argument('--verbose', action='store_true',
                      help='print every line of every node (by default only '
                           'progress, warnings and errors; each node\'s whole '
                           'output is in the run record\'s logs/)')


def from_arguments(args: argparse.Namespace,
                   default_actors_per_node: int) -> ProgramConfig:
  return ProgramConfig(
      environment=args.environment, profile=args.profile,
      max_seconds=60.0 * args.minutes, max_actor_frames=args.max_actor_frames,
      max_learner_steps=args.max_learner_steps, launch_type=args.launch_type,
      evaluator=not args.no_evaluator, seed=args.seed,
      report_period_s=args.report_period_s,
      actors_per_node=(args.actors_per_node if args.actors_per_node
                       else default_actors_per_node),
      learner_cpus=args.learner_cpus, other_cpus=args.other_cpus,
      final_episodes=args.final_episodes,
      final_evaluation_seconds=(None if args.final_evaluation_minutes is None
                                else 60.0 * args.final_evaluation_minutes))


# The local profile's final evaluation: DQN's 30 episodes (Mnih et al. 2015),
# within a budget that keeps a local program short; the paper profile plays
# the agent's paper count without a time bound.
LOCAL_FINAL_EPISODES = 30
LOCAL_FINAL_EVALUATION_S = 900.0


def final_evaluation_budget(program: ProgramConfig, paper_episodes: int
                            ) -> Tuple[int, Optional[float]]:
  """(episodes per game, seconds or None) of `program`'s final evaluation."""
  paper = program.profile == 'paper'
  if program.final_episodes is not None:
    episodes = program.final_episodes
  else:
    episodes = paper_episodes if paper else min(paper_episodes,
                                                LOCAL_FINAL_EPISODES)
  seconds = program.final_evaluation_seconds
  if seconds is None and not paper:
    seconds = LOCAL_FINAL_EVALUATION_S
  return episodes, seconds


def cpu_list(text: str) -> Tuple[int, ...]:
  try:
    return tuple(int(c) for c in text.split(','))
  except ValueError:
    raise argparse.ArgumentTypeError(
        f'{text!r}: expected comma-separated core numbers, e.g. 0 or 0,1')


def parse_overrides(config_class: Type[Any],
                    items: Sequence[str]) -> Dict[str, Any]:
  """FIELD=VALUE strings into typed overrides of a config dataclass."""
  defaults = config_class()
  names = sorted(f.name for f in dataclasses.fields(config_class))
  overrides = {}
  for item in items:
    name, sep, text = item.partition('=')
    if not sep or name not in names:
      raise SystemExit(f'--set {item!r}: expected FIELD=VALUE with FIELD one '
                       f'of {", ".join(names)}')
    default = getattr(defaults, name)
    try:
      if isinstance(default, bool):
        if text.lower() not in ('1', 'true', 'yes', '0', 'false', 'no'):
          raise ValueError(text)
        overrides[name] = text.lower() in ('1', 'true', 'yes')
      elif isinstance(default, tuple):
        overrides[name] = tuple(type(default[0])(v) if default else int(v)
                                for v in text.split(','))
      else:
        overrides[name] = type(default)(text)
    except ValueError:
      kind = 'true or false' if isinstance(default, bool) else (
          f'comma-separated {type(default[0]).__name__} values'
          if isinstance(default, tuple) and default else
          type(default).__name__)
      raise SystemExit(f'--set {item!r}: {name} takes {kind}, e.g. '
                       f'{name}={_format(default)}') from None
  return overrides


def _format(value: Any) -> str:
  if isinstance(value, tuple):
    return ','.join(str(v) for v in value)
  return str(value)
