"""How a run is recorded: the one contract between programs and analysis tools.

Every launch program writes a run record, and `reproductions.compare` and
`reproductions.figures` read nothing else. Layout of `results/runs/<run-id>/`:

  config.json               the resolved config (every value the run used)
  topology.json             node kinds and counts, launch type, placement
  metrics/<node>.csv        per-node metrics, one row per logger write
  tensorboard/<node>/       the same metrics as TensorBoard summaries
  evaluation_episodes.csv   one row per evaluation episode (EVALUATION_COLUMNS)
  summary.json              what the program reports when it ends
  checkpoints/              learner/counter checkpoints (resume from here)
  logs/<node>.log           each node's whole output (local_mp), appended to
                            on resume

Why the write discipline matters: runs are long and get killed (preemption,
Ctrl-C, the stopper's SIGKILL after a grace period). A kill must never leave a
half-written file that breaks a later comparison. JSON files are written to a
temporary file, fsynced and renamed over the target (rename is atomic on POSIX).
CSV files are append-only: each row is a single `write(2)` of a whole line on an
O_APPEND descriptor, which a signal cannot split; readers also drop a final line
that lacks its newline, so even a torn write by a crashing filesystem is never
read as a record. When a logger meets a column it has not seen, the file is
rewritten atomically with the wider header.
"""

import csv
import datetime
import io
import json
import os
import pathlib
import secrets
import tempfile
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

CONFIG_FILE = 'config.json'
TOPOLOGY_FILE = 'topology.json'
SUMMARY_FILE = 'summary.json'
EVALUATION_FILE = 'evaluation_episodes.csv'
METRICS_DIR = 'metrics'
TENSORBOARD_DIR = 'tensorboard'
CHECKPOINT_DIR = 'checkpoints'
LOGS_DIR = 'logs'

# `frames` is the episode's own length in emulator frames; `training_frames` is
# how many frames all actors had generated when the episode started (the x-axis
# of the papers' learning curves); `wall_time_s` counts from the run's start.
EVALUATION_COLUMNS = ('game', 'score', 'frames', 'wall_time_s',
                      'training_frames', 'learner_steps', 'node')
# The papers' final evaluation of the last checkpoint (agents/final_evaluation).
FINAL_EVALUATION_FILE = 'final_evaluation.csv'
FINAL_EVALUATION_COLUMNS = ('game', 'episode', 'score', 'frames',
                            'learner_steps', 'training_frames', 'checkpoint')

DEFAULT_ROOT = pathlib.Path(__file__).resolve().parents[1] / 'results' / 'runs'


def _fsync_dir(path: pathlib.Path) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def atomic_write_bytes(path: os.PathLike, data: bytes) -> None:
  """Replaces `path` with `data` so that readers see the old or the new file."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', dir=path.parent)
  try:
    # mkstemp creates 0600; records are meant to be read by others too.
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  _fsync_dir(path.parent)


def atomic_write_json(path: os.PathLike, obj: Any) -> None:
  atomic_write_bytes(
      path, (json.dumps(obj, indent=2, sort_keys=True, default=_json_default)
             + '\n').encode())


def _json_default(value: Any) -> Any:
  # Configs hold numpy scalars, tuples and dataclasses; record what they mean.
  if hasattr(value, 'item'):
    return value.item()
  if hasattr(value, '__dataclass_fields__'):
    import dataclasses  # pylint: disable=g-import-not-at-top
    return dataclasses.asdict(value)
  if isinstance(value, (set, frozenset)):
    return sorted(value)
  if isinstance(value, pathlib.Path):
    return str(value)
  raise TypeError(f'cannot record {type(value).__name__} in JSON: {value!r}')


def read_json(path: os.PathLike) -> Any:
  with open(path) as f:
    return json.load(f)


def _csv_line(values: Sequence[Any]) -> bytes:
  buffer = io.StringIO()
  csv.writer(buffer, lineterminator='\n').writerow(
      ['' if v is None else v for v in values])
  return buffer.getvalue().encode()


def read_csv_rows(path: os.PathLike) -> List[Dict[str, str]]:
  """Reads complete rows only: a last line without newline is not a record."""
  path = pathlib.Path(path)
  if not path.exists():
    return []
  text = path.read_text()
  if text and not text.endswith('\n'):
    text = text[:text.rfind('\n') + 1]
  return list(csv.DictReader(io.StringIO(text)))


class CsvTail:
  """The rows a growing CSV gained since the last poll, for live progress.

  It reads only the new bytes. A file rewritten whole (AppendOnlyCsv widening
  its header: a new inode) is read again from its start.
  """

  def __init__(self, path: os.PathLike):
    self._path = pathlib.Path(path)
    self._inode = None
    self._offset = 0
    self._header: Optional[List[str]] = None

  def poll(self) -> List[Dict[str, Any]]:
    try:
      stat = os.stat(self._path)
      if stat.st_ino != self._inode or stat.st_size < self._offset:
        self._inode, self._offset, self._header = stat.st_ino, 0, None
      with open(self._path, 'rb') as f:
        f.seek(self._offset)
        data = f.read()
    except FileNotFoundError:
      return []
    data = data[:data.rfind(b'\n') + 1]  # complete rows only
    self._offset += len(data)
    rows = list(csv.reader(io.StringIO(data.decode())))
    if self._header is None and rows:
      self._header = rows.pop(0)
    return [_typed(dict(zip(self._header, row))) for row in rows]


class AppendOnlyCsv:
  """A CSV file that grows by whole rows; safe against kills at any instant.

  Thread-safe within a process. One writer process per file (each node writes
  its own metrics file; the evaluation file has one writer per node, so the
  evaluator nodes each append through O_APPEND, whose single-write rows do not
  interleave).
  """

  def __init__(self, path: os.PathLike, columns: Sequence[str] = ()):
    self._path = pathlib.Path(path)
    self._lock = threading.Lock()
    self._columns: List[str] = []
    if self._path.exists():
      with open(self._path) as f:
        header = f.readline()
      if header.endswith('\n'):
        self._columns = next(csv.reader([header]))
    if not self._columns and columns:
      self._rewrite(list(columns), [])

  @property
  def path(self) -> pathlib.Path:
    return self._path

  @property
  def columns(self) -> List[str]:
    return list(self._columns)

  def _rewrite(self, columns: List[str], rows: List[Mapping[str, Any]]) -> None:
    data = _csv_line(columns) + b''.join(
        _csv_line([row.get(c) for c in columns]) for row in rows)
    atomic_write_bytes(self._path, data)
    self._columns = columns

  def append(self, row: Mapping[str, Any]) -> None:
    with self._lock:
      new_columns = [k for k in row if k not in self._columns]
      if new_columns:
        self._rewrite(self._columns + new_columns, read_csv_rows(self._path))
      line = _csv_line([_format_cell(row.get(c)) for c in self._columns])
      fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
      try:
        os.write(fd, line)
      finally:
        os.close(fd)


def _format_cell(value: Any) -> Any:
  if hasattr(value, 'item') and getattr(value, 'ndim', 0) == 0:
    value = value.item()
  if isinstance(value, float):
    return repr(value)
  return value


class MetricsLogger:
  """Acme-style logger (`write(values)`) for one node: CSV, plus TensorBoard.

  It implements `acme.utils.loggers.Logger`'s interface without subclassing it,
  so light nodes (counter, stopper) need not import TensorFlow; TensorBoard
  summaries are written only when TF is already loaded in the process.
  """

  def __init__(self, run_dir: os.PathLike, node: str,
               tensorboard: bool = True, time_delta_s: float = 0.0,
               step_key: Optional[str] = None,
               window_means: Sequence[str] = ()):
    """A logger for one node.

    Args:
      run_dir: the run record.
      node: the node's name ('learner', 'actor/3').
      tensorboard: also write TensorBoard scalars.
      time_delta_s: write at most one row per this many seconds; the writes
        in between are dropped, except for `window_means`.
      step_key: the key whose value is TensorBoard's step.
      window_means: keys written as their mean over every write since the
        last row, so that a per-update diagnostic (a 0/1 "gradient clipped")
        becomes the fraction of the updates in the period, not one sample.
    """
    self._node = node
    self._csv = AppendOnlyCsv(
        pathlib.Path(run_dir) / METRICS_DIR / f'{_safe(node)}.csv')
    self._tensorboard_dir = pathlib.Path(run_dir) / TENSORBOARD_DIR / _safe(node)
    self._tensorboard = tensorboard
    self._summary_writer = None
    self._time_delta_s = time_delta_s
    self._last_write = -float('inf')
    self._step_key = step_key
    self._writes = 0
    self._start = time.time()
    self._window_keys = tuple(window_means)
    self._window_sums: Dict[str, float] = {}
    self._window_counts: Dict[str, int] = {}

  def write(self, values: Mapping[str, Any]) -> None:
    for key in self._window_keys:
      if values.get(key) is not None:
        self._window_sums[key] = self._window_sums.get(key, 0.0) + float(
            values[key])
        self._window_counts[key] = self._window_counts.get(key, 0) + 1
    now = time.time()
    if now - self._last_write < self._time_delta_s:
      return
    self._last_write = now
    values = dict(values)
    for key, total in self._window_sums.items():
      values[key] = total / self._window_counts[key]
    self._window_sums.clear()
    self._window_counts.clear()
    row = {'wall_time_s': round(now - self._start, 3),
           'unix_time': round(now, 3), **values}
    self._csv.append(row)
    self._write_tensorboard(values)
    self._writes += 1

  def _write_tensorboard(self, values: Mapping[str, Any]) -> None:
    if not self._tensorboard:
      return
    import sys  # pylint: disable=g-import-not-at-top
    if 'tensorflow' not in sys.modules:
      return
    tf = sys.modules['tensorflow']
    if self._summary_writer is None:
      self._summary_writer = tf.summary.create_file_writer(
          str(self._tensorboard_dir))
    step = int(values.get(self._step_key, self._writes)) if self._step_key else self._writes
    with self._summary_writer.as_default():
      for key, value in values.items():
        if isinstance(value, (int, float)) or (
            hasattr(value, 'dtype') and getattr(value, 'ndim', 1) == 0):
          tf.summary.scalar(f'{self._node}/{key}', float(value), step=step)
    self._summary_writer.flush()

  def close(self) -> None:
    if self._summary_writer is not None:
      self._summary_writer.close()


def _safe(node: str) -> str:
  """Node names like 'actor/3' become file names like 'actor_3'."""
  return node.replace('/', '_')


class RunRecord:
  """One run's directory: the writers programs use and the readers tools use."""

  def __init__(self, run_dir: os.PathLike):
    self.run_dir = pathlib.Path(run_dir)

  # Creation ----------------------------------------------------------------

  @classmethod
  def create(cls, program: str, config: Mapping[str, Any],
             topology: Mapping[str, Any], root: Optional[os.PathLike] = None,
             run_id: Optional[str] = None) -> 'RunRecord':
    """Starts a new run record; refuses to overwrite an existing run."""
    root = pathlib.Path(root) if root is not None else DEFAULT_ROOT
    if run_id is None:
      stamp = datetime.datetime.now().strftime('%Y%m%d-%H%M%S')
      run_id = f'{program}-{stamp}-{secrets.token_hex(2)}'
    record = cls(root / run_id)
    if (record.run_dir / CONFIG_FILE).exists():
      raise FileExistsError(
          f'run record {record.run_dir} exists; resume it with RunRecord(path) '
          'or choose another run id')
    record.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(record.run_dir / CONFIG_FILE,
                      {'program': program, 'run_id': run_id, **config})
    atomic_write_json(record.run_dir / TOPOLOGY_FILE, dict(topology))
    AppendOnlyCsv(record.run_dir / EVALUATION_FILE, EVALUATION_COLUMNS)
    return record

  @classmethod
  def resume(cls, run_id: str, root: Optional[os.PathLike] = None) -> 'RunRecord':
    """Reopens an existing run to continue it (checkpoints, appended rows)."""
    root = pathlib.Path(root) if root is not None else DEFAULT_ROOT
    record = cls(root / run_id)
    if not record.exists():
      existing = [r.run_id for r in list_runs(root)]
      raise FileNotFoundError(
          f'no run record {record.run_dir} to resume; runs under {root}: '
          f'{", ".join(existing) or "none"}')
    return record

  # Paths ---------------------------------------------------------------------

  @property
  def run_id(self) -> str:
    return self.run_dir.name

  @property
  def checkpoint_dir(self) -> pathlib.Path:
    return self.run_dir / CHECKPOINT_DIR

  @property
  def logs_dir(self) -> pathlib.Path:
    return self.run_dir / LOGS_DIR

  def exists(self) -> bool:
    return (self.run_dir / CONFIG_FILE).exists()

  # Writers (called from nodes) -----------------------------------------------

  def metrics_logger(self, node: str, **kwargs) -> MetricsLogger:
    return MetricsLogger(self.run_dir, node, **kwargs)

  def append_evaluation_episode(self, *, game: str, score: float, frames: int,
                                wall_time_s: float, training_frames: int = 0,
                                learner_steps: int = 0, node: str = '',
                                **extra: Any) -> None:
    AppendOnlyCsv(self.run_dir / EVALUATION_FILE, EVALUATION_COLUMNS).append(
        dict(game=game, score=float(score), frames=int(frames),
             wall_time_s=float(wall_time_s), training_frames=int(training_frames),
             learner_steps=int(learner_steps), node=node, **extra))

  def write_summary(self, summary: Mapping[str, Any]) -> None:
    atomic_write_json(self.run_dir / SUMMARY_FILE, dict(summary))

  # Readers (called by compare and figures) -----------------------------------

  def read_config(self) -> Dict[str, Any]:
    return read_json(self.run_dir / CONFIG_FILE)

  def read_topology(self) -> Dict[str, Any]:
    return read_json(self.run_dir / TOPOLOGY_FILE)

  def read_summary(self) -> Optional[Dict[str, Any]]:
    path = self.run_dir / SUMMARY_FILE
    return read_json(path) if path.exists() else None

  def metric_nodes(self) -> List[str]:
    directory = self.run_dir / METRICS_DIR
    return sorted(p.stem for p in directory.glob('*.csv')) if directory.exists() else []

  def read_metrics(self, node: str) -> List[Dict[str, Any]]:
    return [_typed(row) for row in
            read_csv_rows(self.run_dir / METRICS_DIR / f'{_safe(node)}.csv')]

  def follow_evaluation_episodes(self) -> CsvTail:
    return CsvTail(self.run_dir / EVALUATION_FILE)

  def read_evaluation_episodes(self) -> List[Dict[str, Any]]:
    return [_typed(row) for row in read_csv_rows(self.run_dir / EVALUATION_FILE)]

  def write_final_evaluation(self, rows: Sequence[Mapping[str, Any]]) -> None:
    """Writes the final evaluation whole, atomically (replacing any)."""
    columns = list(FINAL_EVALUATION_COLUMNS) + sorted(
        {k for row in rows for k in row} - set(FINAL_EVALUATION_COLUMNS))
    atomic_write_bytes(
        self.run_dir / FINAL_EVALUATION_FILE,
        _csv_line(columns) + b''.join(
            _csv_line([_format_cell(row.get(c)) for c in columns])
            for row in rows))

  def read_final_evaluation(self) -> Optional[List[Dict[str, Any]]]:
    """The final evaluation's episodes; None if the run has none."""
    path = self.run_dir / FINAL_EVALUATION_FILE
    if not path.exists():
      return None
    return [_typed(row) for row in read_csv_rows(path)]


def _typed(row: Mapping[str, str]) -> Dict[str, Any]:
  """CSV cells back to numbers where they are numbers."""
  out: Dict[str, Any] = {}
  for key, text in row.items():
    if text is None or text == '':
      out[key] = None
      continue
    try:
      out[key] = int(text)
    except ValueError:
      try:
        out[key] = float(text)
      except ValueError:
        out[key] = text
  return out


def list_runs(root: Optional[os.PathLike] = None) -> List[RunRecord]:
  root = pathlib.Path(root) if root is not None else DEFAULT_ROOT
  if not root.exists():
    return []
  return [RunRecord(p) for p in sorted(root.iterdir())
          if (p / CONFIG_FILE).exists()]

