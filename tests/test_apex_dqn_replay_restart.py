"""App. F "Failure Tolerance": the replay server dies and comes back.

The replay runs in its own process, as a Launchpad Reverb node does; the test
SIGKILLs it and starts a fresh one on the same port (what a cluster manager
does with a dead task). A real actor keeps acting throughout and a real
learner keeps asking for batches. Expected, as the paper describes it: the
actor drops what it cannot send and carries on; the learner pauses, waits
until the actor has refilled the new server to the minimum size, and then
continues learning.
"""

import socket
import subprocess
import sys
import threading
import time

import reverb
import tensorflow as tf

from agents.apex_dqn import actor as actor_lib
from agents.apex_dqn import config as config_lib
from agents.apex_dqn import learning
from agents.apex_dqn import replay

from test_apex_dqn_actor import CatchQNetwork, UInt8Catch

_SETTINGS = dict(num_actors=2, n_step=3, min_replay_size=300, batch_size=16,
                 replay_soft_capacity=10_000, compress_observations=False,
                 actor_send_batch_size=10, actor_buffer_size=20,
                 prefetch_batches=0, learning_rate=1e-3,
                 target_update_period=100, jit_compile=False)

_SERVER = """
import sys
from agents.apex_dqn import config as config_lib, replay
import reverb
config = config_lib.ApeXDQNConfig.local(**%r)
signature = replay.transition_signature((10, 5), compressed=False)
server = reverb.Server(replay.make_replay_tables(config, signature),
                       port=int(sys.argv[1]))
print('ready', flush=True)
sys.stdin.read()
""" % _SETTINGS


def _start_server(port):
  process = subprocess.Popen(
      [sys.executable, '-c', _SERVER, str(port)], stdin=subprocess.PIPE,
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
  line = [b'']
  reader = threading.Thread(
      target=lambda: line.__setitem__(0, process.stdout.readline()),
      daemon=True)
  reader.start()
  # Generous: importing TF and Reverb on a loaded machine can take a while,
  # and a server that starts sooner ends the wait sooner.
  reader.join(timeout=180)
  if b'ready' not in line[0]:
    process.kill()
    raise AssertionError('replay server process did not start')
  return process


def _wait_for(condition, timeout_s, what):
  deadline = time.time() + timeout_s
  while not condition():
    if time.time() > deadline:
      raise AssertionError(f'timed out waiting for {what}')
    time.sleep(0.1)


def test_learner_waits_for_the_refill_after_a_replay_restart():
  config = config_lib.ApeXDQNConfig.local(**_SETTINGS)
  with socket.socket() as s:
    s.bind(('localhost', 0))
    port = s.getsockname()[1]
  address = f'localhost:{port}'
  servers = [_start_server(port)]
  client = reverb.Client(address)
  actor = actor_lib.ApeXDQNActor(UInt8Catch(seed=0), CatchQNetwork(), client,
                                 config, actor_id=0, send_timeout_s=2.0)
  learner = learning.ApeXDQNLearner(
      CatchQNetwork(), CatchQNetwork(),
      make_dataset=lambda: replay.make_dataset(
          address, config, observation_shape=(10, 5),
          rate_limiter_timeout_ms=300),
      replay_client=client, config=config, retry_period_s=0.2,
      observation_spec=tf.TensorSpec([10, 5], tf.uint8))
  stop = threading.Event()
  errors = []
  acting_paused = threading.Event()
  # While set, the actor pauses itself once it has sent this many items in
  # all: the refill then stops at a known size, however slow the test thread.
  items_limit = [None]

  def act():
    try:
      while not stop.is_set():
        limit = items_limit[0]
        if acting_paused.is_set() or (
            limit is not None and actor.report()['items_sent'] >= limit):
          time.sleep(0.05)
          continue
        actor.step()
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  def learn():
    try:
      learner.run()
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=act, daemon=True),
             threading.Thread(target=learn, daemon=True)]
  for thread in threads:
    thread.start()
  try:
    # The waits below end as soon as their condition holds: their bounds
    # only catch a hang, so they leave room for a loaded machine (report()
    # alone may take 5 s per call while the server is down).
    _wait_for(lambda: errors or learner.num_steps >= 20, 180, 'learning')
    assert not errors, errors
    acting_paused.set()  # so the refill below can be watched step by step
    servers[0].kill()  # SIGKILL: the replay node dies with its items.
    servers[0].wait(timeout=10)
    _wait_for(lambda: learner.report()['waiting_for_replay'], 60,
              'the learner to notice that the replay is gone')
    paused_at = learner.num_steps
    # The actor acts on while the server is down: its sends must be dropped
    # after their timeout, not hang. Waiting for that before the restart
    # makes it certain (a send issued only after the restart could reach
    # the new server on the old channel and never fail).
    acting_paused.clear()
    _wait_for(lambda: errors or actor.report()['send_failures'] >= 1, 120,
              'the actor to drop a batch sent to the dead server')
    assert not errors, errors

    # Whatever is sent from now on lands on the new server. The actor pauses
    # after 150 more items: with one batch of 10 in flight and the check made
    # between steps, at most 170 reach it, below min_replay_size (300).
    refill = 150
    items_limit[0] = actor.report()['items_sent'] + refill
    assert refill + 2 * config.actor_send_batch_size < config.min_replay_size
    servers.append(_start_server(port))
    # The actor refills the new, empty server; below min_replay_size the
    # learner must stay paused, at or above it the learner continues.
    refill_client = reverb.Client(address)

    def replay_size():
      try:
        return refill_client.server_info(timeout=2)[
            config.replay_table_name].current_size
      except Exception:  # pylint: disable=broad-except
        return 0

    _wait_for(lambda: replay_size() >= 100, 120, 'the actor to resume sending')
    assert replay_size() < config.min_replay_size
    # At most the batches already decoded before the kill can still be used.
    assert learner.num_steps <= paused_at + 2
    items_limit[0] = None  # The actor fills the new server past its minimum.
    _wait_for(lambda: errors or learner.num_steps >= paused_at + 20, 180,
              'the learner to continue after the refill')
    assert not errors, errors
    assert replay_size() >= config.min_replay_size
    report = learner.report()
    assert report['replay_waits'] >= 1
    assert actor.report()['send_failures'] >= 1  # it dropped, it did not hang
  finally:
    stop.set()
    learner.stop()
    for thread in threads:
      thread.join(timeout=60)
    for server in servers:
      if server.poll() is None:
        server.kill()
        server.wait(timeout=10)
  assert not any(thread.is_alive() for thread in threads)
