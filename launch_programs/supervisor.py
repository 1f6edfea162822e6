"""The supervisor node: progress while a program runs, and its stop at a bound.

Every program gets one. Why a node and not the launcher: under Launchpad the
launcher holds no handles it can call (addresses are resolved inside nodes), and
on a cluster the launcher is not even on the same machine. The supervisor polls
the counter, prints one progress line per period (frames, episodes, learner
steps, throughput, ETA), and when the first bound is reached (learner steps,
actor frames or wall time) it collects the final figures from the nodes that
offer them, writes `summary.json` to the run record, and calls `lp.stop()`.

It imports no TensorFlow: it stays a light process under `local_mp`.
"""

import concurrent.futures
import functools
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import launchpad as lp

from launch_programs import launching
from reproductions import run_records

# Courier calls to a busy or dead node must not hang the supervisor.
_CALL_TIMEOUT_S = 10.0


def _call(handle: Any, method: str, timeout_s: float = _CALL_TIMEOUT_S) -> Any:
  try:
    return getattr(handle.futures, method)().result(timeout=timeout_s)
  except Exception as e:  # pylint: disable=broad-except
    return {'error': f'{type(e).__name__}: {e}'}


def format_duration(seconds: float) -> str:
  seconds = max(0, int(seconds))
  return f'{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}'


class Supervisor:
  """Stops the program at the first bound reached; reports what flowed."""

  def __init__(self, counter: Any, *, run_dir: str,
               max_learner_steps: Optional[int] = None,
               max_actor_frames: Optional[int] = None,
               max_seconds: Optional[float] = None,
               frames_per_actor_step: int = 1,
               report_period_s: float = 5.0,
               final_reports: Optional[Mapping[str, Any]] = None,
               final_report_method: str = 'report',
               print_fn: Optional[Callable[[str], None]] = None,
               cpus: Optional[Sequence[int]] = None):
    if not (max_learner_steps or max_actor_frames or max_seconds):
      raise ValueError('a supervisor needs at least one bound: '
                       'max_learner_steps, max_actor_frames or max_seconds')
    launching.pin_process_to_cpus(cpus)
    self._counter = counter
    self._record = run_records.RunRecord(run_dir)
    self._max_learner_steps = max_learner_steps
    self._max_actor_frames = max_actor_frames
    self._max_seconds = max_seconds
    self._frames_per_actor_step = frames_per_actor_step
    self._report_period_s = report_period_s
    self._final_reports = dict(final_reports or {})
    self._final_report_method = final_report_method
    # Node stdout is a pipe, block-buffered: flush so progress shows live.
    self._print = print_fn or functools.partial(print, flush=True)
    self._logger = self._record.metrics_logger('supervisor', tensorboard=False)
    self._evaluations = self._record.follow_evaluation_episodes()
    # Per game: (the last evaluation score, evaluation episodes so far).
    self._last_scores: Dict[str, Tuple[float, int]] = {}

  def _progress(self, counts: Mapping[str, float], elapsed: float,
                rates: Mapping[str, float]) -> Dict[str, Any]:
    frames = counts.get('actor_steps', 0) * self._frames_per_actor_step
    fractions = {}
    if self._max_learner_steps:
      fractions['learner steps'] = (counts.get('learner_steps', 0) /
                                    self._max_learner_steps)
    if self._max_actor_frames:
      fractions['frames'] = frames / self._max_actor_frames
    if self._max_seconds:
      fractions['wall time'] = elapsed / self._max_seconds
    # The bound nearest to ending the run sets the ETA.
    bound = max(fractions, key=fractions.get)
    done = min(1.0, fractions[bound])
    eta = elapsed * (1 - done) / done if done > 0 else float('nan')
    return {'actor_frames': frames,
            'actor_episodes': counts.get('actor_episodes', 0),
            'learner_steps': counts.get('learner_steps', 0),
            'actor_frames_per_s': rates.get('actor_steps', 0.0)
                                  * self._frames_per_actor_step,
            'learner_steps_per_s': rates.get('learner_steps', 0.0),
            'fraction_done': done, 'eta_s': eta, 'eta_bound': bound}

  def _evaluation_text(self) -> str:
    """' | eval pong -20.0 (3 episodes)': the evaluators' latest scores."""
    for row in self._evaluations.poll():
      _, episodes = self._last_scores.get(row['game'], (0.0, 0))
      self._last_scores[row['game']] = (row['score'], episodes + 1)
    if not self._last_scores:
      return ''
    if len(self._last_scores) > 3:
      return (f' | eval {len(self._last_scores)} games, '
              f'{sum(n for _, n in self._last_scores.values()):,} episodes')
    return ''.join(f' | eval {game} {score:.1f} ({n:,} episode'
                   f'{"" if n == 1 else "s"})'
                   for game, (score, n) in sorted(self._last_scores.items()))

  def _bound_reached(self, counts: Mapping[str, float], elapsed: float) -> Optional[str]:
    if self._max_learner_steps and counts.get('learner_steps', 0) >= self._max_learner_steps:
      return f'learner steps reached {self._max_learner_steps}'
    frames = counts.get('actor_steps', 0) * self._frames_per_actor_step
    if self._max_actor_frames and frames >= self._max_actor_frames:
      return f'actor frames reached {self._max_actor_frames}'
    if self._max_seconds and elapsed >= self._max_seconds:
      return f'wall time reached {self._max_seconds:.0f} s'
    return None

  def run(self) -> None:
    start = time.time()
    last_counts: Dict[str, float] = {}
    last_time = start
    reason = None
    progress: Dict[str, float] = {}
    while not lp.wait_for_stop(0):
      time.sleep(min(self._report_period_s, 1.0))
      now = time.time()
      counts = _call(self._counter, 'get_counts')
      if not isinstance(counts, dict) or 'error' in counts:
        counts = last_counts
      if now - last_time >= self._report_period_s or not progress:
        dt = max(now - last_time, 1e-9)
        rates = {k: (counts.get(k, 0) - last_counts.get(k, 0)) / dt
                 for k in ('actor_steps', 'learner_steps')}
        progress = self._progress(counts, now - start, rates)
        self._logger.write(progress)
        self._print(
            f'[progress {format_duration(now - start)}] '
            f'frames {progress["actor_frames"]:,.0f} '
            f'({progress["actor_frames_per_s"]:,.0f}/s) | '
            f'episodes {progress["actor_episodes"]:,.0f} | '
            f'learner steps {progress["learner_steps"]:,.0f} '
            f'({progress["learner_steps_per_s"]:.1f}/s)'
            + self._evaluation_text()
            + f' | {100 * progress["fraction_done"]:.0f}% of the '
            f'{progress["eta_bound"]} bound | ETA '
            + (format_duration(progress['eta_s'])
               if progress['eta_s'] == progress['eta_s'] else '?'))
        last_counts, last_time = dict(counts), now
      reason = self._bound_reached(counts, now - start)
      if reason:
        break
    reason = reason or 'stop requested'
    self._finish(reason, time.time() - start, last_counts)

  def _finish(self, reason: str, elapsed: float,
              counts: Mapping[str, float]) -> None:
    counts = _call(self._counter, 'get_counts')
    with concurrent.futures.ThreadPoolExecutor(max(1, len(self._final_reports))) as pool:
      futures = {name: pool.submit(_call, handle, self._final_report_method)
                 for name, handle in self._final_reports.items()}
      reports = {name: f.result() for name, f in futures.items()}
    summary = {'stop_reason': reason, 'wall_s': round(elapsed, 2),
               'counts': counts, 'nodes': reports}
    self._record.write_summary(summary)
    self._print(f'[supervisor] stopping: {reason} after {elapsed:.1f} s')
    lp.stop()
