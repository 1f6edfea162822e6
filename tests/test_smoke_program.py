"""The Launchpad smoke program really runs, really moves data, and cleans up.

The program is launched with `local_mp` (one process per node) in a child
process of its own process group, so that whatever happens the test can find
and kill every process it started; a hard timeout bounds the whole test.
"""

import json
import time

import pytest

from reproductions import run_records

from conftest import kill_node_once_learning, run_module

_HARD_TIMEOUT_S = 120


def _run_smoke(tmp_path, *, max_learner_steps, max_seconds, during=None):
  result = run_module(
      'launch_programs.smoke',
      ['--num_actors', '2', '--max_learner_steps', str(max_learner_steps),
       '--max_seconds', str(max_seconds), '--launch_type', 'local_mp',
       '--runs_root', str(tmp_path), '--run_id', 'smoke-test'],
      timeout_s=_HARD_TIMEOUT_S, during=during)
  result['record'] = run_records.RunRecord(tmp_path / 'smoke-test')
  return result


@pytest.fixture
def launched_smoke(tmp_path):
  # 1,500 steps are ~5 s of learning (250-310 steps/s): time for an actor
  # that starts last to pull a second parameter version (150 steps, ~0.5 s,
  # once left actor/1 with one version seen).
  return _run_smoke(tmp_path, max_learner_steps=1500, max_seconds=40)


def test_smoke_program_moves_data_and_stops_cleanly(launched_smoke):
  output = launched_smoke['output']
  assert launched_smoke['returncode'] == 0, output[-5000:]
  assert not launched_smoke['leftovers'], 'processes left behind'
  assert launched_smoke['elapsed'] < 60, (
      f'took {launched_smoke["elapsed"]:.1f} s\n{output[-3000:]}')

  summary = launched_smoke['record'].read_summary()
  assert summary is not None, output[-5000:]
  learner = summary['nodes']['learner']
  assert 'error' not in learner, learner
  assert learner['items_inserted'] > 0
  assert learner['items_sampled'] > 0
  assert learner['learner_steps'] > 0
  assert summary['counts']['learner_steps'] > 0
  assert not summary['launcher']['stopped_by_watchdog'], json.dumps(summary)

  actors = {k: v for k, v in summary['nodes'].items() if k.startswith('actor/')}
  assert sorted(actors) == ['actor/0', 'actor/1']
  for name, actor in actors.items():
    assert 'error' not in actor, (name, actor)
    assert actor['steps'] > 0, (name, actor)
    # Parameters were pulled again after the learner moved on.
    assert actor['parameter_version'] > 0, (name, actor)
    assert actor['distinct_versions_seen'] >= 2, (name, actor)

  # The run record is complete for the analysis tools.
  record = launched_smoke['record']
  assert record.read_config()['num_actors'] == 2
  assert record.read_topology()['nodes']['actor'] == 2
  assert record.read_metrics('supervisor'), 'no progress rows recorded'
  assert '[progress' in output


def test_a_dead_learner_stops_the_program_promptly(tmp_path):
  """A critical node that dies must not leave the program running to its bound."""
  killed_at = {}
  result = _run_smoke(tmp_path, max_learner_steps=10**9, max_seconds=90,
                      during=kill_node_once_learning(
                          tmp_path / 'smoke-test', 'learner/0', killed_at,
                          timeout_s=60))
  assert 't' in killed_at, result['output'][-3000:]
  assert not result['leftovers'], 'processes left behind'
  summary = result['record'].read_summary()
  assert summary['launcher']['stop_cause'] == 'node exited: learner/0', summary
  # A failed program says so to its caller (a script, a scheduler).
  assert result['returncode'] == 1, result['output'][-3000:]
  assert 'exit 1: node exited: learner/0' in result['output']
  log = result['record'].logs_dir / 'learner' / '0.log'
  assert (f'[launcher] node learner/0 exited before the stop; its log: {log}'
          in result['output'])
  # Stopped within seconds of the kill, not at the 90 s bound.
  assert time.time() - killed_at['t'] < 30, summary
