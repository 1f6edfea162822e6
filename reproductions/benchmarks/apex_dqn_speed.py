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
                     the ceiling for learner samples/s, and the XLA effect;
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

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


# --- Bare limits, each in its own pinned subprocess. ------------------------


def run_python(code: str, cpus: Sequence[int], timeout_s: float) -> Dict:
  """Runs `code` pinned to `cpus`; it prints one JSON line last."""
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  command = ['taskset', '-c', ','.join(map(str, cpus)), sys.executable, '-c',
             code]
  out = subprocess.run(command, capture_output=True, text=True, env=env,
                       timeout=timeout_s, cwd=ROOT, check=False)
  lines = [l for l in out.stdout.splitlines() if l.startswith('{')]
  if out.returncode != 0 or not lines:
    raise RuntimeError(f'bare measurement failed:\n{out.stderr[-3000:]}')
  return json.loads(lines[-1])


_BARE_ENV = r'''
import json, time
import numpy as np
from reproductions.benchmarks import env_speed
runners = [env_speed._bare_runner({game!r}, 0), env_speed._ours_runner({game!r}, 0)]
for r in runners: r.run(0.3)
out = {{}}
for r in runners:
  steps, frames, elapsed = r.run({seconds})
  out[r.name + '_frames_per_s'] = frames / elapsed
print(json.dumps(out))
'''

_BARE_STEP = r'''
import json, time
import numpy as np, reverb, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
from acme import types
from agents.apex_dqn import config as config_lib, learning
from launch_programs import apex_dqn
config = config_lib.ApeXDQNConfig.local(batch_size={batch}, jit_compile={xla},
                                        min_replay_size=max(5000, {batch}))
rng = np.random.default_rng(0)
b, a = {batch}, 6
obs = lambda: tf.constant(rng.integers(0, 256, (b, 84, 84, 4), dtype=np.uint8))
sample = reverb.ReplaySample(
    info=reverb.SampleInfo(key=tf.constant(np.arange(b, dtype=np.uint64)),
                           probability=tf.constant(np.full(b, 1e-4)),
                           table_size=tf.constant(np.full(b, 10000, np.int64)),
                           priority=tf.constant(np.ones(b))),
    data=types.Transition(observation=obs(),
        action=tf.constant(rng.integers(0, a, b, dtype=np.int32)),
        reward=tf.constant(rng.uniform(-1, 1, b).astype(np.float32)),
        discount=tf.constant(np.full(b, 0.97, np.float32)),
        next_observation=obs(), extras={{}}))
spec = ((84, 84, 4), a)
learner = learning.ApeXDQNLearner(
    apex_dqn.make_network(spec, config), apex_dqn.make_network(spec, config),
    dataset=tf.data.Dataset.from_tensors(sample).repeat(), config=config)
for _ in range(3): learner.step()
start, n = time.perf_counter(), 0
while time.perf_counter() - start < {seconds}:
  learner.step(); n += 1
steps = n / (time.perf_counter() - start)
print(json.dumps({{'steps_per_s': steps, 'samples_per_s': steps * b}}))
'''


def bare_environment(game: str, seconds: float, cpu: int) -> Dict[str, float]:
  return run_python(_BARE_ENV.format(game=game, seconds=seconds), [cpu],
                     timeout_s=seconds * 3 + 120)


def bare_train_step(batch: int, xla: bool, seconds: float,
                    cpu: int) -> Dict[str, float]:
  return run_python(
      _BARE_STEP.format(batch=batch, xla=xla, seconds=seconds), [cpu],
      timeout_s=seconds + 240)


# --- Program runs. ---------------------------------------------------------


def node_title(process: psutil.Process) -> Optional[str]:
  """The Launchpad node a process runs, from its output decorator's command."""
  try:
    parent = process.parent()
    while parent is not None:
      command = parent.cmdline()
      if any(part.endswith('decorate_output') for part in command):
        return command[command.index(next(
            p for p in command if p.endswith('decorate_output'))) + 2]
      parent = parent.parent()
  except (psutil.Error, ValueError, IndexError):
    return None
  return None


class MemorySampler(threading.Thread):
  """Peak RSS per node of a program's process tree, every second."""

  def __init__(self, root_pid: int):
    super().__init__(daemon=True)
    self._root = psutil.Process(root_pid)
    self._stop = threading.Event()
    self.peak_mb: Dict[str, float] = {}
    self.peak_total_mb = 0.0

  def run(self):
    while not self._stop.wait(1.0):
      try:
        children = self._root.children(recursive=True)
      except psutil.Error:
        return
      total = 0.0
      for child in children:
        try:
          if not any(p.endswith('process_entry.py') for p in child.cmdline()):
            continue
          rss = child.memory_info().rss / 1e6
        except psutil.Error:
          continue
        title = node_title(child) or str(child.pid)
        self.peak_mb[title] = max(self.peak_mb.get(title, 0.0), rss)
        total += rss
      self.peak_total_mb = max(self.peak_total_mb, total)

  def stop(self):
    self._stop.set()


def run_program(name: str, runs_root: str, num_actors: int,
                actors_per_node: int, seconds: float, batch: int,
                game: str, skip_s: float, xla: bool = False,
                extra: Sequence[str] = ()) -> Dict[str, Any]:
  """Runs the Ape-X program for `seconds` and reads its figures back."""
  from reproductions import run_records  # pylint: disable=g-import-not-at-top
  args = [sys.executable, '-m', 'launch_programs.apex_dqn',
          '--environment', f'atari/{game}', '--num_actors', str(num_actors),
          '--actors_per_node', str(actors_per_node), '--no_evaluator',
          '--minutes', str(seconds / 60.0), '--learner_cpus', '0',
          '--other_cpus', '1', '--report_period_s', '1',
          '--set', f'batch_size={batch}', '--set', 'min_replay_size=1000',
          '--set', f'jit_compile={xla}',
          '--runs_root', runs_root, '--run_id', name, *extra]
  env = dict(os.environ, PYTHONPATH=ROOT)
  launched = time.time()
  process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
  sampler = MemorySampler(process.pid)
  sampler.start()
  try:
    output, _ = process.communicate(timeout=seconds + 180)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, 9)
    output, _ = process.communicate()
  sampler.stop()
  try:  # nothing of the program may outlive it
    os.killpg(process.pid, 9)
  except ProcessLookupError:
    pass
  record = run_records.RunRecord(os.path.join(runs_root, name))
  summary = record.read_summary() or {}
  if process.returncode != 0 or not summary:
    raise RuntimeError(f'{name} failed:\n{output.decode()[-4000:]}')
  return read_figures(record, summary, sampler, launched, skip_s, batch)


def read_figures(record, summary, sampler, launched, skip_s, batch):
  rows = record.read_metrics('supervisor')
  learner_rows = record.read_metrics('learner')
  first = next((r for r in learner_rows if r.get('learner_steps')), None)
  launch_to_first_step = (float(first['unix_time']) - launched
                          if first and first.get('unix_time') else None)
  stepping = [r for r in rows if (r.get('learner_steps') or 0) > 0]
  if len(stepping) < 3:
    raise RuntimeError('the learner never ran long enough to measure')
  t0 = float(stepping[0]['wall_time_s']) + skip_s
  window = [r for r in stepping if float(r['wall_time_s']) >= t0] or stepping
  a, b = window[0], window[-1]
  seconds = max(float(b['wall_time_s']) - float(a['wall_time_s']), 1e-9)
  frames_per_s = (b['actor_frames'] - a['actor_frames']) / seconds
  steps_per_s = (b['learner_steps'] - a['learner_steps']) / seconds
  learner = summary['nodes'].get('learner', {})
  wall = max(summary.get('wall_s', 1.0), 1e-9)
  actors = {k: v for k, v in summary['nodes'].items() if k.startswith('actor/')}
  lanes = [lane for v in actors.values()
           for lane in (v.get('actors') or [v]) if isinstance(v, dict)]
  rss = sampler.peak_mb

  def peak(prefix):
    values = [v for k, v in rss.items() if k.startswith(prefix)]
    return max(values) if values else None

  return {
      'window_s': round(seconds, 1),
      'actor_frames_per_s': frames_per_s,
      'actor_frames_per_s_per_actor': frames_per_s / max(len(lanes), 1),
      'learner_steps_per_s': steps_per_s,
      'learner_samples_per_s': steps_per_s * batch,
      'replay_inserts_per_s': learner.get('items_inserted', 0) / wall,
      'replay_samples_per_s': learner.get('items_sampled', 0) / wall,
      'launch_to_first_learner_step_s': launch_to_first_step,
      'learner_rss_mb': peak('learner'),
      'replay_rss_mb': peak('replay'),
      'actor_node_rss_mb': peak('actor'),
      'rss_mb_by_node': {k: round(v) for k, v in sorted(rss.items())},
      'total_rss_mb': sampler.peak_total_mb,
      'actors_that_inserted': sum(1 for l in lanes if l.get('items_sent')),
      'actors': len(lanes),
  }


# --- Driver. ---------------------------------------------------------------


def fmt(value, digits=0):
  if value is None:
    return '-'
  return f'{value:,.{digits}f}'


def main(argv=None) -> Dict[str, Any]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--game', default='pong')
  parser.add_argument('--seconds', type=float, default=75.0,
                      help='length of each program run')
  parser.add_argument('--skip', type=float, default=15.0,
                      help='seconds after the first learner step not measured')
  parser.add_argument('--batch_size', type=int, default=32,
                      help='batch of the 1/2/4-actor runs (32, as in the '
                           'Acme kit\'s reference DQN run)')
  parser.add_argument('--actors_per_node', type=int, default=4)
  parser.add_argument('--quick', action='store_true',
                      help='4 actors only, no placement or 256-actor runs')
  parser.add_argument('--out', default=None, help='also write the JSON here')
  args = parser.parse_args(argv)
  if len(os.sched_getaffinity(0)) < 2:
    parser.error('needs at least 2 cores: one for the learner, one for the '
                 'rest')
  results: Dict[str, Any] = {'game': args.game, 'batch_size': args.batch_size,
                             'cpu_budget': 'learner: core 0, 1 TF thread; '
                                           'actors, replay, counter: core 1'}

  print(f'[bench] bare environment on core 1 ({args.game})', flush=True)
  results['bare_env'] = bare_environment(args.game, 10.0, cpu=1)
  print(f'[bench] bare train step on core 0 (batch {args.batch_size}, 512)',
        flush=True)
  results['bare_step'] = {
      f'b{b}_xla{int(x)}': bare_train_step(b, x, 20.0, cpu=0)
      for b in (args.batch_size, 512) for x in (False, True)}
  bare_fps = results['bare_env']['ours_frames_per_s']
  bare_sps = results['bare_step'][f'b{args.batch_size}_xla0']['samples_per_s']

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
  print(f'bare environment: ours {bare_fps:,.0f} frames/s, bare ale_py '
        f'{results["bare_env"]["bare_frames_per_s"]:,.0f} frames/s')
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
  del bare_sps
  line = json.dumps(results, default=float)
  print(line)
  if args.out:
    with open(args.out, 'w') as f:
      f.write(line + '\n')
  return results


if __name__ == '__main__':
  main()
