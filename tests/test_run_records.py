"""Run records: layout, round trips, and no half-written file after a kill."""

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from reproductions import run_records


def test_layout_and_round_trip(tmp_path):
  record = run_records.RunRecord.create(
      'demo', {'batch_size': 32, 'games': ('pong',)},
      {'launch_type': 'local_mp', 'nodes': {'actor': 4, 'learner': 1}},
      root=tmp_path, run_id='demo-1')
  assert record.run_dir == tmp_path / 'demo-1'
  for name in ('config.json', 'topology.json', 'evaluation_episodes.csv'):
    assert (record.run_dir / name).exists(), name
  assert record.checkpoint_dir.is_dir()
  assert record.read_config() == {'program': 'demo', 'run_id': 'demo-1',
                                  'batch_size': 32, 'games': ['pong']}
  assert record.read_topology()['nodes'] == {'actor': 4, 'learner': 1}

  record.append_evaluation_episode(game='pong', score=-20.0, frames=3412,
                                   wall_time_s=12.5, training_frames=4000,
                                   learner_steps=7, node='evaluator/0')
  record.append_evaluation_episode(game='pong', score=-19.0, frames=3000,
                                   wall_time_s=20.0)
  episodes = record.read_evaluation_episodes()
  assert [e['score'] for e in episodes] == [-20.0, -19.0]
  assert episodes[0]['frames'] == 3412 and episodes[0]['node'] == 'evaluator/0'
  assert tuple(episodes[0])[:len(run_records.EVALUATION_COLUMNS)] == \
      run_records.EVALUATION_COLUMNS

  logger = record.metrics_logger('actor/0', tensorboard=False)
  logger.write({'steps': 10})
  logger.write({'steps': 20, 'episode_return': -21.0})  # a new column appears
  rows = record.read_metrics('actor/0')
  assert [r['steps'] for r in rows] == [10, 20]
  assert rows[0]['episode_return'] is None and rows[1]['episode_return'] == -21.0
  assert record.metric_nodes() == ['actor_0']

  record.write_summary({'ok': True})
  assert record.read_summary() == {'ok': True}
  assert [r.run_id for r in run_records.list_runs(tmp_path)] == ['demo-1']


def test_window_means_average_every_write_of_the_period(tmp_path,
                                                        monkeypatch):
  clock = [1000.0]
  monkeypatch.setattr(run_records.time, 'time', lambda: clock[0])
  record = run_records.RunRecord.create('demo', {}, {}, root=tmp_path,
                                        run_id='w')
  logger = record.metrics_logger('learner', tensorboard=False,
                                 time_delta_s=5.0,
                                 window_means=('clipped',))
  # Rows at t = 0 and t = 5; the writes at 1-4 are dropped but counted.
  for t, step, clipped in ((0, 1, 1.0), (1, 2, 0.0), (2, 3, 1.0), (3, 4, 1.0),
                           (4, 5, 0.0), (5, 6, 0.0)):
    clock[0] = 1000.0 + t
    logger.write({'step': step, 'clipped': clipped})
  rows = record.read_metrics('learner')
  assert [r['step'] for r in rows] == [1, 6]
  assert [r['clipped'] for r in rows] == [1.0, 2.0 / 5.0]


def test_refuses_to_overwrite_a_run(tmp_path):
  run_records.RunRecord.create('demo', {}, {}, root=tmp_path, run_id='x')
  with pytest.raises(FileExistsError, match='exists'):
    run_records.RunRecord.create('demo', {}, {}, root=tmp_path, run_id='x')


def test_torn_trailing_line_is_not_a_record(tmp_path):
  path = tmp_path / 'm.csv'
  path.write_text('a,b\n1,2\n3,')  # a write cut short by a crash
  assert run_records.read_csv_rows(path) == [{'a': '1', 'b': '2'}]


def test_sigkill_mid_write_leaves_only_whole_files(tmp_path):
  """Kills a writer at arbitrary moments; every file must still parse whole."""
  writer = textwrap.dedent(f'''
      import sys
      sys.path.insert(0, {os.getcwd()!r})
      from reproductions import run_records
      record = run_records.RunRecord({str(tmp_path / 'run')!r})
      logger = record.metrics_logger('learner', tensorboard=False)
      i = 0
      while True:
        i += 1
        row = {{'step': i, 'loss': 0.5 / i, 'note': 'x' * 200}}
        if i % 50 == 0:
          row['extra_' + str(i)] = i  # forces an atomic header rewrite
        logger.write(row)
        record.append_evaluation_episode(game='pong', score=float(i), frames=i,
                                         wall_time_s=float(i))
        record.write_summary({{'i': i, 'payload': list(range(200))}})
        if i == 1:
          print('wrote', flush=True)  # every file has been written once
      ''')
  run_records.RunRecord.create('kill', {}, {}, root=tmp_path, run_id='run')
  record = run_records.RunRecord(tmp_path / 'run')
  for delay in (0.3, 0.45, 0.6, 0.8):
    process = subprocess.Popen([sys.executable, '-c', writer],
                               stdout=subprocess.PIPE)
    # The kill comes `delay` after the writer's first complete round, not
    # after its start: how long Python takes to start depends on the load.
    ready, _, _ = select.select([process.stdout], [], [], 120)
    started = bool(ready) and process.stdout.readline() == b'wrote\n'
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    process.stdout.close()
    assert started, 'the writer did not complete a first round'
    rows = record.read_metrics('learner')
    assert rows, 'the writer made no progress before the kill'
    steps = [r['step'] for r in rows]
    assert all(isinstance(s, int) for s in steps)
    for row in rows:  # every row is whole: its columns all parse
      assert abs(row['loss'] - 0.5 / row['step']) < 1e-12
      assert row['note'] == 'x' * 200
    episodes = record.read_evaluation_episodes()
    assert all(e['score'] == float(e['frames']) for e in episodes)
    summary = json.loads((record.run_dir / 'summary.json').read_text())
    assert summary['payload'] == list(range(200))
  # No temporary files are left next to the targets by the atomic writes that
  # completed; an interrupted one may leave a dot-file, never a torn target.
  visible = sorted(p.name for p in record.run_dir.iterdir()
                   if not p.name.startswith('.'))
  assert 'summary.json' in visible


def test_following_the_evaluation_file_reads_each_row_once(tmp_path):
  record = run_records.RunRecord.create('agent', {}, {'nodes': {}},
                                        root=tmp_path, run_id='r')
  tail = record.follow_evaluation_episodes()
  assert tail.poll() == []
  record.append_evaluation_episode(game='pong', score=-21, frames=10,
                                   wall_time_s=1.0)
  record.append_evaluation_episode(game='pong', score=-20, frames=10,
                                   wall_time_s=2.0)
  assert [r['score'] for r in tail.poll()] == [-21, -20]
  assert tail.poll() == []
  # A torn last line is not a row until its newline arrives.
  path = record.run_dir / run_records.EVALUATION_FILE
  with open(path, 'ab') as f:
    f.write(b'pong,-19.0,10,3.0')
  assert tail.poll() == []
  with open(path, 'ab') as f:
    f.write(b',0,0,\n')
  assert [r['score'] for r in tail.poll()] == [-19.0]
  # A new column rewrites the file whole: it is read again from its start.
  record.append_evaluation_episode(game='pong', score=-18, frames=10,
                                   wall_time_s=4.0, extra_column=1)
  assert [r['score'] for r in tail.poll()] == [-21, -20, -19.0, -18]
