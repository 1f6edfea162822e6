"""What the program benchmarks share, so that their figures mean the same.

apex_dqn_speed and impala_speed state every figure against a limit measured
in the same invocation under the same CPU budget, and read a program run the
same way: the program pinned by `--learner_cpus 0 --other_cpus 1`, each
node's resident set and CPU time sampled every second from its process tree,
rates taken from the supervisor's counter polls over a steady window. An
Ape-X figure and an IMPALA figure can only be set side by side if both are
measured by this one copy of the machinery.

Bare limits run in a child process each (reproductions.benchmarks.bare_limits,
started by `run_pinned`): pinned with `taskset` before the interpreter starts,
with a TF runtime of its own that no earlier measurement has warmed.
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psutil

from reproductions import run_records
from reproductions.benchmarks import bare_limits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# The CPU budget of every program run, and the cores the limits run on.
LEARNER_CPU = 0
OTHER_CPU = 1


# --- Bare limits, each in its own pinned subprocess. ------------------------


def run_pinned(measurement: Callable[..., Dict[str, Any]], cpus: Sequence[int],
               timeout_s: float, **kwargs: Any) -> Dict[str, Any]:
  """Runs one of bare_limits' measurements pinned to `cpus`, in a new process.

  Args:
    measurement: a function of bare_limits.MEASUREMENTS.
    cpus: the cores the child runs on, from its first instruction.
    timeout_s: the child's bound.
    **kwargs: the measurement's arguments (JSON-serialisable).

  Returns:
    The JSON object the measurement printed.
  """
  name = measurement.__name__
  if bare_limits.MEASUREMENTS.get(name) is not measurement:
    raise ValueError(f'{name} is not one of bare_limits.MEASUREMENTS')
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  command = ['taskset', '-c', ','.join(map(str, cpus)), sys.executable, '-m',
             bare_limits.__name__, name, '--args_json', json.dumps(kwargs)]
  out = subprocess.run(command, capture_output=True, text=True, env=env,
                       timeout=timeout_s, cwd=ROOT, check=False)
  lines = [l for l in out.stdout.splitlines() if l.startswith('{')]
  if out.returncode != 0 or not lines:
    raise RuntimeError(f'bare measurement {name} failed:\n'
                       f'{out.stderr[-3000:]}')
  return json.loads(lines[-1])


def bare_environment(game: str, seconds: float,
                     cpu: int = OTHER_CPU) -> Dict[str, float]:
  """Our environment's and bare ale_py's frames/s, alone on `cpu`."""
  return run_pinned(bare_limits.bare_environment, [cpu],
                    timeout_s=seconds * 3 + 120, game=game, seconds=seconds)


def bare_environment_line(bare_env: Dict[str, float]) -> str:
  return (f'bare environment: ours {bare_env["ours_frames_per_s"]:,.0f} '
          f'frames/s, bare ale_py {bare_env["bare_frames_per_s"]:,.0f} '
          'frames/s')


# --- Sampling a running program. --------------------------------------------


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


class _NodeSampler(threading.Thread):
  """Every second, samples the node processes of a program's process tree."""

  def __init__(self, root_pid: int):
    super().__init__(daemon=True)
    self._root = psutil.Process(root_pid)
    self._stop = threading.Event()

  def run(self):
    while not self._stop.wait(1.0):
      try:
        children = self._root.children(recursive=True)
      except psutil.Error:
        return
      nodes = []
      for child in children:
        try:
          if any(p.endswith('process_entry.py') for p in child.cmdline()):
            nodes.append((child, node_title(child)))
        except psutil.Error:
          continue
      self._sample(time.time(), nodes)

  def _sample(self, now: float,
              nodes: List[Tuple[psutil.Process, Optional[str]]]) -> None:
    """One poll: (process, node title or None) of every node process."""
    raise NotImplementedError

  def stop(self):
    self._stop.set()


class MemorySampler(_NodeSampler):
  """Peak RSS per node of a program's process tree, every second."""

  def __init__(self, root_pid: int):
    super().__init__(root_pid)
    self.peak_mb: Dict[str, float] = {}
    self.peak_total_mb = 0.0

  def _sample(self, now, nodes):
    del now
    total = 0.0
    for process, title in nodes:
      try:
        rss = process.memory_info().rss / 1e6
      except psutil.Error:
        continue
      title = title or str(process.pid)
      self.peak_mb[title] = max(self.peak_mb.get(title, 0.0), rss)
      total += rss
    self.peak_total_mb = max(self.peak_total_mb, total)


class CpuSampler(_NodeSampler):
  """CPU seconds of each node of a program's process tree, every second."""

  def __init__(self, root_pid: int):
    super().__init__(root_pid)
    # pid -> (node title, [(unix time, CPU seconds), ...]).
    self._samples: Dict[int, Tuple[str, List[Tuple[float, float]]]] = {}

  def _sample(self, now, nodes):
    for process, title in nodes:
      if title is None:  # Launchpad's output wrapper, not a node
        continue
      try:
        times = process.cpu_times()
      except psutil.Error:
        continue
      self._samples.setdefault(process.pid, (title, []))[1].append(
          (now, times.user + times.system))

  def cores_used(self, start: float, end: float) -> Dict[str, float]:
    """Per node: CPU seconds over wall seconds between `start` and `end`."""
    cores: Dict[str, float] = {}
    for title, samples in self._samples.values():
      inside = [s for s in samples if start - 0.5 <= s[0] <= end + 0.5]
      if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1.0:
        continue
      (t0, c0), (t1, c1) = inside[0], inside[-1]
      cores[title] = round(cores.get(title, 0.0) + (c1 - c0) / (t1 - t0), 3)
    return dict(sorted(cores.items()))


# --- Program runs. ---------------------------------------------------------


def program_flags(game: str, num_actors: int, actors_per_node: int,
                  minutes: float, runs_root: str, name: str) -> List[str]:
  """The flags every program run shares: the CPU budget, no evaluator and
  no final evaluation (it plays after the run, outside what is measured)."""
  return ['--environment', f'atari/{game}', '--num_actors', str(num_actors),
          '--actors_per_node', str(actors_per_node), '--no_evaluator',
          '--final_episodes', '0',
          '--minutes', str(minutes), '--learner_cpus', str(LEARNER_CPU),
          '--other_cpus', str(OTHER_CPU), '--report_period_s', '1',
          '--runs_root', runs_root, '--run_id', name]


@dataclasses.dataclass
class ProgramRun:
  """A finished program run: its output, record and what was sampled."""
  returncode: int
  output: str
  launched: float  # Unix time of the program's process start.
  memory: MemorySampler
  cpu: CpuSampler
  record: run_records.RunRecord
  summary: Dict[str, Any]


def launch(module: str, flags: Sequence[str], run_dir: str, timeout_s: float,
           log_path: Optional[str] = None) -> ProgramRun:
  """Runs `python -m module flags`, sampling it, and kills what it leaves.

  The program's output goes to `log_path` if given; its run record is read
  from `run_dir` (its `--runs_root`/`--run_id`).
  """
  env = dict(os.environ, PYTHONPATH=ROOT)
  launched = time.time()
  process = subprocess.Popen([sys.executable, '-m', module, *flags], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
  memory, cpu = MemorySampler(process.pid), CpuSampler(process.pid)
  memory.start()
  cpu.start()
  try:
    output, _ = process.communicate(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, 9)
    output, _ = process.communicate()
  memory.stop()
  cpu.stop()
  try:  # nothing of the program may outlive it
    os.killpg(process.pid, 9)
  except ProcessLookupError:
    pass
  text = output.decode(errors='replace')
  if log_path:
    with open(log_path, 'w') as f:
      f.write(text)
  record = run_records.RunRecord(run_dir)
  return ProgramRun(returncode=process.returncode, output=text,
                    launched=launched, memory=memory, cpu=cpu, record=record,
                    summary=record.read_summary() or {})


def read_figures(record: run_records.RunRecord, summary: Dict[str, Any],
                 sampler: MemorySampler, launched: float, skip_s: float,
                 batch: int) -> Dict[str, Any]:
  """A program run's rates (steady window), start-up and memory figures."""
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


# --- Command line and output. -----------------------------------------------


def argument_parser(module_doc: str,
                    seconds_help: str) -> argparse.ArgumentParser:
  """The flags of every program benchmark: game, run length, skipped start."""
  parser = argparse.ArgumentParser(description=module_doc.split('\n\n')[0])
  parser.add_argument('--game', default='pong')
  parser.add_argument('--seconds', type=float, default=75.0, help=seconds_help)
  parser.add_argument('--skip', type=float, default=15.0,
                      help='seconds after the first learner step not measured')
  return parser


def require_cores(parser: argparse.ArgumentParser) -> None:
  """The CPU budget needs a core for the learner and one for the rest."""
  if len(os.sched_getaffinity(0)) < 2:
    parser.error('needs at least 2 cores: one for the learner, one for the '
                 'rest')


def fmt(value, digits=0):
  if value is None:
    return '-'
  return f'{value:,.{digits}f}'


def write_json(results: Dict[str, Any], out: Optional[str]) -> None:
  """Prints the results as one JSON line, and writes it to `out` if given."""
  line = json.dumps(results, default=float)
  print(line)
  if out:
    with open(out, 'w') as f:
      f.write(line + '\n')
