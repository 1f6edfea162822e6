"""Central inference ("dyn. batch"): batching, parameters, the actor's use.

The reference is the network itself, called here on each request's own rows
with the parameters the server says it used: a batched pass must give every
actor exactly what its own pass would have.
"""

import threading
import time

import numpy as np
import pytest
import tree

from agents.impala import actor as actor_lib
from agents.impala import config as config_lib
from agents.impala import inference as inference_lib
from networks import impala as impala_networks

from test_impala_actor import ChangingSource
from test_impala_actor import NUM_ACTIONS
from test_impala_actor import ScriptedEnvironment
from test_impala_actor import Setup
from test_impala_actor import UNROLL

FEATURES = 4


def _config(**overrides):
  settings = dict(network='mlp', mlp_sizes=(8,), use_lstm=True, lstm_size=5,
                  unroll_length=UNROLL, batch_size=2, queue_capacity=64,
                  action_repeat=1, jit_compile=False, central_inference=True,
                  num_actors=6,
                  inference_timeout_ms=500.0)
  settings.update(overrides)
  return config_lib.ImpalaConfig.local(**settings)


def _server(config, source=None):
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  spec = ScriptedEnvironment(0).observation_spec()
  return inference_lib.InferenceServer(network, config, spec,
                                       variable_source=source), network


def _request(rng, rows, network):
  state = tree.map_structure(
      lambda x: rng.normal(size=x.shape).astype(np.float32),
      tree.map_structure(lambda x: x.numpy(), network.initial_state(rows)))
  return (rng.normal(size=(rows, FEATURES)).astype(np.float32),
          rng.random(rows) < 0.3,
          rng.integers(0, NUM_ACTIONS, rows).astype(np.int32),
          rng.normal(size=rows).astype(np.float32),
          state)


def _reference(config, variables, request):
  """The network on one request's rows alone, with the given parameters."""
  network = impala_networks.make_network_from_config(config, NUM_ACTIONS)
  impala_networks.create_variables(network,
                                   ScriptedEnvironment(0).observation_spec())
  for variable, value in zip(network.variables, variables):
    variable.assign(value)
  observation, first, last_action, last_reward, state = request
  outputs, next_state = network(
      impala_networks.ImpalaInputs(observation, first, last_action,
                                   last_reward), state)
  return (outputs.policy_logits.numpy(),
          tree.map_structure(lambda x: x.numpy(), next_state))


def test_concurrent_requests_share_a_pass_and_get_their_own_rows():
  # Three actors of 1, 2 and 3 environments: a batch limit of 6 rows. The
  # timeout is long so that the rows batch together however late a loaded
  # machine runs a thread; a full batch of 6 is served without waiting.
  config = _config(inference_max_batch=6, inference_timeout_ms=5000.0)
  server, network = _server(config)
  try:
    variables = [v.numpy() for v in network.variables]
    rng = np.random.default_rng(0)
    rounds = 4
    requests = [[_request(rng, rows, network) for _ in range(rounds)]
                for rows in (1, 2, 3)]
    results = [[None] * rounds for _ in requests]
    barrier = threading.Barrier(len(requests))

    def actor(index):
      for k, request in enumerate(requests[index]):
        barrier.wait()
        results[index][k] = server.policy_step(*request)

    threads = [threading.Thread(target=actor, args=(i,))
               for i in range(len(requests))]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join(30)
    for index, actor_requests in enumerate(requests):
      for request, (logits, next_state, version) in zip(
          actor_requests, results[index]):
        expected_logits, expected_state = _reference(config, variables,
                                                     request)
        assert logits.shape == (request[0].shape[0], NUM_ACTIONS)
        np.testing.assert_allclose(logits, expected_logits, atol=1e-5)
        tree.map_structure(
            lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
            next_state, expected_state)
        assert version == 0
    report = server.report()
    assert report['requests'] == 3 * rounds
    # Batched across actors: fewer passes than requests, more rows each.
    assert report['batches'] < report['requests']
    assert report['mean_batch_rows'] > 3.0
  finally:
    server.stop()


def test_a_lone_request_is_served_after_the_timeout():
  config = _config(inference_timeout_ms=50.0)  # limit: 3 x 2 = 6 rows
  server, network = _server(config)
  try:
    start = time.monotonic()
    logits, _, _ = server.policy_step(
        *_request(np.random.default_rng(1), 2, network))
    assert logits.shape == (2, NUM_ACTIONS)
    assert time.monotonic() - start < 5.0
    assert server.report()['batches'] == 1
  finally:
    server.stop()


class VersionedSource:
  """A learner stand-in whose version the test moves on."""

  def __init__(self, network):
    impala_networks.create_variables(
        network, ScriptedEnvironment(0).observation_spec())
    self.base = [v.numpy() for v in network.variables]
    self.version = 7
    self.policy_fetches = 0

  def params(self, version):
    return [b * (1.0 + 0.1 * version) for b in self.base]

  def get_variables(self, names):
    if 'policy' in names:
      self.policy_fetches += 1
    values = {'policy': self.params(self.version),
              'version': [np.int64(self.version)]}
    return [values[name] for name in names]


def test_parameters_follow_the_learners_version_and_are_fetched_once_each():
  config = _config(inference_refresh_period_s=0.01)
  source = VersionedSource(
      impala_networks.make_network_from_config(config, NUM_ACTIONS))
  server, _ = _server(config, source)
  try:
    request = _request(np.random.default_rng(2), 2,
                       impala_networks.make_network_from_config(config,
                                                                NUM_ACTIONS))
    logits, _, version = server.policy_step(*request)
    assert version == 7
    np.testing.assert_allclose(
        logits, _reference(config, source.params(7), request)[0], atol=1e-5)
    time.sleep(0.2)  # ~20 refresh periods at an unchanged version
    assert source.policy_fetches == 1
    source.version = 8
    deadline = time.time() + 10
    while server.report()['parameter_version'] != 8:
      assert time.time() < deadline, server.report()
      time.sleep(0.01)
    logits, _, version = server.policy_step(*request)
    assert version == 8 and source.policy_fetches == 2
    np.testing.assert_allclose(
        logits, _reference(config, source.params(8), request)[0], atol=1e-5)
  finally:
    server.stop()


def test_an_actor_with_central_inference_records_the_served_logits():
  config = _config(use_lstm=False, num_actors=2,
                   inference_timeout_ms=1.0)
  setup = Setup(config, num_envs=2, source=ChangingSource)
  server, server_network = _server(config)
  try:
    actor = actor_lib.ImpalaActor(
        setup.envs, setup.network, setup.client, config,
        variable_source=setup.source, inference=server)
    for _ in range(2):
      assert actor.run_unroll()
    # The actor fetched nothing itself; the server's version is recorded.
    assert setup.source.calls == 0
    assert actor.parameter_version == 0
    variables = [v.numpy() for v in server_network.variables]
    items = setup.drain(4)
    for item in items:
      steps = item.observation[:UNROLL]
      expected, _ = _reference(config, variables, (
          steps, item.first[:UNROLL], item.last_action[:UNROLL],
          item.last_reward[:UNROLL], ()))
      np.testing.assert_allclose(item.behaviour_logits[:UNROLL], expected,
                                 atol=1e-5)
    actor.close()
  finally:
    server.stop()
    setup.close()


def test_config_refuses_bad_inference_settings():
  with pytest.raises(ValueError, match='inference_max_batch'):
    _config(inference_max_batch=-1)
  with pytest.raises(ValueError, match='inference_refresh_period_s'):
    _config(inference_refresh_period_s=0.0)
  assert _config().inference_batch_limit == 6
  assert _config(inference_max_batch=4).inference_batch_limit == 4
