"""The smoke program: real distributed plumbing, end to end, in seconds.

    python -m launch_programs.smoke --num_actors 2 --max_learner_steps 300

The smoke agent (agents/smoke/) placed by the program every paper agent uses
(launch_programs/distributed.py): a Reverb server, N actors on Catch, a
learner, a counter and a supervisor, each a Launchpad node. The supervisor
stops it at its bound and records what flowed: items inserted and sampled
(from the Reverb server's own statistics), learner steps, and each actor's
parameter version.
"""

import argparse
import dataclasses
import sys
from typing import Any, Dict, Optional, Sequence

from agents.smoke import builder as builder_lib
from launch_programs import distributed
from launch_programs import launching
from launch_programs import program_config

Builder = builder_lib.SmokeBuilder
SmokeConfig = builder_lib.SmokeConfig


def program(max_learner_steps: int = 300, max_seconds: float = 40.0,
            launch_type: str = 'local_mp',
            report_period_s: float = 2.0) -> program_config.ProgramConfig:
  """The smoke program's bounds and placement: Catch, no evaluator."""
  return program_config.ProgramConfig(
      environment='catch', max_seconds=max_seconds,
      max_learner_steps=max_learner_steps, launch_type=launch_type,
      evaluator=False, report_period_s=report_period_s)


def run(config: SmokeConfig, settings: program_config.ProgramConfig,
        runs_root: Optional[str] = None,
        run_id: Optional[str] = None, verbose: bool = False) -> Dict[str, Any]:
  """Creates the run record, runs the program to its bound, returns its summary."""
  builder = Builder(config, settings.environment, seed=settings.seed)
  # Nothing to flush: nodes that linger after the stop are not waited for.
  return distributed.run(builder, settings, runs_root, run_id,
                         stop_grace_s=3.0, verbose=verbose)


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
  defaults = dataclasses.asdict(program())
  parser.add_argument('--num_actors', type=int,
                      default=SmokeConfig().num_actors)
  parser.add_argument('--max_learner_steps', type=int,
                      default=defaults['max_learner_steps'])
  parser.add_argument('--max_seconds', type=float,
                      default=defaults['max_seconds'])
  parser.add_argument('--launch_type', choices=launching.LAUNCH_TYPES,
                      default=defaults['launch_type'])
  parser.add_argument('--runs_root', default=None,
                      help='where run records go (default: results/runs)')
  parser.add_argument('--run_id', default=None)
  parser.add_argument('--verbose', action='store_true',
                      help='print every line of every node')
  args = parser.parse_args(argv)
  try:
    config = SmokeConfig(num_actors=args.num_actors)
    settings = program(args.max_learner_steps, args.max_seconds,
                       args.launch_type)
    Builder(config, settings.environment).validate()
  except ValueError as error:
    parser.error(str(error))
  summary = run(config, settings, args.runs_root, args.run_id, args.verbose)
  print(describe(summary), flush=True)
  return distributed.print_closing_summary('smoke', summary)


if __name__ == '__main__':
  sys.exit(main())
