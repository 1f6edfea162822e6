"""What a learner serves its actors: whole parameter versions, never a mix.

Why a service of its own: a learner's update assigns its variables one by
one, while Courier answers `get_variables` on a server thread of its own. Read
straight from the variables, a fetch that overlaps an update can return some
variables after the update and some before: parameters that no learner step
ever produced. Here the learner publishes a snapshot between steps, in its
own thread, so every fetch returns the variables exactly as one step left
them, with that step's version.

A fetch never waits for the learner: it gets the snapshot of the latest
completed step. The price is one copy of the variables per step (a few
milliseconds for an Atari network, against a step of tens to hundreds),
paid in the learner's thread; a snapshot left unread is simply replaced.
"""

import threading
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np


class ParameterService:
  """Consistent, versioned snapshots of named variable collections.

  Args:
    collections: name -> a callable returning that collection's variables
      (anything with `.numpy()`), read only in the learner's thread.
    version: a callable returning the learner's version (its step count).
  """

  def __init__(self, collections: Mapping[str, Callable[[], Sequence]],
               version: Callable[[], int]):
    self._collections = dict(collections)
    self._version = version
    self._lock = threading.Lock()
    self._snapshot: Optional[Dict[str, List[np.ndarray]]] = None

  @property
  def names(self) -> List[str]:
    return sorted(self._collections) + ['version']

  def publish(self) -> None:
    """Snapshots the variables; call between steps, in the learner's thread."""
    snapshot = {name: [np.array(v.numpy(), copy=True) for v in variables()]
                for name, variables in self._collections.items()}
    snapshot['version'] = [np.asarray(int(self._version()), np.int64)]
    with self._lock:
      self._snapshot = snapshot

  def get_variables(self, names: Sequence[str]) -> List[List[np.ndarray]]:
    """The latest snapshot's collections `names` (Acme's variable source)."""
    unknown = [name for name in names if name not in self.names]
    if unknown:
      raise KeyError(f'unknown variable collection(s) {unknown}; valid: '
                     f'{", ".join(self.names)}')
    with self._lock:
      snapshot = self._snapshot
    if snapshot is None:
      raise RuntimeError('no parameters published yet: the learner publishes '
                         'once it is built')
    return [snapshot[name] for name in names]

  def version(self) -> int:
    """The version of the snapshot that a fetch now gets."""
    with self._lock:
      snapshot = self._snapshot
    return -1 if snapshot is None else int(snapshot['version'][0])
