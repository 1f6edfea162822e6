"""ApeXDQNLearner on real Reverb servers (no mocks), tiny linear Q-networks.

The reference computations below are written out in numpy for a linear
network q(x) = x W + b (x = float(uint8 observation)), independently of the
learner's TF code: double-Q n-step target, importance weights, weighted
1/2 delta^2 mean, analytic gradients, global-norm clipping and one centered
RMSProp update (eps inside the square root, as TF1 and Sonnet do).
"""

import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import reverb
import sonnet as snt
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import learning
from agents.apex_dqn import replay
from agents.replay import prioritized

OBS_DIM = 4
NUM_ACTIONS = 2
BATCH = 8


def _config(**overrides):
  settings = dict(batch_size=BATCH, min_replay_size=BATCH,
                  replay_soft_capacity=100, compress_observations=False,
                  prefetch_batches=0, target_update_period=1000,
                  jit_compile=False)
  settings.update(overrides)
  return config_lib.ApeXDQNConfig.local(**settings)


class LinearQ(snt.Module):

  def __init__(self, name='linear_q'):
    super().__init__(name=name)
    self.linear = snt.Linear(NUM_ACTIONS, name='linear')

  def __call__(self, x):
    return self.linear(tf.cast(x, tf.float32))


def _tables(config):
  return replay.make_replay_tables(
      config, replay.transition_signature(observation_shape=(OBS_DIM,),
                                          compressed=False))


def _write(client, config, transitions, priorities):
  # Writers stay local to this function: a live writer makes stop() wait 5 s.
  with client.trajectory_writer(num_keep_alive_refs=1) as writer:
    prioritized.write_items(writer, config.replay_table_name, transitions,
                            priorities)
    writer.flush(timeout_ms=10_000)


def _random_transitions(rng, num, start=0):
  out = []
  for i in range(num):
    obs = rng.integers(0, 3, OBS_DIM).astype(np.uint8)
    nxt = rng.integers(0, 3, OBS_DIM).astype(np.uint8)
    out.append(replay.to_replay_transition(
        obs, int(rng.integers(NUM_ACTIONS)), float(rng.normal()),
        float(rng.choice([0.0, 0.99 ** 3])), nxt, actor_id=0,
        actor_step=start + i,
        # Parameters of learner step 0 or 1, or unknown (-1).
        learner_step=(start + i) % 3 - 1))
  return out


class _Server:

  def __init__(self, config, port=None):
    self.server = reverb.Server(_tables(config), port=port)
    self.port = self.server.port
    self.address = f'localhost:{self.port}'
    self.client = reverb.Client(self.address)

  def __enter__(self):
    return self

  def __exit__(self, *_):
    self.server.stop()


def _fixed_batch(server, config, rng):
  """One real batch (real keys, probabilities, table size) from the server."""
  _write(server.client, config, _random_transitions(rng, 12),
         rng.uniform(0.5, 2.0, 12))
  dataset = replay.make_dataset(server.address, config,
                                observation_shape=(OBS_DIM,))
  return next(iter(dataset))


def _learner(config, dataset, client, **kwargs):
  return learning.ApeXDQNLearner(LinearQ(), LinearQ(), dataset, client,
                                 config, **kwargs)


# --- The numpy reference. ---------------------------------------------------


def _reference(sample, w, b, wt, bt, config, ms0=1.0):
  """Loss, |delta|, unclipped gradient norm and the updated (W, b)."""
  x = sample.data.observation.numpy().astype(np.float64)
  xn = sample.data.next_observation.numpy().astype(np.float64)
  a = sample.data.action.numpy()
  r = sample.data.reward.numpy().astype(np.float64)
  d = sample.data.discount.numpy().astype(np.float64)
  p = sample.info.probability.numpy()
  n = sample.info.table_size.numpy().astype(np.float64)
  rows = np.arange(len(a))

  q = x @ w + b
  best = np.argmax(xn @ w + b, axis=1)  # online selects
  g_target = r + d * (xn @ wt + bt)[rows, best]  # target evaluates
  delta = g_target - q[rows, a]
  iw = (n * p) ** -config.importance_sampling_exponent
  iw = iw / iw.max()
  loss = np.mean(iw * 0.5 * delta ** 2)

  # d loss / d q[i, a_i] = -iw_i delta_i / B; the target is a constant.
  dq = np.zeros_like(q)
  dq[rows, a] = -iw * delta / len(a)
  grads = [x.T @ dq, dq.sum(axis=0)]
  norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
  scale = min(1.0, config.max_gradient_norm / norm)
  new = []
  for param, g in zip([w, b], grads):
    g = g * scale
    rho, eps, lr = config.rmsprop_decay, config.rmsprop_epsilon, \
        config.learning_rate
    ms = rho * ms0 + (1 - rho) * g ** 2
    mg = (1 - rho) * g
    new.append(param - lr * g / np.sqrt(ms - mg ** 2 + eps))
  return loss, np.abs(delta), norm, new


def _priorities_on_server(client, config, keys):
  """Current priority of each key, read back exactly once per item.

  Sampling a prioritized table at random could miss a low-priority key, so
  each sampled item is taken out of the draw instead: its `info.priority` is
  recorded, then set to 0, which leaves all the sampling mass on the items
  not seen yet. Every sample is therefore a new item while any item with a
  positive priority is left (up to the rounding of Reverb's sum tree, ~1e-16
  of the mass); a repeat means the rest have priority 0. This overwrites the
  table's priorities: call it last. It takes at most table size + 1 samples.
  """
  table = config.replay_table_name
  wanted = set(int(k) for k in keys)
  size = client.server_info()[table].current_size
  seen, found = set(), {}
  for _ in range(size + 1):
    if wanted <= seen:
      break
    (sample,) = client.sample(table, num_samples=1, emit_timesteps=False)
    key = int(sample.info.key)
    if key in seen:
      break
    seen.add(key)
    if key in wanted:
      found[key] = float(sample.info.priority)
    client.mutate_priorities(table, updates={key: 0.0})
  return found


# --- Tests. -------------------------------------------------------------------


@pytest.mark.parametrize('jit_compile', [False, True])
def test_step_matches_numpy_reference(jit_compile):
  config = _config(learning_rate=1e-2, jit_compile=jit_compile)
  rng = np.random.default_rng(0)
  with _Server(config) as server:
    sample = _fixed_batch(server, config, rng)
    learner = _learner(config, tf.data.Dataset.from_tensors(sample).repeat(),
                       server.client)
    net, tgt = learner._network, learner._target_network
    # A target network different from the online one, so double-Q matters.
    for v in tgt.variables:
      v.assign(v + tf.random.normal(v.shape, seed=1))
    w, b = [v.numpy().astype(np.float64) for v in
            (net.linear.w, net.linear.b)]
    wt, bt = [v.numpy().astype(np.float64) for v in
              (tgt.linear.w, tgt.linear.b)]
    loss, priorities, norm, (w1, b1) = _reference(sample, w, b, wt, bt,
                                                  config)
    assert norm < config.max_gradient_norm  # Clipping does not bite here.

    metrics = learner.step()
    np.testing.assert_allclose(metrics['loss'], loss, rtol=1e-5)
    np.testing.assert_allclose(metrics['gradient_norm'], norm, rtol=1e-5)
    # Diagnostics, from the same numpy quantities.
    x = sample.data.observation.numpy().astype(np.float64)
    q = x @ w + b
    taken = q[np.arange(len(q)), sample.data.action.numpy()]
    iw = (sample.info.table_size.numpy() * sample.info.probability.numpy()
          ) ** -config.importance_sampling_exponent
    iw = iw / iw.max()
    for key, expected in (('mean_q', taken.mean()), ('max_q', q.max()),
                          ('mean_abs_td_error', priorities.mean()),
                          ('importance_weight_min', iw.min()),
                          ('importance_weight_mean', iw.mean())):
      np.testing.assert_allclose(metrics[key], expected, rtol=1e-5,
                                 atol=1e-6, err_msg=key)
    # Age: updates before this one (0) since each item's parameters; items
    # of unknown version (-1) left out.
    versions = sample.data.extras['learner_step'].numpy()
    ages = 0 - versions[versions >= 0]
    np.testing.assert_allclose(metrics['sample_age_mean'], ages.mean())
    np.testing.assert_allclose(metrics['sample_age_max'], ages.max())
    assert metrics['replay_size'] == 12
    assert metrics['items_inserted'] == 12
    assert metrics['samples_per_insert'] == pytest.approx(
        metrics['items_sampled'] / 12)
    np.testing.assert_allclose(net.linear.w.numpy(), w1, rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(net.linear.b.numpy(), b1, rtol=1e-4,
                               atol=1e-6)
    assert learner.num_steps == 1

    learner.wait_for_priority_writes()  # step k's write overlaps step k+1
    keys = sample.info.key.numpy()
    found = _priorities_on_server(server.client, config, keys)
    assert len(found) == len(set(keys.tolist()))
    for key, expected in zip(keys, priorities):
      # |delta| is a difference of O(1) float32 values: its error is
      # absolute (~1e-7), so a small |delta| needs atol, not only rtol.
      np.testing.assert_allclose(found[int(key)], expected, rtol=1e-5,
                                 atol=1e-6)

    # What actors pull.
    policy, version = learner.get_variables(['policy', 'version'])
    np.testing.assert_array_equal(policy[0], net.variables[0].numpy())
    assert int(version[0]) == 1
    report = learner.report()
    assert report['learner_steps'] == 1 and report['replay_size'] == 12
    assert report['last_loss'] == pytest.approx(metrics['loss'])


def test_gradient_clipping_bites():
  # ms starts at 1 (TF1's initialisation) so the update is proportional to
  # the (clipped) gradient and clipping visibly changes it.
  config = _config(learning_rate=1e-2, max_gradient_norm=1e-3)
  rng = np.random.default_rng(1)
  with _Server(config) as server:
    sample = _fixed_batch(server, config, rng)
    learner = _learner(config, tf.data.Dataset.from_tensors(sample).repeat(),
                       server.client, rms_initial_mean_square=1.0)
    net = learner._network
    w, b = [v.numpy().astype(np.float64) for v in
            (net.linear.w, net.linear.b)]
    _, _, norm, (w1, b1) = _reference(sample, w, b, w, b, config, ms0=1.0)
    assert norm > 100 * config.max_gradient_norm
    unclipped = _reference(sample, w, b, w, b,
                           _config(learning_rate=1e-2), ms0=1.0)[3]
    metrics = learner.step()
    assert metrics['gradient_norm'] == pytest.approx(norm, rel=1e-5)
    np.testing.assert_allclose(net.linear.w.numpy(), w1, rtol=1e-4,
                               atol=1e-9)
    np.testing.assert_allclose(net.linear.b.numpy(), b1, rtol=1e-4,
                               atol=1e-9)
    assert not np.allclose(net.linear.w.numpy(), unclipped[0], atol=1e-6)
    # The applied step is tiny: lr * clipped_g / sqrt(~1).
    assert np.abs(net.linear.w.numpy() - w).max() < 2e-5


@pytest.mark.parametrize('jit_compile', [False, True])
def test_target_copied_every_period(jit_compile):
  period = 3
  config = _config(learning_rate=1e-2, target_update_period=period,
                   jit_compile=jit_compile)
  rng = np.random.default_rng(2)
  with _Server(config) as server:
    sample = _fixed_batch(server, config, rng)
    learner = _learner(config, tf.data.Dataset.from_tensors(sample).repeat(),
                       server.client)
    online = lambda: [v.numpy() for v in learner._network.variables]
    target = lambda: [v.numpy() for v in learner._target_network.variables]
    last_copy = online()
    for a, t in zip(last_copy, target()):  # Copied at construction.
      np.testing.assert_array_equal(a, t)
    for k in range(1, 3 * period + 2):
      metrics = learner.step()
      assert metrics['target_updated'] == (k % period == 0)
      if k % period == 0:
        last_copy = online()
      for a, t in zip(last_copy, target()):
        np.testing.assert_array_equal(a, t)
      if k % period:
        assert not all(np.array_equal(a, t)
                       for a, t in zip(online(), target()))


def test_learns_two_state_mdp():
  """Q converges to the analytic values of a 2-state, 2-action MDP.

  State A (one-hot 0): action 0 -> reward 1, terminal; action 1 -> n-step
  reward 0.5, accumulated discount 0.9, to state B. State B (one-hot 1):
  action 0 -> reward 2, terminal; action 1 -> reward 0, terminal.
  Q(B) = (2, 0), Q(A) = (1, 0.5 + 0.9 * 2) = (1, 2.3).
  """
  config = _config(learning_rate=3e-3, batch_size=16, min_replay_size=16,
                   target_update_period=20, prefetch_batches=2)
  state_a = np.array([1, 0, 0, 0], np.uint8)
  state_b = np.array([0, 1, 0, 0], np.uint8)
  items = [(state_a, 0, 1.0, 0.0, state_a), (state_a, 1, 0.5, 0.9, state_b),
           (state_b, 0, 2.0, 0.0, state_b), (state_b, 1, 0.0, 0.0, state_b)]
  transitions = [replay.to_replay_transition(*item, actor_id=0, actor_step=i)
                 for i, item in enumerate(items * 4)]
  with _Server(config) as server:
    _write(server.client, config, transitions, [1.0] * len(transitions))
    learner = _learner(
        config,
        lambda: replay.make_dataset(server.address, config,
                                    observation_shape=(OBS_DIM,)),
        server.client)
    learner.run(num_steps=2000)
    q = learner._network(np.stack([state_a, state_b])).numpy()
  np.testing.assert_allclose(q, [[1.0, 2.3], [2.0, 0.0]], atol=0.1)


def test_checkpoint_restore(tmp_path):
  from acme.utils import counting  # pylint: disable=g-import-not-at-top
  config = _config(learning_rate=1e-2, target_update_period=2)
  rng = np.random.default_rng(3)
  with _Server(config) as server:
    sample = _fixed_batch(server, config, rng)
    dataset = tf.data.Dataset.from_tensors(sample).repeat()
    counter = counting.Counter()
    learner = _learner(config, dataset, server.client, counter=counter,
                       checkpoint_dir=str(tmp_path))
    for _ in range(5):
      learner.step()
    assert learner.save()
    learner.step()  # Not saved: the restore must return to step 5.

    counter2 = counting.Counter()
    restored = _learner(config, dataset, server.client, counter=counter2,
                        checkpoint_dir=str(tmp_path))
    assert restored.restored_from is not None
    assert restored.num_steps == 5
    assert counter2.get_counts()['learner_steps'] == 5

    # Compare against the state saved at step 5 by re-reading the file.
    ckpt_vars = dict(tf.train.list_variables(restored.restored_from))
    reader = tf.train.load_checkpoint(restored.restored_from)
    assert ckpt_vars
    def saved(prefix):
      names = sorted(n for n in ckpt_vars if n.startswith(prefix)
                     and 'OPTIMIZER_SLOT' not in n)
      return [reader.get_tensor(n) for n in names]
    def current(module):
      return [v.numpy() for v in sorted(module.variables,
                                        key=lambda v: v.name)]
    # Restored online/target equal the saved tensors (5 steps), and differ
    # from the live learner that took a 6th step.
    for got, want in zip(current(restored._network),
                         saved('network/')):
      np.testing.assert_array_equal(got, want)
    for got, want in zip(current(restored._target_network),
                         saved('target_network/')):
      np.testing.assert_array_equal(got, want)
    assert not np.array_equal(restored._network.linear.w.numpy(),
                              learner._network.linear.w.numpy())
    # Optimizer slots exactly as saved.
    for slots in ('ms', 'mg', 'mom'):
      got = [v.numpy() for v in getattr(restored.optimizer, slots)]
      want = [reader.get_tensor(f'optimizer/{slots}/{i}/.ATTRIBUTES/'
                                'VARIABLE_VALUE') for i in range(len(got))]
      for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert np.abs(restored.optimizer.ms[0].numpy()).sum() > 0

    # Both continue identically from the same state: take step 6 again.
    restored.step()
    np.testing.assert_array_equal(restored._network.linear.w.numpy(),
                                  learner._network.linear.w.numpy())
    np.testing.assert_array_equal(restored._target_network.linear.w.numpy(),
                                  learner._target_network.linear.w.numpy())
    for slots in ('ms', 'mg', 'mom'):
      for g, w in zip(getattr(restored.optimizer, slots),
                      getattr(learner.optimizer, slots)):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def _wait_for(predicate, timeout_s, what):
  deadline = time.time() + timeout_s
  while time.time() < deadline:
    if predicate():
      return
    time.sleep(0.05)
  raise AssertionError(f'timed out after {timeout_s} s waiting for {what}')


_SERVER_SCRIPT = """
import sys, time
import reverb
from agents.apex_dqn import config as config_lib
from agents.apex_dqn import replay
config = config_lib.ApeXDQNConfig.local(**eval(sys.argv[2]))
tables = replay.make_replay_tables(config, replay.transition_signature(
    observation_shape=(%d,), compressed=False))
server = reverb.Server(tables, port=int(sys.argv[1]))
print('ready', flush=True)
sys.stdin.read()  # Until the test closes stdin or kills us.
server.stop()
""" % OBS_DIM


def _start_server_process(port, overrides):
  """A replay server in its own process, like a Launchpad Reverb node.

  (In-process servers are sampled directly, bypassing gRPC, so stopping one
  does not cut the learner off; a separate process is what a restart is.)
  """
  proc = subprocess.Popen(
      [sys.executable, '-c', _SERVER_SCRIPT, str(port), repr(overrides)],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  line = [None]
  reader = threading.Thread(target=lambda: line.__setitem__(
      0, proc.stdout.readline()), daemon=True)
  reader.start()
  # Generous: importing TF and Reverb on a loaded machine can take a while,
  # and a server that starts sooner ends the wait sooner.
  reader.join(timeout=180)
  if line[0] is None or b'ready' not in line[0]:
    proc.kill()
    raise AssertionError('replay server process did not start')
  return proc


def _free_port():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def test_pauses_and_resumes_across_replay_restart():
  overrides = dict(batch_size=BATCH, min_replay_size=BATCH,
                   replay_soft_capacity=100, compress_observations=False,
                   prefetch_batches=0, target_update_period=1000,
                   jit_compile=False, learning_rate=1e-3)
  config = config_lib.ApeXDQNConfig.local(**overrides)
  rng = np.random.default_rng(4)
  port = _free_port()
  address = f'localhost:{port}'
  procs = [_start_server_process(port, overrides)]
  client = reverb.Client(address)
  _write(client, config, _random_transitions(rng, BATCH), [1.0] * BATCH)

  def make_dataset():
    return replay.make_dataset(address, config, observation_shape=(OBS_DIM,),
                               rate_limiter_timeout_ms=300)

  learner = learning.ApeXDQNLearner(
      LinearQ(), LinearQ(), make_dataset=make_dataset, replay_client=client,
      config=config, retry_period_s=0.2,
      observation_spec=tf.TensorSpec([OBS_DIM], tf.uint8))
  errors = []

  def run():
    try:
      learner.run()
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  try:
    # The waits below end as soon as their condition holds: their bounds
    # only catch a hang, so they leave room for a loaded machine (report()
    # alone may take 5 s per call while the server is down).
    _wait_for(lambda: learner.num_steps >= 5, 120, 'first steps')
    procs[0].kill()  # The replay node dies.
    procs[0].wait(timeout=10)
    _wait_for(lambda: errors or learner.report()['waiting_for_replay'], 60,
              'the learner to notice the replay is down')
    assert not errors, errors
    paused_at = learner.num_steps
    time.sleep(0.5)
    # Batches already in flight before the kill (at most 2) may still be
    # consumed: on a loaded machine the fetch thread can deliver one only
    # after a probe has flagged the wait. Beyond them, nothing: the replay
    # is down. (The margin counts batches, not seconds.)
    assert learner.num_steps <= paused_at + 2

    # A fresh server on the same port, refilled below, then to, its minimum.
    procs.append(_start_server_process(port, overrides))
    new_client = reverb.Client(address)
    deadline = time.time() + 120
    while True:  # The channel may still be in reconnect back-off.
      try:
        _write(new_client, config, _random_transitions(rng, BATCH - 1),
               [1.0] * (BATCH - 1))
        break
      except RuntimeError:
        if time.time() > deadline:
          raise
        time.sleep(0.2)
    # Batches already in flight before the kill (at most 2) may still be
    # consumed; then, below the minimum size, the learner stays paused.
    time.sleep(1.0)
    stalled_at = learner.num_steps
    assert stalled_at <= paused_at + 2
    time.sleep(1.0)
    # Still paused. Compared with the in-flight allowance, not with
    # `stalled_at`: under load the last in-flight batch may land only now.
    assert learner.num_steps <= paused_at + 2
    _wait_for(lambda: learner.report()['waiting_for_replay'], 60,
              'the learner to report that it waits below the minimum')
    _write(new_client, config, _random_transitions(rng, 1, start=100), [1.0])
    _wait_for(lambda: learner.num_steps >= paused_at + 5, 120,
              'the learner to resume')
    report = learner.report()
    assert not report['waiting_for_replay'] and report['replay_waits'] >= 1
    assert report['items_sampled'] > 0
  finally:
    learner.stop()
    thread.join(timeout=60)
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
  assert not thread.is_alive()
  assert not errors, errors
