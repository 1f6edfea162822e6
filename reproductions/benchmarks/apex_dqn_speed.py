r"""Ape-X DQN throughput and memory on this machine, each against its limit.

  python -m reproductions.benchmarks.apex_dqn_speed --game pong
  python -m reproductions.benchmarks.apex_dqn_speed --quick   # ~4 min

Every figure is printed as an absolute number and as a ratio to a limit
measured in the same invocation:

  bare environment   our Atari environment and bare ale_py, alone, on the
                     actors' core (frames/s): the ceiling for actor frames/s;
  bare train step    the learner's own compiled step (ApeXDQNLearner.step) on
                     one constant in-memory batch, no Reverb, no decoding, on
                     the learner's core with one TF thread, XLA off and on:
                     the ceiling for learner samples/s, and the XLA effect.
                     Each limit runs in a process of its own, pinned and with
                     a fresh TF runtime (bare_limits.py);
  program runs       the real Launchpad program (launch_programs.apex_dqn,
                     local_mp), evaluator off, no samples-per-insert limit
                     (Ape-X has none), for 1, 2 and 4 actors; then batch 512
                     (memory); then the placement comparison (8 actors, one
                     process each vs one process of 8) and 256 actors.

CPU budget (stated, as the figures depend on it): the learner process is
pinned to core 0 and runs one TF thread; replay, counter, supervisor and the
actors share core 1 (`--learner_cpus 0 --other_cpus 1`). The bare train step
runs under the same pinning. On a bigger machine give each side more cores.

Rates come from the supervisor's counter polls in the run record, over the
steady window (from `--skip` seconds after the first learner step to the
end); memory is each node's peak resident set, sampled every second with
psutil; "launch to first learner step" counts from the start of the program's
process (imports included) to the learner's first metrics row.

Output: a markdown table per part and one JSON line (also --out FILE).
"""

import os
import tempfile
from typing import Any, Dict, Sequence

from reproductions.benchmarks import bare_limits
from reproductions.benchmarks import common
from reproductions.benchmarks.common import fmt


def bare_train_step(batch: int, xla: bool, seconds: float,
                    cpu: int = common.LEARNER_CPU) -> Dict[str, float]:
  return common.run_pinned(bare_limits.bare_apex_step, [cpu],
                           timeout_s=seconds + 240, batch=batch, xla=xla,
                           seconds=seconds)


def run_program(name: str, runs_root: str, num_actors: int,
                actors_per_node: int, seconds: float, batch: int,
                game: str, skip_s: float, xla: bool = False,
                extra: Sequence[str] = ()) -> Dict[str, Any]:
  """Runs the Ape-X program for `seconds` and reads its figures back."""
  flags = common.program_flags(game, num_actors, actors_per_node,
                               seconds / 60.0, runs_root, name)
  flags += ['--set', f'batch_size={batch}', '--set', 'min_replay_size=1000',
            '--set', f'jit_compile={xla}', *extra]
  run = common.launch('launch_programs.apex_dqn', flags,
                      os.path.join(runs_root, name), timeout_s=seconds + 180)
  if run.returncode != 0 or not run.summary:
    raise RuntimeError(f'{name} failed:\n{run.output[-4000:]}')
  return common.read_figures(run.record, run.summary, run.memory,
                             run.launched, skip_s, batch)


# --- Driver. ---------------------------------------------------------------


def main(argv=None) -> Dict[str, Any]:
  parser = common.argument_parser(__doc__, 'length of each program run')
  parser.add_argument('--batch_size', type=int, default=32,
                      help='batch of the 1/2/4-actor runs (32, as in the '
                           'Acme kit\'s reference DQN run)')
  parser.add_argument('--actors_per_node', type=int, default=4)
  parser.add_argument('--quick', action='store_true',
                      help='4 actors only, no placement or 256-actor runs')
  parser.add_argument('--out', default=None, help='also write the JSON here')
  args = parser.parse_args(argv)
  common.require_cores(parser)
  results: Dict[str, Any] = {'game': args.game, 'batch_size': args.batch_size,
                             'cpu_budget': 'learner: core 0, 1 TF thread; '
                                           'actors, replay, counter: core 1'}

  print(f'[bench] bare environment on core 1 ({args.game})', flush=True)
  results['bare_env'] = common.bare_environment(args.game, 10.0)
  print(f'[bench] bare train step on core 0 (batch {args.batch_size}, 512)',
        flush=True)
  results['bare_step'] = {
      f'b{b}_xla{int(x)}': bare_train_step(b, x, 20.0)
      for b in (args.batch_size, 512) for x in (False, True)}
  bare_fps = results['bare_env']['ours_frames_per_s']

  runs_root = tempfile.mkdtemp(prefix='apex_bench_')
  results['runs'] = {}
  plan = [(n, min(n, args.actors_per_node)) for n in
          ((4,) if args.quick else (1, 2, 4))]
  for n, per_node in plan:
    name = f'a{n}_b{args.batch_size}'
    print(f'[bench] program: {n} actors, {per_node} per node', flush=True)
    results['runs'][name] = run_program(
        name, runs_root, n, per_node, args.seconds, args.batch_size,
        args.game, args.skip)
  print('[bench] program: 4 actors, batch 512 (memory)', flush=True)
  results['runs']['a4_b512'] = run_program(
      'a4_b512', runs_root, 4, min(4, args.actors_per_node), args.seconds,
      512, args.game, args.skip)
  if not args.quick:
    for name, n, per_node in (('a8_one_per_node', 8, 1),
                              ('a8_eight_per_node', 8, 8),
                              ('a256_64_per_node', 256, 64)):
      print(f'[bench] placement: {n} actors, {per_node} per node', flush=True)
      results['runs'][name] = run_program(
          name, runs_root, n, per_node, args.seconds, args.batch_size,
          args.game, args.skip)

  print()
  print(f'Ape-X DQN on {args.game}; {results["cpu_budget"]}')
  print(common.bare_environment_line(results['bare_env']))
  for key, value in results['bare_step'].items():
    print(f'bare train step {key}: {value["steps_per_s"]:.2f} steps/s = '
          f'{value["samples_per_s"]:,.0f} samples/s')
  print()
  print('| run | actors | frames/s total | per actor | vs bare env | learner '
        'samples/s | vs bare step | inserts/s | samples/s | launch to 1st '
        'step s | learner RSS MB | actor node RSS MB | total RSS MB |')
  print('|' + '---|' * 13)
  for name, run in results['runs'].items():
    batch = 512 if name.endswith('b512') else args.batch_size
    step = results['bare_step'][f'b{batch}_xla0']['samples_per_s']
    run['frames_vs_bare_env'] = run['actor_frames_per_s'] / bare_fps
    run['samples_vs_bare_step'] = run['learner_samples_per_s'] / step
    print(f'| {name} | {run["actors"]} | {fmt(run["actor_frames_per_s"])} | '
          f'{fmt(run["actor_frames_per_s_per_actor"])} | '
          f'{run["frames_vs_bare_env"]:.3f} | '
          f'{fmt(run["learner_samples_per_s"])} | '
          f'{run["samples_vs_bare_step"]:.2f} | '
          f'{fmt(run["replay_inserts_per_s"])} | '
          f'{fmt(run["replay_samples_per_s"])} | '
          f'{fmt(run["launch_to_first_learner_step_s"], 1)} | '
          f'{fmt(run["learner_rss_mb"])} | {fmt(run["actor_node_rss_mb"])} | '
          f'{fmt(run["total_rss_mb"])} |')
  common.write_json(results, args.out)
  return results


if __name__ == '__main__':
  main()
