"""A learner's parameter service never serves a half-applied update.

The race it removes: Courier answers `get_variables` on a thread of its own
while the learner's update assigns variables one by one. The tests update
variables one at a time, slowly, while another thread fetches; every fetched
snapshot must be exactly one version, never a mix.
"""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf
import tree

from agents import parameters
from agents.impala import config as config_lib
from agents.impala import learning
from agents.impala import queue as queue_lib
from networks import impala as impala_networks

STEPS = 60


def _service(variables, version):
  return parameters.ParameterService({'policy': lambda: variables},
                                     version=lambda: version.numpy())


def test_concurrent_fetches_see_whole_versions_only():
  variables = [tf.Variable(np.zeros(3, np.float32)) for _ in range(4)]
  version = tf.Variable(0, dtype=tf.int64)
  service = _service(variables, version)
  service.publish()
  fetched, done = [], threading.Event()

  def fetch():
    while not done.is_set():
      policy, (v,) = service.get_variables(['policy', 'version'])
      fetched.append((int(v), [p.copy() for p in policy]))
      time.sleep(0.0005)  # a tight loop would starve the learner of the GIL

  fetcher = threading.Thread(target=fetch, daemon=True)
  fetcher.start()
  for step in range(1, STEPS + 1):
    with service.updating():
      for variable in variables:  # a half-applied update lasts a while
        variable.assign(np.full(3, step, np.float32))
        time.sleep(0.001)
      version.assign(step)
    time.sleep(0.001)
  done.set()
  fetcher.join(timeout=10)
  assert fetched
  for v, policy in fetched:
    for value in policy:
      np.testing.assert_array_equal(value, np.full(3, v, np.float32))
  policy, (v,) = service.get_variables(['policy', 'version'])
  assert int(v) == STEPS
  assert all((p == STEPS).all() for p in policy)


def test_a_fetch_never_waits_and_copies_only_after_a_change():
  variables = [tf.Variable(1.0)]
  version = tf.Variable(0, dtype=tf.int64)
  service = _service(variables, version)
  service.publish()
  service.get_variables(['policy'])
  service.get_variables(['policy'])
  assert service.snapshots_taken == 1  # nothing changed: no copy
  fetched = {}
  with service.updating():
    variables[0].assign(2.0)  # an update under way: not served
    # A fetch from another thread returns at once, with the old version.
    reader = threading.Thread(target=lambda: fetched.update(
        v=service.get_variables(['policy', 'version'])))
    reader.start()
    reader.join(timeout=10)
    assert fetched['v'][0][0] == 1.0 and int(fetched['v'][1][0]) == 0
    version.assign(1)
  # It asked for a fresh snapshot, which the update took as it ended.
  assert service.snapshots_taken == 2 and service.version() == 1
  policy, (v,) = service.get_variables(['policy', 'version'])
  assert policy[0] == 2.0 and int(v) == 1
  assert service.snapshots_taken == 2
  with service.updating():
    variables[0].assign(3.0)
    version.assign(2)
  # Between updates, a fetch snapshots the latest step itself.
  assert service.get_variables(['policy'])[0][0] == 3.0
  assert service.version() == 2
  with pytest.raises(KeyError, match='policy, version'):
    service.get_variables(['target'])


def test_a_learner_serves_exactly_the_variables_of_one_of_its_steps():
  config = config_lib.ImpalaConfig.local(
      network='mlp', mlp_sizes=(8,), use_lstm=False, unroll_length=4,
      batch_size=2, action_repeat=1, jit_compile=False, total_frames=10**6)
  network = impala_networks.make_network_from_config(config, 3)
  signature = queue_lib.trajectory_signature(
      tf.TensorSpec([5], tf.float32), 3, config.unroll_length,
      impala_networks.core_state_spec(network))
  rng = np.random.default_rng(0)

  def random(spec):
    shape = (config.batch_size,) + tuple(spec.shape)
    if spec.dtype == tf.bool:
      return np.zeros(shape, bool)
    if spec.dtype.is_integer:
      return rng.integers(0, 3, shape).astype(spec.dtype.as_numpy_dtype)
    return rng.normal(size=shape).astype(spec.dtype.as_numpy_dtype)

  batch = tree.map_structure(random, signature)
  learner = learning.ImpalaLearner(
      network, dataset=tf.data.Dataset.from_tensors(batch).repeat(),
      config=config, signature=signature)
  at_step = {0: [v.numpy().copy() for v in network.variables]}
  fetched, done = [], threading.Event()

  def fetch():
    while not done.is_set():
      policy, (v,) = learner.get_variables(['policy', 'version'])
      fetched.append((int(v), policy))
      time.sleep(0.0005)  # a tight loop would starve the learner of the GIL

  fetcher = threading.Thread(target=fetch, daemon=True)
  fetcher.start()
  for _ in range(20):
    learner.step()
    at_step[learner.num_steps] = [v.numpy().copy() for v in network.variables]
  done.set()
  fetcher.join(timeout=10)
  assert fetched
  for v, policy in fetched:
    assert v in at_step
    for value, expected in zip(policy, at_step[v]):
      np.testing.assert_array_equal(value, expected)
