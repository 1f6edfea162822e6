"""The README's main job: `bash launch_programs/main.sh [--minutes M]`.

A short local-profile Ape-X DQN run on Pong (launch_programs.apex_dqn: replay,
learner, 4 actors, evaluator, counter, supervisor). It prints progress while
it runs (frames, episodes, learner steps, rates, ETA) and, when it stops,
leaves in its run record:

  apex_fig2.png   the learning curve: evaluation score (no-op starts) against
                  wall-clock time, and human-normalized score, drawn by
                  reproductions.figures from the run's evaluation episodes;
  final_evaluation.csv  the final evaluation: `--final_episodes` episodes
                  (default 10) of the last checkpoint, no-op starts;
  scores.md       the score table of reproductions.compare (our score, from
                  the final evaluation, the paper's, HNS of each, how many
                  episodes).

A few minutes on two cores is far from the paper's 22.8 billion frames: expect
a Pong score near -21 to -20. The point is that every part runs and records.
`--minutes` runs it longer; `--smoke` runs the plain Launchpad smoke program
on Catch instead (the foundation's check that the stack works).
"""

import argparse
import contextlib
import io
import pathlib
import sys
from typing import Optional, Sequence

from launch_programs import apex_dqn
from launch_programs import distributed
from launch_programs import launching
from launch_programs import program_config
from launch_programs import smoke


def _smoke(args) -> int:
  summary = smoke.run(
      smoke.SmokeConfig(num_actors=2),
      smoke.program(max_learner_steps=10**9, max_seconds=60.0 * args.minutes,
                    report_period_s=5.0),
      runs_root=args.runs_root)
  print('\n=== what flowed ===\n' + smoke.describe(summary), flush=True)
  learner = summary.get('nodes', {}).get('learner', {})
  ok = (isinstance(learner, dict) and (learner.get('items_inserted') or 0) > 0
        and (learner.get('learner_steps') or 0) > 0)
  return 0 if ok else 1


def write_curve_and_scores(run_dir: pathlib.Path) -> Sequence[pathlib.Path]:
  """The run's learning curve PNG and score table, next to its records."""
  from reproductions import compare  # pylint: disable=g-import-not-at-top
  from reproductions import figures  # pylint: disable=g-import-not-at-top
  written = []
  runs = figures.load_runs([str(run_dir)])
  try:
    figures.render('apex_fig2', runs, out_dir=run_dir)
    written.append(run_dir / 'apex_fig2.png')
  except figures.FigureError as error:
    print(f'[main] no curve: {error}', flush=True)
  out = io.StringIO()
  try:
    with contextlib.redirect_stdout(out):
      compare.main([str(run_dir)])
  except SystemExit as error:  # compare reports bad input through argparse
    print(f'[main] no score table (compare exited {error.code})', flush=True)
  else:
    (run_dir / 'scores.md').write_text(
        '```\n' + out.getvalue() + '```\n', encoding='utf-8')
    written.append(run_dir / 'scores.md')
    print(out.getvalue(), flush=True)
  return written


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      description='Main job: a short local Ape-X DQN run on Pong.')
  parser.add_argument('--minutes', type=float, default=5.0,
                      help='wall-time bound of the run (default: 5)')
  parser.add_argument('--game', default='pong',
                      help='Atari game (default: pong)')
  parser.add_argument('--runs_root', default=None,
                      help='where the run record goes (default: results/runs)')
  parser.add_argument('--final_episodes', type=int, default=10,
                      help='episodes of the final evaluation of the last '
                           'checkpoint, after the run (default: 10; 0: none)')
  parser.add_argument('--verbose', action='store_true',
                      help='print every line of every node (their whole '
                           'output is in the run record\'s logs/ anyway)')
  parser.add_argument('--smoke', action='store_true',
                      help='run the Launchpad smoke program on Catch instead')
  args = parser.parse_args(argv)
  if args.minutes <= 0:
    parser.error('--minutes must be positive')
  if args.smoke:
    return _smoke(args)

  # The learner gets a core of its own, the rest share the others: on two
  # cores it otherwise competes with five TF processes (README "Measured
  # performance").
  cpus = sorted(launching.available_cpus())
  learner_cpus, other_cpus = ((cpus[0],), tuple(cpus[1:])) if len(cpus) > 1 \
      else (None, None)
  program = program_config.ProgramConfig(
      environment=f'atari/{args.game}', profile='local',
      max_seconds=60.0 * args.minutes, report_period_s=10.0,
      actors_per_node=apex_dqn.Builder.default_actors_per_node('local'),
      learner_cpus=learner_cpus, other_cpus=other_cpus,
      final_episodes=args.final_episodes)
  try:
    builder = distributed.make_builder(apex_dqn.Builder, program)
  except ValueError as error:
    parser.error(str(error))
  summary = distributed.run(builder, program, runs_root=args.runs_root,
                            verbose=args.verbose)
  for path in write_curve_and_scores(pathlib.Path(summary['run_dir'])):
    print(f'[main] wrote {path}', flush=True)
  code = distributed.print_closing_summary('main', summary)
  learner = summary.get('nodes', {}).get('learner', {})
  if code == 0 and not (isinstance(learner, dict) and
                        (learner.get('learner_steps') or 0) > 0):
    print('[main] exit 1: the learner made no step', flush=True)
    return 1
  return code


if __name__ == '__main__':
  sys.exit(main())
