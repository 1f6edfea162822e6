"""What every agent program shares: where it runs, when it stops, its CLI.

Why one module: the Ape-X and IMPALA programs (and those to come) take the
same program-level settings (environment, profile, bounds, placement, CPU
pinning, run record) and the same `--set FIELD=VALUE` overrides of their
agent config. Agent settings live in each agent's config dataclass; these are
the settings of the *program*.
"""

import argparse
import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Type

import launchpad as lp

from launch_programs import launching
from launch_programs import supervisor

PROFILES = ('local', 'paper')


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

  def validate(self, families: Sequence[str] = ('atari', 'catch'),
               agent: str = 'this agent') -> None:
    """Raises ValueError naming the bad field and the valid choices."""
    if self.profile not in PROFILES:
      raise ValueError(f'profile {self.profile!r}: valid choices are {PROFILES}')
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
    for environment in self.environments:
      if environment.split('/')[0] not in families:
        raise ValueError(
            f'{agent} acts in {" or ".join(f + "/..." if f == "atari" else f for f in families)}'
            f', not {environment!r}')


# Frame-bounded experiment runs also get a wall-time bound: their frames at
# this rate.
SLOWEST_EXPECTED_FRAMES_PER_S = 200.0


def experiment_max_seconds(run_spec: Any) -> float:
  """A reproductions.experiments.RunSpec's wall-time bound."""
  if run_spec.wall_hours:
    return 3600.0 * run_spec.wall_hours
  return run_spec.total_frames / SLOWEST_EXPECTED_FRAMES_PER_S


# --- Nodes and launch shared by the agent programs. ---------------------------


def counter_node(program: ProgramConfig):
  """The counter node's constructor (on the program's other cores)."""
  launching.pin_process_to_cpus(program.other_cpus)
  return launching.make_counter()


def add_supervisor(lp_program: Any, program: ProgramConfig, counter: Any,
                   run_dir: str, frames_per_actor_step: int,
                   final_reports: Dict[str, Any]) -> None:
  """The node that prints progress and stops the program at its bounds."""
  with lp_program.group('supervisor'):
    lp_program.add_node(lp.CourierNode(
        supervisor.Supervisor, counter, run_dir=run_dir,
        max_learner_steps=program.max_learner_steps,
        max_actor_frames=program.max_actor_frames,
        max_seconds=program.max_seconds,
        frames_per_actor_step=frames_per_actor_step,
        report_period_s=program.report_period_s, final_reports=final_reports,
        cpus=program.other_cpus))


def launch_recorded(agent: str, program: ProgramConfig,
                    config: Dict[str, Any], topology: Dict[str, Any],
                    make_program: Callable[[str], Any],
                    runs_root: Optional[str], run_id: Optional[str],
                    resume: bool) -> Dict[str, Any]:
  """Runs an agent program under its run record (launching.run_recorded).

  A program stops early if its supervisor, learner or counter node exits.
  """
  return launching.run_recorded(
      agent, config, topology, make_program,
      launch_type=program.launch_type, max_seconds=program.max_seconds,
      description=program.description(),
      runs_root=runs_root, run_id=run_id, resume=resume,
      critical_groups=('supervisor', 'learner', 'counter'))


def run_experiment(agent: str, runs: Sequence[Any],
                   configs_for_run: Callable[[Any], Tuple[Any, Any]],
                   run: Callable[..., Dict[str, Any]]) -> int:
  """Runs an experiment's RunSpecs one after another (launch_programs.paper).

  Each run's experiment keys go into its config.json, so that
  reproductions.figures can select it. Returns 1 if any run failed.
  """
  failures = 0
  for i, run_spec in enumerate(runs):
    program, agent_config = configs_for_run(run_spec)
    print(f'[{agent}] run {i + 1}/{len(runs)}: {run_spec.name}', flush=True)
    summary = run(program, agent_config,
                  experiment_keys=dict(run_spec.config))
    failures += summary.get('stop_reason') is None
  return 1 if failures else 0


def add_arguments(parser: argparse.ArgumentParser, config_name: str,
                  default_minutes: float = 10.0) -> None:
  """The program-level flags every agent program takes."""
  parser.add_argument('--environment', default='atari/pong',
                      help='atari/<game> or catch')
  parser.add_argument('--profile', choices=PROFILES, default='local')
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
      learner_cpus=args.learner_cpus, other_cpus=args.other_cpus)


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
    if isinstance(default, bool):
      overrides[name] = text.lower() in ('1', 'true', 'yes')
    elif isinstance(default, tuple):
      overrides[name] = tuple(type(default[0])(v) if default else int(v)
                              for v in text.split(','))
    else:
      overrides[name] = type(default)(text)
  return overrides
