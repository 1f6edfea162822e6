"""The README's main job: `bash launch_programs/main.sh [--minutes M]`.

Until the first paper agent lands, the main job is the smoke program: a real
Launchpad program (Reverb server, actors, learner, counter, supervisor) on
Catch. It shows progress while it runs and ends by printing what flowed through
the system. By default it stops itself after 2 minutes of wall time (well inside
10 minutes, start-up included); `--minutes` runs it longer.
"""

import argparse
import sys
from typing import Optional, Sequence

from launch_programs import smoke


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      description='Main job: the Launchpad smoke program on Catch.')
  parser.add_argument('--minutes', type=float, default=2.0,
                      help='wall-time bound of the run (default: 2)')
  parser.add_argument('--num_actors', type=int, default=2)
  parser.add_argument('--runs_root', default=None,
                      help='where the run record goes (default: results/runs)')
  args = parser.parse_args(argv)
  if args.minutes <= 0:
    parser.error('--minutes must be positive')
  config = smoke.SmokeConfig(
      num_actors=args.num_actors, max_seconds=60.0 * args.minutes,
      # The wall-time bound is the one that ends the main job.
      max_learner_steps=10**9, report_period_s=5.0)
  summary = smoke.run(config, runs_root=args.runs_root)
  print('\n=== what flowed ===\n' + smoke.describe(summary), flush=True)
  learner = summary.get('nodes', {}).get('learner', {})
  ok = (isinstance(learner, dict) and (learner.get('items_inserted') or 0) > 0
        and (learner.get('learner_steps') or 0) > 0)
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
