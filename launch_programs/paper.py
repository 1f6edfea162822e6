"""The one CLI behind every paper entry point.

  python -m launch_programs.paper --list
  python -m launch_programs.paper apex_fig4 --profile local [--games pong]
  python -m launch_programs.paper impala_table2 --profile paper --dry_run

It first prints the plan (per run: nodes and counts, frames, memory estimate;
then totals) so nobody starts a 360-actor job by accident. Then it launches the
agent's program, or, while that agent does not exist, exits with status 2 and
says so: it never fakes a run. Exit codes: 0 launched / dry run, 1 bad
arguments, 2 agent not built.

When an agent lands, set its module path in AGENT_PROGRAMS: that one line
enables all its experiments. The module must offer `run_experiment(runs)`.
"""

import argparse
import importlib
import sys
from typing import Dict, List, Optional, Sequence

from reproductions import experiments

# Agent name -> module path of its launch program (None: not built yet).
AGENT_PROGRAMS: Dict[str, Optional[str]] = {
    'apex_dqn': 'launch_programs.apex_dqn',
    'apex_dpg': None,
    'impala': 'launch_programs.impala',
    'gorila': None,
}

EXIT_OK, EXIT_USAGE, EXIT_NOT_BUILT = 0, 1, 2


def _fmt(count: Optional[float]) -> str:
  if count is None:
    return 'not stated'
  for unit, size in (('B', 1e9), ('M', 1e6), ('K', 1e3)):
    if count >= size:
      return f'{count / size:.3g}{unit}'
  return f'{count:g}'


def agent_built(agent: str) -> bool:
  return AGENT_PROGRAMS.get(agent) is not None


def format_list() -> str:
  lines = []
  for e in experiments.EXPERIMENTS.values():
    status = 'built' if agent_built(e.agent) else 'agent not built yet'
    lines.append(f'{e.name:15s} {e.agent:9s} [{status}]  {e.paper}')
    lines.append(f'{"":15s} {e.description}')
  return '\n'.join(lines)


def format_plan(experiment: experiments.Experiment, profile: str,
                runs: Sequence[experiments.RunSpec]) -> str:
  """What would be launched: one line per run, then totals."""
  lines = [f'{experiment.name}: {experiment.paper}',
           f'  {experiment.description}',
           f'  profile={profile}' + (
               '  (local profile: NOT paper scale; for plumbing and direction '
               'of effects only)' if profile == 'local' else ''),
           f'  {len(runs)} run(s), launched one after another:']
  for i, run in enumerate(runs):
    nodes = ', '.join(f'{k}={v}' for k, v in run.nodes.items())
    budget = f'frames={_fmt(run.total_frames)}'
    if run.wall_hours is not None:
      budget += f', wall={run.wall_hours:g} h'
    lines.append(f'  [{i + 1}] {run.name}')
    lines.append(f'      nodes: {nodes} ({sum(run.nodes.values())} processes)'
                 f'; {budget}; replay={_fmt(run.replay_capacity)} transitions'
                 f'; memory ~{experiments.estimate_memory_gb(run):.1f} GB '
                 '(estimate)')
  frames = [r.total_frames for r in runs if r.total_frames is not None]
  peak = max(experiments.estimate_memory_gb(r) for r in runs)
  lines.append(f'  totals: {len(runs)} runs, '
               f'{_fmt(sum(frames)) if frames else "not stated"} frames'
               + ('' if len(frames) == len(runs) else
                  f' (+{len(runs) - len(frames)} runs bounded by wall time)')
               + f', peak memory ~{peak:.1f} GB (estimate; runs are '
               'sequential), '
               f'{max(sum(r.nodes.values()) for r in runs)} processes at most')
  return '\n'.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      prog='python -m launch_programs.paper',
      description='Launch the runs behind one paper table or figure.')
  parser.add_argument('experiment', nargs='?',
                      help=f'one of: {", ".join(experiments.EXPERIMENTS)}')
  parser.add_argument('--profile', default='local',
                      help=f'one of: {", ".join(experiments.PROFILES)} '
                      '(default: local)')
  parser.add_argument('--games', default=None,
                      help='comma-separated game / task names (default: the '
                      "experiment's set for the profile)")
  parser.add_argument('--dry_run', action='store_true',
                      help='print the plan and exit 0')
  parser.add_argument('--list', action='store_true',
                      help='list every experiment and whether its agent exists')
  args = parser.parse_args(argv)

  if args.list:
    print(format_list())
    return EXIT_OK
  if not args.experiment:
    print('error: name an experiment; valid experiments: '
          f'{", ".join(experiments.EXPERIMENTS)}', file=sys.stderr)
    return EXIT_USAGE
  games = None
  if args.games is not None:
    games = [g.strip() for g in args.games.split(',') if g.strip()]
  try:
    experiment = experiments.get(args.experiment)
    runs: List[experiments.RunSpec] = experiment.runs(args.profile, games)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return EXIT_USAGE

  print(format_plan(experiment, args.profile, runs))
  sys.stdout.flush()
  if args.dry_run:
    print('dry run: nothing was launched.')
    return EXIT_OK
  module = AGENT_PROGRAMS.get(experiment.agent)
  if module is None:
    print(f'the {experiment.agent} agent has not been built yet (see README '
          "'Status'); nothing was launched", file=sys.stderr)
    return EXIT_NOT_BUILT
  program = importlib.import_module(module)
  return program.run_experiment(runs) or EXIT_OK


if __name__ == '__main__':
  sys.exit(main())
