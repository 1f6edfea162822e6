"""Shared test helpers: run a launch program in its own process group, bounded."""

import os
import signal
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

import psutil
import pytest


def _group_alive(pgid: int) -> bool:
  try:
    os.killpg(pgid, 0)
    return True
  except ProcessLookupError:
    return False


def node_process(root_pid: int, title: str) -> Optional[psutil.Process]:
  """The process running node `title`, under Launchpad's output decorator."""
  for process in psutil.Process(root_pid).children(recursive=True):
    try:
      command = process.cmdline()
    except psutil.Error:
      continue
    if any(part.endswith('decorate_output') for part in command) and title in command:
      # The wrapper pipes the node through sed: pick the node's own process.
      for child in process.children(recursive=True):
        try:
          if any(part.endswith('process_entry.py') for part in child.cmdline()):
            return child
        except psutil.Error:
          continue
  return None


def run_module(module: str, args: Sequence[str], timeout_s: float,
               during: Optional[Callable[[subprocess.Popen], None]] = None):
  """Runs `python -m module args` in a new process group; kills the group after.

  Returns returncode, output, elapsed seconds, and whether any process of the
  group outlived the program (which is then SIGKILLed). Never hangs: past
  `timeout_s` the whole group is killed and the test fails.
  """
  start = time.time()
  process = subprocess.Popen([sys.executable, '-m', module, *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True, text=True)
  pgid = process.pid
  try:
    if during is not None:
      during(process)
    output, _ = process.communicate(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    os.killpg(pgid, signal.SIGKILL)
    output, _ = process.communicate()
    pytest.fail(f'{module} exceeded {timeout_s} s:\n{output[-5000:]}')
  elapsed = time.time() - start
  # The group is waited for, not slept on: exiting TF processes on a loaded
  # machine can take seconds.
  deadline = time.time() + 30
  while _group_alive(pgid) and time.time() < deadline:
    time.sleep(0.1)
  leftovers = _group_alive(pgid)
  if leftovers:
    os.killpg(pgid, signal.SIGKILL)
  return dict(returncode=process.returncode, output=output, elapsed=elapsed,
              leftovers=leftovers)


def once_learning(run_dir, act: Callable[[subprocess.Popen], bool],
                  done: dict, min_learner_steps: int = 1,
                  timeout_s: float = 120.0):
  """A `during` callback for run_module: calls `act` once the program learns.

  It watches the run record's supervisor rows and, from the first row with at
  least `min_learner_steps`, calls `act(process)` until it returns True, so
  that the action lands well before the program's learner-step bound.
  `done['learner_steps']` and `done['t']` record when it landed.
  """
  from reproductions import run_records  # pylint: disable=g-import-not-at-top

  def during(process):
    record = run_records.RunRecord(run_dir)
    deadline = time.time() + timeout_s
    while time.time() < deadline and process.poll() is None:
      rows = record.read_metrics('supervisor') if record.exists() else []
      steps = (rows[-1].get('learner_steps') or 0) if rows else 0
      if steps >= min_learner_steps and act(process):
        done['learner_steps'] = steps
        done['t'] = time.time()
        return
      time.sleep(0.5)

  return during


def kill_node_once_learning(run_dir, title: str, killed: dict,
                            timeout_s: float = 120.0):
  """SIGKILLs node `title` once learning (see `once_learning`)."""

  def kill(process) -> bool:
    node = node_process(process.pid, title)
    if node is None:
      return False
    node.kill()
    return True

  return once_learning(run_dir, kill, killed, timeout_s=timeout_s)
