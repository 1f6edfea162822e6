"""Each node's output in the run record; on the console, only what matters.

Under `local_mp` Launchpad runs every node as `decorate_output COLOUR TITLE
command`, a bash wrapper that pipes the node's stdout and stderr through
`sed` to prefix the node's name. `install_log_writer` puts a `sed` first on
the PATH the wrappers inherit: called by a wrapper (its one argument is the
wrapper's script), it appends the node's output to `<logs_dir>/<title>.log`
instead; called any other way it is GNU sed, unbuffered. The wrapper's
process tree is untouched, so Launchpad still stops nodes as it does with its
current terminal (SIGTERM to the node, which saves its checkpoint), and a
dead node does not stop the program unless its group is critical
(launch_programs.launching).

`Console` follows those files from the launcher and prints:
  * the supervisor's progress and stop lines;
  * every node's warnings and errors (log lines of level W/E/F, Python
    warnings, tracebacks), prefixed with the node's name; a message repeated
    by one node is shown `MAX_REPEATS` times, then only logged;
  * the last lines of a node that exits before the stop (`report_exit`).
With `verbose`, every line of every node.

Under `local_mt` the nodes are threads of the launcher and print to its own
output: there are no per-node logs.
"""

import collections
import os
import pathlib
import re
import shutil
import tempfile
import threading
from typing import Callable, Deque, Dict, List, Optional, Tuple

# The environment variable the `sed` shim reads: where the logs go. Set per
# launch, so one shim serves every program a process launches in turn.
LOGS_DIR_VARIABLE = '_RUN_RECORD_NODE_LOGS'
LOG_SUFFIX = '.log'
# How often one node's same message reaches the console.
MAX_REPEATS = 3
# Lines of a dead node's log shown on the console.
DEATH_LINES = 20

_SHIM = r'''#!/bin/sh
# Launchpad's decorate_output calls: sed 's!^!\x1b[1;COLOURm[TITLE] !;s!$!\x1b[0;0m!'
# (launch_programs/node_logs.py). Send that node's output to its log file.
if [ "$#" = 1 ] && [ -n "${LOGS_VARIABLE}" ]; then
  case "$1" in
    's!^!\x1b[1;'*'m['*'] !;s!$!\x1b[0;0m!')
      title=${1#*m\[}
      title=${title%\] !;s!\$!*}
      log="${LOGS_VARIABLE}/${title}SUFFIX"
      mkdir -p "$(dirname "$log")" && exec cat >> "$log"
      ;;
  esac
fi
exec REAL_SED -u "$@"
'''


def install_log_writer(logs_dir: Optional[os.PathLike]) -> None:
  """Sends the output of the nodes launched next to `logs_dir`/<title>.log.

  None: to this process's output, each line prefixed with the node's name,
  unbuffered (sed block-buffers when its output is not a terminal: a CI log,
  `| tee`).
  """
  os.environ[LOGS_DIR_VARIABLE] = '' if logs_dir is None else str(logs_dir)
  # Nodes write unbuffered: a node that is killed leaves its last lines.
  os.environ.setdefault('PYTHONUNBUFFERED', '1')
  if os.environ.get('_NODE_LOG_SHIM_DIR'):
    return
  real = shutil.which('sed')
  if real is None:
    raise RuntimeError('sed is not on the PATH; Launchpad\'s local_mp output '
                       'wrapper needs it')
  shim_dir = tempfile.mkdtemp(prefix='node_logs_')
  shim = os.path.join(shim_dir, 'sed')
  with open(shim, 'w') as f:
    f.write(_SHIM.replace('LOGS_VARIABLE', LOGS_DIR_VARIABLE)
            .replace('SUFFIX', LOG_SUFFIX).replace('REAL_SED', real))
  os.chmod(shim, 0o755)
  os.environ['_NODE_LOG_SHIM_DIR'] = shim_dir
  os.environ['PATH'] = shim_dir + os.pathsep + os.environ.get('PATH', '')


def log_path(logs_dir: os.PathLike, title: str) -> pathlib.Path:
  return pathlib.Path(logs_dir) / f'{title}{LOG_SUFFIX}'


# --- What reaches the console -------------------------------------------------

# A log line of level warning or above, in the formats the nodes write: absl
# and glog ('W1201 14:00:00.123456 123 file.py:12] ...'), TensorFlow's C++
# logging ('2026-12-01 14:00:00.123456: W tensorflow/...] ...'), Python's
# logging ('WARNING:root:...') and the warnings module ('file.py:3:
# DeprecationWarning: ...').
_WARNING_LINE = re.compile(
    r'^(?:[WEF]\d{4} \d\d:\d\d:\d\d'
    r'|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [WEF] '
    r'|(?:WARNING|ERROR|CRITICAL|FATAL)[:\s]'
    r'|\S+:\d+: \w*Warning: )')
# The part of a log line that changes between copies of one message.
_STAMP = re.compile(r'^(?:[WEF]\d{4} [\d:.]+\s+\d+\s+'
                    r'|\d{4}-\d\d-\d\d [\d:.]+: [WEF] )')
_TRACEBACK = 'Traceback (most recent call last):'


def is_warning(line: str) -> bool:
  return bool(_WARNING_LINE.match(line))


class _Follower:
  """One node's log: new complete lines since the last read, and the recent
  lines with whether the console showed them."""

  def __init__(self, path: pathlib.Path, title: str):
    self.path = path
    self.title = title
    self._offset = 0
    self._partial = b''
    # [line, shown on the console] of the last lines.
    self.recent: Deque[List] = collections.deque(maxlen=DEATH_LINES)
    self.traceback: Optional[List[List]] = None

  def read_lines(self) -> List[str]:
    try:
      with open(self.path, 'rb') as f:
        f.seek(self._offset)
        data = f.read()
    except FileNotFoundError:
      return []
    self._offset += len(data)
    data = self._partial + data
    end = data.rfind(b'\n') + 1
    self._partial = data[end:]
    return data[:end].decode('utf-8', 'replace').splitlines()

  def flush_partial(self) -> List[str]:
    rest, self._partial = self._partial, b''
    return [rest.decode('utf-8', 'replace')] if rest else []


class Console(threading.Thread):
  """Follows the nodes' logs under `logs_dir`; prints what matters."""

  def __init__(self, logs_dir: os.PathLike, *, verbose: bool = False,
               progress_nodes: Tuple[str, ...] = ('supervisor',),
               print_fn: Optional[Callable[[str], None]] = None,
               period_s: float = 0.5):
    super().__init__(daemon=True, name='console')
    self._dir = pathlib.Path(logs_dir)
    self._verbose = verbose
    self._progress_nodes = progress_nodes
    self._print = print_fn or (lambda line: print(line, flush=True))
    self._period_s = period_s
    self._followers: Dict[pathlib.Path, _Follower] = {}
    self._seen: Dict[Tuple[str, str], int] = collections.Counter()
    self._lock = threading.Lock()
    self._stopping = threading.Event()

  # The thread ----------------------------------------------------------------

  def run(self) -> None:
    while not self._stopping.wait(self._period_s):
      self.poll()

  def stop(self) -> None:
    """Stops following, after printing what the logs hold by now."""
    self._stopping.set()
    if self.is_alive():
      self.join(timeout=10.0)
    self.poll(final=True)

  def poll(self, final: bool = False) -> None:
    with self._lock:
      for path in sorted(self._dir.rglob(f'*{LOG_SUFFIX}')):
        if path not in self._followers:
          title = str(path.relative_to(self._dir))[:-len(LOG_SUFFIX)]
          self._followers[path] = _Follower(path, title)
      for follower in self._followers.values():
        lines = follower.read_lines()
        if final:
          lines += follower.flush_partial()
        for line in lines:
          entry = [line, False]
          follower.recent.append(entry)
          self._show(follower, entry)

  # Deaths ----------------------------------------------------------------------

  def report_exit(self, title: str) -> None:
    """A node exited before the stop: says so, with its log's last lines
    (those the console has not shown already)."""
    self.poll()
    path = log_path(self._dir, title)
    with self._lock:
      follower = self._followers.get(path)
      if follower is not None:
        # Its last line, even without a newline: nothing more will come.
        for line in follower.flush_partial():
          entry = [line, False]
          follower.recent.append(entry)
          self._show(follower, entry)
      lines = [line for line, shown in (follower.recent if follower else ())
               if not shown]
    self._print(f'[launcher] node {title} exited before the stop; its log: '
                f'{path}' + (f'; its last lines:' if lines else ''))
    for line in lines:
      self._print(f'[{title}]   {line}')

  # Filtering -------------------------------------------------------------------

  def _show(self, follower: _Follower, entry: List) -> None:
    """Prints the entry's line if it belongs on the console, and marks it."""
    title, line = follower.title, entry[0]
    if self._verbose:
      self._print_entries(title, [entry])
    elif follower.traceback is not None:
      # Inside a traceback: its indented frames, then the exception line.
      follower.traceback.append(entry)
      if not line.startswith((' ', '\t')):
        block, follower.traceback = follower.traceback, None
        self._show_once(title, line, block)
    elif line.startswith(_TRACEBACK):
      follower.traceback = [entry]
    elif (title.split('/')[0] in self._progress_nodes and
          line.startswith('[')):
      entry[1] = True
      self._print(line)
    elif is_warning(line):
      self._show_once(title, _STAMP.sub('', line), [entry])

  def _print_entries(self, title: str, entries: List[List]) -> None:
    for entry in entries:
      entry[1] = True
      self._print(f'[{title}] {entry[0]}')

  def _show_once(self, title: str, message: str, entries: List[List]) -> None:
    key = (title, message[:300])
    self._seen[key] += 1
    count = self._seen[key]
    if count <= MAX_REPEATS:
      self._print_entries(title, entries)
    if count == MAX_REPEATS:
      self._print(f'[{title}] (this message again only in '
                  f'{log_path(self._dir, title)})')
