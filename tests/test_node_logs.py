"""Node output to the run record's logs; what of it reaches the console."""

import pathlib
import subprocess

import launchpad

from launch_programs import node_logs

_DECORATE_OUTPUT = (pathlib.Path(launchpad.__file__).parent / 'launch' /
                    'run_locally' / 'decorate_output')


def test_launchpads_output_wrapper_writes_the_node_log(tmp_path):
  """The wrapper Launchpad runs every local_mp node under, unmodified."""
  node_logs.install_log_writer(tmp_path / 'logs')
  try:
    result = subprocess.run(
        [str(_DECORATE_OUTPUT), '33', 'actor/3', 'sh', '-c',
         'echo to stdout; echo to stderr >&2'],
        capture_output=True, text=True, timeout=30, check=True)
    assert result.stdout == ''  # nothing on the launcher's console
    log = tmp_path / 'logs' / 'actor' / '3.log'
    assert sorted(log.read_text().splitlines()) == ['to stderr', 'to stdout']
    # Any other use of sed on that PATH is sed.
    assert subprocess.run(['sed', 's/a/o/g'], input='banana\n', text=True,
                          capture_output=True, check=True).stdout == 'bonono\n'
  finally:
    node_logs.install_log_writer(None)
  # Without a logs directory the wrapper prints, prefixed, as Launchpad's does.
  result = subprocess.run([str(_DECORATE_OUTPUT), '33', 'learner/0', 'echo',
                           'hi'], capture_output=True, text=True, timeout=30)
  assert '[learner/0] hi' in result.stdout


def _console(tmp_path, logs, **kwargs):
  printed = []
  for title, lines in logs.items():
    path = node_logs.log_path(tmp_path, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(''.join(line + '\n' for line in lines))
  console = node_logs.Console(tmp_path, print_fn=printed.append, **kwargs)
  console.poll(final=True)
  return console, printed


def test_console_shows_progress_warnings_and_errors_only(tmp_path):
  _, printed = _console(tmp_path, {
      'supervisor/0': ['[progress 0:00:10] frames 1,000 | 5% of the wall time '
                       'bound', 'some chatter'],
      'actor/0': [
          'Binding: 127.0.0.1:4242',
          'A.L.E: Arcade Learning Environment (version 0.7.5)',
          'W1201 10:00:00.123456 140 actor.py:12] replay slow, retrying',
          '2026-12-01 10:00:00.123456: W tensorflow/core/x.cc:1] tf warning',
          '2026-12-01 10:00:00.123456: I tensorflow/core/x.cc:1] tf info',
          '/x/reverb/client.py:54: DeprecationWarning: distutils is old',
          '  distutils.version.LooseVersion(v)',
          'WARNING:absl:python warning',
          'Traceback (most recent call last):',
          '  File "x.py", line 1, in <module>',
          '    raise ValueError("bad")',
          'ValueError: bad',
          'plain line after'],
  })
  # Node by node (in the order of their log files' names).
  assert printed == [
      '[actor/0] W1201 10:00:00.123456 140 actor.py:12] replay slow, retrying',
      '[actor/0] 2026-12-01 10:00:00.123456: W tensorflow/core/x.cc:1] tf '
      'warning',
      '[actor/0] /x/reverb/client.py:54: DeprecationWarning: distutils is old',
      '[actor/0] WARNING:absl:python warning',
      '[actor/0] Traceback (most recent call last):',
      '[actor/0]   File "x.py", line 1, in <module>',
      '[actor/0]     raise ValueError("bad")',
      '[actor/0] ValueError: bad',
      '[progress 0:00:10] frames 1,000 | 5% of the wall time bound']


def test_a_repeated_message_reaches_the_console_three_times(tmp_path):
  lines = [f'W1201 10:00:{i:02d}.000000 140 a.py:1] replay slow'
           for i in range(10)]
  _, printed = _console(tmp_path, {'actor/1': lines})
  assert printed == [f'[actor/1] {line}' for line in lines[:3]] + [
      f'[actor/1] (this message again only in '
      f'{node_logs.log_path(tmp_path, "actor/1")})']


def test_verbose_shows_every_line_with_its_node(tmp_path):
  _, printed = _console(tmp_path, {'learner/0': ['Binding: x', 'step 1']},
                        verbose=True)
  assert printed == ['[learner/0] Binding: x', '[learner/0] step 1']


def test_a_dead_node_shows_its_last_lines_not_shown_yet(tmp_path):
  lines = [f'line {i}' for i in range(30)] + [
      'Traceback (most recent call last):', '  File "l.py", line 9, in run',
      'RuntimeError: boom']
  console, printed = _console(tmp_path, {'learner/0': lines})
  path = node_logs.log_path(tmp_path, 'learner/0')
  with open(path, 'a') as f:
    f.write('last words, unterminated')
  printed.clear()
  console.report_exit('learner/0')
  # The traceback was on the console already; the death report adds the
  # lines before it and the unterminated last one, and names the log.
  assert printed[0] == (f'[launcher] node learner/0 exited before the stop; '
                        f'its log: {path}; its last lines:')
  tail = [line.split('   ', 1)[1] for line in printed[1:]]
  # The log's last DEATH_LINES (20) lines, less the three shown.
  assert tail == [f'line {i}' for i in range(14, 30)] + [
      'last words, unterminated']
