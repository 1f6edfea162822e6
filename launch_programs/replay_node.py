"""A Reverb server node for Launchpad that does not import Reverb to be built.

Why not `lp.ReverbNode`: its module imports `reverb` (and so TensorFlow) at
the top, only for two type aliases. Building a program with it therefore
costs the launcher process a full TensorFlow import (the launcher's largest
start-up cost) although the launcher never touches a table. This node
behaves the same (a `reverb.Server` on the address Launchpad allocates; its
handle dereferences to a `reverb.Client`) but imports Reverb only in the
processes that serve or use it.
"""

from typing import Any, Callable, Sequence

from absl import logging
import launchpad as lp
from launchpad.launch import worker_manager
from launchpad.nodes import base
from launchpad.nodes.python import node as python_node

PORT_NAME = 'reverb'  # As lp.ReverbNode's.


class ReplayHandle(base.Handle):
  """Dereferences to a `reverb.Client` of the node's server."""

  def __init__(self, address: lp.Address):
    self._address = address

  def dereference(self):
    import reverb  # pylint: disable=g-import-not-at-top
    address = self._address.resolve()
    logging.info('Reverb client connecting to: %s', address)
    return reverb.Client(address)


class ReplayNode(python_node.PyNode):
  """Serves the tables of `make_tables()` until the program stops."""

  def __init__(self, make_tables: Callable[[], Sequence[Any]]):
    super().__init__(self.run)
    self._make_tables = make_tables
    self._address = lp.Address(PORT_NAME)
    self.allocate_address(self._address)

  def create_handle(self):
    return self._track_handle(ReplayHandle(self._address))

  def run(self):
    import reverb  # pylint: disable=g-import-not-at-top
    self._server = reverb.Server(
        tables=self._make_tables(),
        port=lp.get_port_from_address(self._address.resolve()))
    worker_manager.wait_for_stop()
