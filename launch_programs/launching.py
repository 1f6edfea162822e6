"""Launches a Launchpad program with a hard bound and leaves no process behind.

Why this exists: `lp.launch` returns as soon as the workers are spawned, a
program ends only when some node calls `lp.stop()`, and a node stuck in a
blocking call ignores the stop until Launchpad's SIGKILL. Tests and the main job
must never hang, so every launch here has (1) a supervisor node that stops the
program at its bound (`launch_programs.supervisor`), and (2) a watchdog in the
launcher that stops it anyway `grace_s` after the bound, then kills whatever is
left of the launcher's process tree. The process tree is found with psutil, not
by name, so unrelated processes are never touched.
"""

import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any, Mapping, Optional

from absl import flags
import launchpad as lp
import psutil

LAUNCH_TYPES = ('local_mp', 'local_mt')


def ensure_absl_flags_parsed() -> None:
  """Launchpad reads absl flags; our entry points use argparse.

  Parsing just the program name gives Launchpad its defaults. The termination
  notice (seconds between SIGTERM and SIGKILL for a node that does not stop) is
  shortened from 10 s to 5 s: our nodes stop within a second when they can.
  """
  if not flags.FLAGS.is_parsed():
    flags.FLAGS([sys.argv[0]], known_only=True)
    flags.FLAGS.lp_termination_notice_secs = 5


@dataclasses.dataclass
class LaunchOutcome:
  launch_s: float            # lp.launch() call to its return
  wall_s: float              # lp.launch() call to the end of the program
  stopped_by_watchdog: bool  # True: the supervisor did not stop it in time
  killed_leftovers: int      # processes still alive after the stop, SIGKILLed


def launch_and_wait(program: lp.Program, *, launch_type: str,
                    max_seconds: float, grace_s: float = 30.0,
                    local_resources: Optional[Mapping[str, Any]] = None
                    ) -> LaunchOutcome:
  """Runs `program` to its end; never longer than `max_seconds + grace_s`."""
  if launch_type not in LAUNCH_TYPES:
    raise ValueError(
        f'unknown launch type {launch_type!r}; valid choices: {LAUNCH_TYPES}')
  ensure_absl_flags_parsed()
  start = time.time()
  manager = lp.launch(program, launch_type=launch_type,
                      terminal='current_terminal',
                      local_resources=dict(local_resources or {}),
                      serialize_py_nodes=False)
  launched = time.time()

  fired = threading.Event()
  done = threading.Event()

  def watchdog():
    if not done.wait(max_seconds + grace_s):
      fired.set()
      print(f'[launcher] program still running {max_seconds + grace_s:.0f} s '
            'after launch: stopping it', flush=True)
      # The worker manager handles SIGTERM in the main thread: it asks every
      # node to stop, then SIGKILLs those that do not within the notice.
      os.kill(os.getpid(), signal.SIGTERM)

  threading.Thread(target=watchdog, daemon=True, name='watchdog').start()
  try:
    # Under local_mt the nodes are threads of this process: waiting for them
    # to return also disarms the manager's SIGKILL-the-process alarm.
    manager.wait(raise_error=False)
  finally:
    done.set()
    killed = kill_descendants()
  return LaunchOutcome(launch_s=launched - start, wall_s=time.time() - start,
                       stopped_by_watchdog=fired.is_set(),
                       killed_leftovers=killed)


def kill_descendants(timeout_s: float = 5.0) -> int:
  """SIGTERMs, then SIGKILLs, every descendant of this process; returns count."""
  children = psutil.Process().children(recursive=True)
  for child in children:
    try:
      child.terminate()
    except psutil.NoSuchProcess:
      pass
  _, alive = psutil.wait_procs(children, timeout=timeout_s)
  for child in alive:
    try:
      child.kill()
    except psutil.NoSuchProcess:
      pass
  psutil.wait_procs(alive, timeout=timeout_s)
  return len(alive)
