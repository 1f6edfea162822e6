"""What a learner serves its actors: whole parameter versions, never a mix.

Why a service of its own: a learner's update assigns its variables one by
one, while Courier answers `get_variables` on a server thread of its own. Read
straight from the variables, a fetch that overlaps an update can return some
variables after the update and some before: parameters that no learner step
ever produced. Here the learner runs each update inside `updating()`, and a
fetch reads the variables only while no update runs.

A fetch never waits for an update either. It gets a snapshot of the latest
completed step when the learner is between updates (taken then and there),
and otherwise the latest snapshot it has, with that snapshot's version; it
then asks for a fresh one, which the running update takes as it ends. So a
snapshot (a copy of every variable: milliseconds for an Atari network) is
taken only when somebody fetches after a change, never once per step.
"""

import contextlib
import threading
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np


class ParameterService:
  """Consistent, versioned snapshots of named variable collections.

  Args:
    collections: name -> a callable returning that collection's variables
      (anything with `.numpy()`).
    version: a callable returning the learner's version (its step count).
  """

  def __init__(self, collections: Mapping[str, Callable[[], Sequence]],
               version: Callable[[], int]):
    self._collections = dict(collections)
    self._version = version
    self._updating = threading.Lock()   # held by an update, or a snapshot
    self._lock = threading.Lock()       # guards the fields below
    self._snapshot: Optional[Dict[str, List[np.ndarray]]] = None
    self._stale = True
    self._wanted = False
    self.snapshots_taken = 0

  @property
  def names(self) -> List[str]:
    return sorted(self._collections) + ['version']

  def _take(self) -> None:
    """Snapshots the variables; the caller holds `_updating`."""
    snapshot = {name: [np.array(v.numpy(), copy=True) for v in variables()]
                for name, variables in self._collections.items()}
    snapshot['version'] = [np.asarray(int(self._version()), np.int64)]
    with self._lock:
      self._snapshot, self._stale, self._wanted = snapshot, False, False
      self.snapshots_taken += 1

  @contextlib.contextmanager
  def updating(self) -> Iterator[None]:
    """Runs an update (or anything that writes the variables) exclusively."""
    with self._updating:
      with self._lock:
        self._stale = True
      try:
        yield
      finally:
        with self._lock:
          wanted = self._wanted
        if wanted:
          self._take()

  def publish(self) -> None:
    """Snapshots the variables now (construction, restore)."""
    with self._updating:
      self._take()

  def get_variables(self, names: Sequence[str]) -> List[List[np.ndarray]]:
    """Collections `names` of one version (Acme's variable source)."""
    unknown = [name for name in names if name not in self.names]
    if unknown:
      raise KeyError(f'unknown variable collection(s) {unknown}; valid: '
                     f'{", ".join(self.names)}')
    with self._lock:
      stale = self._stale
    if stale:
      if self._updating.acquire(blocking=False):
        try:
          self._take()
        finally:
          self._updating.release()
      else:
        with self._lock:
          self._wanted = True
    with self._lock:
      snapshot = self._snapshot
    if snapshot is None:
      raise RuntimeError('no parameters published yet: the learner publishes '
                         'once it is built')
    return [snapshot[name] for name in names]

  def version(self) -> int:
    """The version of the latest snapshot."""
    with self._lock:
      snapshot = self._snapshot
    return -1 if snapshot is None else int(snapshot['version'][0])
