"""The papers' final evaluation of a run: its last checkpoint, N episodes.

Usage:
  python -m reproductions.evaluate results/runs/<run-id>
  python -m reproductions.evaluate <run> --episodes 200 --processes 2

Plays the agent's evaluation regime (no-op starts, the paper's episode cap,
raw game score) with the learner's last checkpoint, for the paper's episode
count unless --episodes says otherwise (IMPALA Sec. 5.3.2: 200; Ape-X: NOT
STATED, 30 as DQN's), and writes final_evaluation.csv into the run record,
atomically. Programs run it at their end (--final_episodes);
reproductions.compare and .figures score a run by it when it is there.
See agents/final_evaluation.py.
"""

import argparse
import json
import pathlib
import sys
from typing import Optional, Sequence

from reproductions import run_records


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('run', help='a run directory (results/runs/<run-id>)')
  parser.add_argument('--episodes', type=int, default=None,
                      help="episodes per game (default: the paper's count)")
  parser.add_argument('--processes', type=int, default=1,
                      help='worker processes playing episodes in parallel')
  parser.add_argument('--minutes', type=float, default=None,
                      help='start no episode after this many minutes')
  args = parser.parse_args(argv)
  run_dir = pathlib.Path(args.run)
  if not (run_dir / run_records.CONFIG_FILE).exists():
    parser.error(f'{run_dir}: not a run directory (no '
                 f'{run_records.CONFIG_FILE})')
  if args.episodes is not None and args.episodes < 1:
    parser.error(f'--episodes must be >= 1, got {args.episodes}')
  if args.processes < 1:
    parser.error(f'--processes must be >= 1, got {args.processes}')
  from agents import final_evaluation  # pylint: disable=g-import-not-at-top
  try:
    result = final_evaluation.evaluate(
        run_dir, args.episodes, args.processes,
        None if args.minutes is None else 60.0 * args.minutes)
  except (FileNotFoundError, ValueError) as error:
    print(f'error: {error}', file=sys.stderr)
    return 1
  print(json.dumps(result, indent=1, default=str))
  print(f'wrote {run_dir / run_records.FINAL_EVALUATION_FILE}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
