"""Launches a Launchpad program with a hard bound and leaves no process behind.

Why this exists: `lp.launch` returns as soon as the workers are spawned, a
program ends only when some node calls `lp.stop()`, and a node stuck in a
blocking call (a Reverb client waiting for a dead server, say) ignores the
stop. Launchpad's own remedy, after `lp_termination_notice_secs`, is to SIGKILL
the whole runtime *including the launcher*, which then cannot report anything.
So here the launcher's hard kill is turned off and replaced:

1. a supervisor node stops the program at its bound
   (`launch_programs.supervisor`);
2. a watchdog in the launcher stops it anyway `grace_s` after the bound, and
   stops it at once if a node of a critical group (the supervisor, by default)
   exits before a stop was asked for; any node that exits early is reported
   on the console with the last lines of its log (launch_programs.node_logs);
3. once a stop is under way, nodes get `stop_grace_s` to exit on their own,
   then every remaining process of the launcher's tree is SIGKILLed.

The process tree is found with psutil from the launcher's own PID, never by
name, so unrelated processes are never touched.
"""

import dataclasses
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Set, Tuple

from absl import flags
import launchpad as lp
import psutil

from launch_programs import node_logs
from reproductions import run_records

LAUNCH_TYPES = ('local_mp', 'local_mt')


def ensure_absl_flags_parsed() -> None:
  """Launchpad reads absl flags; our entry points use argparse.

  Parsing just the program name gives Launchpad its defaults. The launcher's
  termination notice is set negative: Launchpad then only forwards SIGTERM to
  the nodes and never SIGKILLs the launcher; `launch_and_wait` does the rest.
  """
  if not flags.FLAGS.is_parsed():
    flags.FLAGS([sys.argv[0]], known_only=True)
  flags.FLAGS.lp_termination_notice_secs = -1


@dataclasses.dataclass
class LaunchOutcome:
  launch_s: float            # lp.launch() call to its return
  wall_s: float              # lp.launch() call to the end of the program
  # 'program' (lp.stop from a node), 'watchdog' or 'node exited: ...'.
  stop_cause: str
  killed_leftovers: int      # processes still alive after the grace, SIGKILLed

  @property
  def stopped_by_watchdog(self) -> bool:
    return self.stop_cause not in ('program', INTERRUPTED)


def _node_titles() -> Dict[int, str]:
  """PID -> node title ('learner/0') of the launcher's direct children.

  Under `local_mp` with the current terminal, each node runs under Launchpad's
  `decorate_output` wrapper, whose command line carries the node's title.
  """
  titles = {}
  for child in psutil.Process().children():
    try:
      command = child.cmdline()
    except psutil.Error:
      continue
    for i, part in enumerate(command):
      if part.endswith('decorate_output') and i + 2 < len(command):
        titles[child.pid] = command[i + 2]
  return titles


def _exited(pid: int) -> bool:
  try:
    return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


def set_node_tensorflow_environment() -> None:
  """Gives the nodes the environment TensorFlow sets when it is imported.

  Why: importing TensorFlow sets TF2_BEHAVIOR=1 (and TF_CPP_MIN_LOG_LEVEL=1)
  in its process, and Launchpad's nodes inherit the launcher's environment.
  The launcher does not import TensorFlow, to keep its start-up short
  (launch_programs/replay_node.py), and without TF2_BEHAVIOR in its
  environment a node's TensorFlow starts in graph mode: functions a learner
  node then traces in its main thread register their inner loop and branch
  functions outside the eager context, and their first call fails with "Op
  type not registered 'cond_true_...'" (Ape-X's and IMPALA's learners alike).
  """
  os.environ.setdefault('TF2_BEHAVIOR', '1')
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')


def launch_and_wait(program: lp.Program, *, launch_type: str,
                    max_seconds: float, grace_s: float = 60.0,
                    stop_grace_s: float = 10.0,
                    critical_groups: Sequence[str] = ('supervisor',),
                    local_resources: Optional[Mapping[str, Any]] = None,
                    logs_dir: Optional[os.PathLike] = None,
                    verbose: bool = False) -> LaunchOutcome:
  """Runs `program` to its end; never much past `max_seconds + grace_s`.

  With `logs_dir` (local_mp), each node's output goes to its log there and
  the console shows what launch_programs.node_logs lets through (`verbose`:
  everything).
  """
  if launch_type not in LAUNCH_TYPES:
    raise ValueError(
        f'unknown launch type {launch_type!r}; valid choices: {LAUNCH_TYPES}')
  ensure_absl_flags_parsed()
  if launch_type != 'local_mp':
    logs_dir = None
  node_logs.install_log_writer(logs_dir)
  console = None
  if logs_dir is not None:
    console = node_logs.Console(logs_dir, verbose=verbose)
    console.start()
  set_node_tensorflow_environment()
  start = time.time()
  manager = lp.launch(program, launch_type=launch_type,
                      terminal='current_terminal',
                      local_resources=dict(local_resources or {}),
                      serialize_py_nodes=False)
  launched = time.time()
  stop_event = manager.stop_event()
  done = threading.Event()
  cause = {'value': 'program'}
  killed = {'count': 0}
  _note_interrupts(cause)

  def request_stop(why: str) -> None:
    if stop_event.is_set():
      return
    cause['value'] = why
    print(f'[launcher] stopping the program: {why}', flush=True)
    # The worker manager handles SIGTERM in the main thread and forwards it.
    os.kill(os.getpid(), signal.SIGTERM)

  def watchdog() -> None:
    deadline = start + max_seconds + grace_s
    running = _node_titles() if launch_type == 'local_mp' else {}
    while not done.is_set() and not stop_event.is_set():
      if time.time() > deadline:
        request_stop(f'watchdog: still running {max_seconds + grace_s:.0f} s '
                     'after launch')
        break
      for pid, title in list(running.items()):
        if _exited(pid) and not stop_event.is_set():
          del running[pid]
          if console is not None:
            console.report_exit(title)
          if title.split('/')[0] in critical_groups:
            request_stop(f'node exited: {title}')
            break
      done.wait(0.5)
    stop_event.wait()
    if not done.wait(stop_grace_s):
      print(f'[launcher] nodes still running {stop_grace_s:.0f} s after the '
            'stop: killing them', flush=True)
      killed['count'] = kill_descendants(timeout_s=0)

  watchdog_thread = threading.Thread(target=watchdog, daemon=True,
                                     name='watchdog')
  watchdog_thread.start()
  try:
    # Under local_mt the nodes are threads of this process.
    manager.wait(raise_error=False)
  finally:
    done.set()
    watchdog_thread.join(timeout=15.0)
    killed['count'] += kill_descendants()
    if console is not None:
      console.stop()
  return LaunchOutcome(launch_s=launched - start, wall_s=time.time() - start,
                       stop_cause=cause['value'],
                       killed_leftovers=killed['count'])


# The stop cause of a program the user interrupted (Ctrl-C, SIGINT).
INTERRUPTED = 'interrupted (SIGINT)'


def _note_interrupts(cause: Dict[str, str]) -> None:
  """Records a Ctrl-C as the stop cause, then lets Launchpad's handler stop
  the program as it would (its nodes save their checkpoints on the way out)."""
  previous = signal.getsignal(signal.SIGINT)
  if not callable(previous):
    return

  def handler(signum, frame):
    if cause['value'] == 'program':
      cause['value'] = INTERRUPTED
    previous(signum, frame)
  signal.signal(signal.SIGINT, handler)


def exit_status(summary: Mapping[str, Any]) -> Tuple[int, str]:
  """(exit code, why) of a finished program, from its summary.

  0: it reached a bound. 130: the user interrupted it. 1: anything else (a
  critical node exited, the watchdog stopped it, no summary was written).
  """
  cause = (summary.get('launcher') or {}).get('stop_cause', 'program')
  reason = summary.get('stop_reason')
  if cause == INTERRUPTED:
    return 130, 'interrupted'
  if cause != 'program':
    return 1, cause
  if not reason or reason == 'no summary written':
    return 1, 'the program ended without its supervisor\'s summary'
  return 0, reason


def kill_descendants(timeout_s: float = 5.0) -> int:
  """SIGTERMs, then SIGKILLs, every descendant of this process; the count."""
  children = psutil.Process().children(recursive=True)
  for child in children:
    try:
      child.terminate() if timeout_s else child.kill()
    except psutil.NoSuchProcess:
      pass
  _, alive = psutil.wait_procs(children, timeout=max(timeout_s, 0.1))
  for child in alive:
    try:
      child.kill()
    except psutil.NoSuchProcess:
      pass
  psutil.wait_procs(alive, timeout=5.0)
  return len(alive) if timeout_s else len(children)


def limit_tf_threads(intra_op: int = 1, inter_op: int = 1) -> None:
  """Caps TF's thread pools in this process, before TF's runtime starts.

  Why: under `local_mp` every node is a process, and TF sizes its pools to the
  machine's core count; dozens of processes each with a full pool thrash two
  cores. Nodes call this first thing. Under `local_mt` the process is shared
  and already initialised: the first setting stands.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
  except RuntimeError:
    pass


def available_cpus() -> Set[int]:
  """The cores this process may run on."""
  return set(os.sched_getaffinity(0))


def pin_process_to_cpus(cpus: Optional[Sequence[int]]) -> None:
  """Restricts every thread of this process (and threads it starts) to `cpus`.

  Why every thread: Linux affinity is per thread and `sched_setaffinity(0)`
  sets only the caller's; by the time a node's constructor runs, Launchpad
  and Courier have started threads of their own. New threads inherit their
  creator's mask. None leaves scheduling to the OS.
  """
  if cpus is None:
    return
  cpus = set(cpus)
  for tid in os.listdir('/proc/self/task'):
    try:
      os.sched_setaffinity(int(tid), cpus)
    except (ProcessLookupError, PermissionError):
      pass  # the thread ended meanwhile


def make_counter():
  """The shared counter node's object (Acme's; imports no TensorFlow)."""
  from acme.utils import counting  # pylint: disable=g-import-not-at-top
  return counting.Counter()


def run_recorded(name: str, config: Mapping[str, Any],
                 topology: Mapping[str, Any],
                 make_program: Callable[[str], lp.Program], *,
                 launch_type: str, max_seconds: float, description: str,
                 runs_root: Optional[str] = None, run_id: Optional[str] = None,
                 resume: bool = False,
                 **launch_options: Any) -> Dict[str, Any]:
  """Creates a run record, runs the program to its end, returns its summary.

  The one sequence every program follows: record first (so a crash still
  leaves the config), say what is launched, launch with the bounds above,
  then add the launcher's account (how it stopped) to the supervisor's
  summary. With `resume`, the existing record `run_id` is continued: nodes
  restore from its checkpoints and append to its files.
  """
  if resume:
    if not run_id:
      raise ValueError('resuming needs the run id of the run to continue')
    record = run_records.RunRecord.resume(run_id, root=runs_root)
    print(f'[{name}] resuming {record.run_dir}', flush=True)
  else:
    record = run_records.RunRecord.create(name, config, topology,
                                          root=runs_root, run_id=run_id)
  print(f'[{name}] run record: {record.run_dir}', flush=True)
  print(f'[{name}] launching {json.dumps(dict(topology["nodes"]))} with '
        f'{launch_type}; {description}', flush=True)
  outcome = launch_and_wait(make_program(str(record.run_dir)),
                            launch_type=launch_type, max_seconds=max_seconds,
                            logs_dir=record.logs_dir, **launch_options)
  summary = record.read_summary() or {
      # The supervisor writes the summary when a bound is reached; a program
      # stopped otherwise gets the launcher's reason.
      'stop_reason': (outcome.stop_cause if outcome.stop_cause != 'program'
                      else 'no summary written')}
  summary['launcher'] = {**dataclasses.asdict(outcome),
                         'stopped_by_watchdog': outcome.stopped_by_watchdog}
  record.write_summary(summary)
  return {**summary, 'run_dir': str(record.run_dir)}
