"""Ape-X DQN learner (Sec. 3.1, App. C, App. F of arXiv:1803.00933).

One learner step:
  1. sample a batch of prioritised n-step transitions from Reverb;
  2. double-Q n-step loss, mean_i w_i * 1/2 (G_i - q(S_i, A_i))^2, with
     importance weights w_i = (N P(i))^-beta / max_j w_j
     (targets.double_q_loss, targets.importance_weights);
  3. clip the global gradient norm at 40, centered RMSProp update
     (lr 0.00025/4, decay 0.95, eps 1.5e-7, no momentum; App. C);
  4. every `target_update_period` steps copy online -> target (hard copy);
  5. write the new priorities |delta_i| back to Reverb (outside the compiled
     function, from numpy: `client.mutate_priorities`).
Steps 2-4 are one `tf.function(jit_compile=config.jit_compile)`.

Design notes
------------
* Loss: the batch *mean* of the weighted per-item losses (as targets.py
  documents: Acme/trfl convention, keeps the gradient norm independent of the
  batch size, which matters because the norm is clipped at 40). The paper
  does not say mean or sum.
* Episodes shorter than n: nothing special here. The actor-side
  NStepAccumulator stores the accumulated discount gamma_{t:t+k}, which is 0
  after a termination and gamma^k after a truncation with k < n, so
  G = R + gamma_acc * q_target(...) is already the truncated return.
* Centered RMSProp: `snt.optimizers.RMSProp(..., centered=True)` computes
      ms  <- decay ms + (1 - decay) g^2
      mg  <- decay mg + (1 - decay) g
      mom <- momentum mom + lr g / sqrt(ms - mg^2 + eps)
      theta <- theta - mom
  i.e. eps is added INSIDE the square root, exactly where TF1's
  `tf.compat.v1.train.RMSPropOptimizer` (ApplyCenteredRMSProp) puts it, and
  unlike Keras/PyTorch-style `g / (sqrt(v) + eps)`. With eps = 1.5e-7 inside
  the root the floor on the denominator is sqrt(1.5e-7) ~= 3.9e-4.
  One difference remains: TF1 initialises the mean-square slot `ms` to ONES,
  Sonnet to zeros. With zeros the first updates are ~lr / sqrt(1 - decay)
  ~= 4.5 lr per coordinate (sign-like); with ones they start at ~lr * |g|.
  The paper does not say which; its implementation (TensorFlow, 2018, App. F)
  predates TF2, so `rms_initial_mean_square` defaults to 1.0, TF1's; 0.0
  gives Sonnet's.
* Replay restart tolerance (App. F "Failure Tolerance": if the replay server
  restarts it is refilled and the learner waits until the minimum size is
  reached again): the learner owns a dataset *factory*. Sampling errors
  (server gone: Unavailable/Cancelled/...; below the minimum: the rate
  limiter's timeout ends the dataset, OutOfRange/StopIteration/
  DeadlineExceeded) make the learner log that it waits, sleep
  `retry_period_s`, probe the server with a bounded `server_info` call and
  rebuild the iterator. It resumes as soon as a batch arrives. Waiting never
  blocks a stop request longer than about max(retry_period_s,
  rate_limiter_timeout): the stop is checked between attempts.
  Priority write-backs that fail (server down, or keys of a lost table) are
  logged and dropped: the items they refer to are gone with the old server.
* Checkpointing: a tf.train.Checkpoint of online network, target network,
  optimizer slots, the learner step counter and (for counters with
  save()/restore(), e.g. acme's Counter) the counter's state as JSON. The
  constructor restores the latest checkpoint in `checkpoint_dir`, `run()`
  saves every `checkpoint_period_s` and on exit; 3 checkpoints are kept.
"""

import os
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from absl import logging
import numpy as np
import reverb
import sonnet as snt
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import targets
from agents import node_runtime

DatasetLike = Union[tf.data.Dataset, Iterator[reverb.ReplaySample],
                    Callable[[], tf.data.Dataset]]


class ApeXDQNLearner:
  """The Ape-X DQN learner: Acme-style step()/run()/get_variables()."""

  def __init__(self,
               network: snt.Module,
               target_network: snt.Module,
               dataset: Optional[DatasetLike] = None,
               replay_client: Optional[reverb.Client] = None,
               config: Optional[config_lib.ApeXDQNConfig] = None,
               counter: Any = None,
               logger: Any = None,
               checkpoint_dir: Optional[str] = None,
               *,
               make_dataset: Optional[Callable[[], tf.data.Dataset]] = None,
               observation_spec: Optional[tf.TensorSpec] = None,
               checkpoint_period_s: float = 600.0,
               max_checkpoints_to_keep: int = 3,
               retry_period_s: float = 1.0,
               rms_initial_mean_square: float = 1.0,
               input_pipeline_cpus: Optional[Sequence[int]] = None):
    """Builds the learner, its optimizer and (if any) restores a checkpoint.

    Args:
      network: online Q-network, observations [B, ...] -> Q-values [B, A].
      target_network: a module of the same structure; overwritten with the
        online parameters at construction (unless a checkpoint restores it).
      dataset: batches of `reverb.ReplaySample` (replay.make_dataset); a
        tf.data.Dataset (re-iterated after errors), a factory returning one
        (preferred: rebuilt after errors), or a bare iterator (cannot be
        rebuilt: errors propagate).
      replay_client: reverb.Client for priority updates and report().
      config: ApeXDQNConfig (defaults to the paper's).
      counter: acme counting.Counter-like (increment/get_counts), optional.
      logger: anything with write(dict), optional; written every step.
      checkpoint_dir: where to save/restore; None disables checkpointing.
      make_dataset: alternative keyword for a dataset factory.
      observation_spec: unbatched observation spec used to create the
        networks' variables; if None it is read from the dataset's
        element_spec (which needs the replay server to answer).
      checkpoint_period_s: seconds between saves in run().
      max_checkpoints_to_keep: checkpoints kept in checkpoint_dir.
      retry_period_s: pause between sampling attempts while replay is down.
      rms_initial_mean_square: initial value of RMSProp's mean-square slot
        (1, the default: TF1's RMSPropOptimizer; 0: Sonnet's). See the
        module docstring.
      input_pipeline_cpus: cores for the input pipeline (Reverb sampling,
        PNG decoding), None: wherever the learner runs. Sec. 4.1: the learner
        "decompresses data as it prefetches it, in parallel with computing
        and applying gradients" -- on its CPU while its GPU trains. On a
        CPU-only host this keeps decoding off the cores of the update.
    """
    self._config = config or config_lib.ApeXDQNConfig()
    self._config.validate()
    self._input_pipeline_cpus = (set(input_pipeline_cpus)
                                 if input_pipeline_cpus else None)
    self._priority_write = None
    self._network = network
    self._target_network = target_network
    self._client = replay_client
    self._counter = counter
    self._counter_increments = node_runtime.BackgroundIncrements(counter)
    self._logger = logger
    self._checkpoint_period_s = float(checkpoint_period_s)
    self._retry_period_s = float(retry_period_s)
    self._stop_event = threading.Event()

    # --- Data source. -------------------------------------------------------
    if make_dataset is not None and dataset is not None:
      raise ValueError('Pass either `dataset` or `make_dataset`, not both.')
    source = make_dataset if make_dataset is not None else dataset
    if source is None:
      raise ValueError('A dataset, dataset iterator or dataset factory is '
                       'required.')
    if isinstance(source, tf.data.Dataset):
      self._make_dataset = lambda: source
    elif callable(source) and not hasattr(source, '__next__'):
      self._make_dataset = source
    else:
      self._make_dataset = None
    self._iterator = None if self._make_dataset else source

    # --- Variables. ---------------------------------------------------------
    if observation_spec is None:
      if self._iterator is not None and hasattr(self._iterator,
                                                'element_spec'):
        element_spec = self._iterator.element_spec
      else:
        first = self._make_dataset()
        element_spec = first.element_spec
        # Keep the dataset we already built for the first iterator.
        self._pending_dataset = first
      batched = element_spec.data.observation
      observation_spec = tf.TensorSpec(batched.shape[1:], batched.dtype)
    self._observation_spec = observation_spec
    dummy = tf.zeros([1] + list(observation_spec.shape), observation_spec.dtype)
    network(dummy)
    target_network(dummy)
    if len(network.variables) != len(target_network.variables):
      raise ValueError('network and target_network have different variables.')

    c = self._config
    self._optimizer = snt.optimizers.RMSProp(
        learning_rate=c.learning_rate,
        decay=c.rmsprop_decay,
        momentum=c.rmsprop_momentum,
        epsilon=c.rmsprop_epsilon,
        centered=c.rmsprop_centered)
    # Create the optimizer slots eagerly (not inside the compiled step): a
    # zero update leaves parameters and slots at their initial values.
    params = network.trainable_variables
    self._optimizer.apply([tf.zeros_like(v) for v in params], params)
    if rms_initial_mean_square:
      for ms in self._optimizer.ms:
        ms.assign(tf.fill(ms.shape, tf.cast(rms_initial_mean_square,
                                            ms.dtype)))
    self._num_steps = tf.Variable(0, dtype=tf.int64, name='learner_steps',
                                  trainable=False)
    self._counter_state = tf.Variable('', dtype=tf.string,
                                      name='counter_state', trainable=False)
    self._update_target()

    # --- Checkpointing. -----------------------------------------------------
    self._checkpoint = tf.train.Checkpoint(
        network=network, target_network=target_network,
        optimizer=self._optimizer, num_steps=self._num_steps,
        counter_state=self._counter_state)
    self._manager = None
    self.restored_from = None
    if checkpoint_dir:
      self._manager = tf.train.CheckpointManager(
          self._checkpoint, checkpoint_dir, max_to_keep=max_checkpoints_to_keep)
      if self._manager.latest_checkpoint:
        self.restore(self._manager.latest_checkpoint)

    # --- The compiled step. -------------------------------------------------
    self._step_fn = tf.function(self._train_step, jit_compile=c.jit_compile)

    self._start_time = time.time()
    self._steps_this_run = 0
    self._last_loss = None
    self._last_grad_norm = None
    self._waiting = False
    self._num_waits = 0
    self._priority_write_failures = 0
    self._last_checkpoint_time = time.time()
    self._pending_fetch = None

  # ---------------------------------------------------------------------------
  # Learning.
  # ---------------------------------------------------------------------------

  def _update_target(self) -> None:
    for src, dst in zip(self._network.variables,
                        self._target_network.variables):
      dst.assign(src)

  def _train_step(self, observation, action, reward, discount,
                  next_observation, probability, table_size):
    """Loss, clipped centered-RMSProp update, periodic target copy."""
    c = self._config
    weights = targets.importance_weights(probability, table_size,
                                         c.importance_sampling_exponent)
    params = self._network.trainable_variables
    with tf.GradientTape() as tape:
      q = self._network(observation)
      q_next_online = self._network(next_observation)
      q_next_target = self._target_network(next_observation)
      out = targets.double_q_loss(q, action, reward, discount, q_next_online,
                                  q_next_target, weights=weights)
    grads = tape.gradient(out.loss, params)
    clipped, grad_norm = tf.clip_by_global_norm(grads, c.max_gradient_norm)
    self._optimizer.apply(clipped, params)
    steps = self._num_steps.assign_add(1)

    def copy():
      for src, dst in zip(self._network.variables,
                          self._target_network.variables):
        dst.assign(src)
      return tf.constant(True)

    updated = tf.cond(
        tf.equal(steps % c.target_update_period, 0), copy,
        lambda: tf.constant(False))
    return {
        'loss': out.loss,
        'priorities': out.priorities,
        'gradient_norm': grad_norm,
        'target_updated': updated,
    }

  def _stop_requested(self) -> bool:
    return self._stop_event.is_set() or node_runtime.launchpad_stop_requested()

  def stop(self) -> None:
    """Asks step()/run() to return (used from other threads, e.g. tests)."""
    self._stop_event.set()

  def _new_iterator(self):
    if self._client is not None:
      # Bounded probe: from_table_signature would otherwise block forever on
      # a server that is down.
      self._client.server_info(timeout=max(1, int(self._retry_period_s)))
    dataset = getattr(self, '_pending_dataset', None)
    self._pending_dataset = None
    if dataset is None:
      dataset = self._make_dataset()
    return iter(dataset)

  def _fetch(self):
    """next(iterator) on a daemon thread, so a hung stream cannot hang us.

    Reverb's sampler retries while its server is unreachable, so a bare
    next() can block for as long as the replay is down; the learner instead
    waits on the fetch in slices of `retry_period_s`, checking for a stop
    and probing the server in between. A fetch abandoned by a stop is kept
    and collected by the next call.
    """
    if self._pending_fetch is None:
      box = {}
      done = threading.Event()
      iterator = self._iterator

      def fetch():
        if self._input_pipeline_cpus:
          # Threads inherit their creator's CPU mask: the input pipeline's
          # threads, started by the first next(), run where this one does.
          os.sched_setaffinity(0, self._input_pipeline_cpus)
        try:
          box['sample'] = next(iterator)
        except BaseException as e:  # pylint: disable=broad-except
          box['error'] = e
        done.set()

      threading.Thread(target=fetch, daemon=True,
                       name='apex_learner_fetch').start()
      self._pending_fetch = (box, done)
    box, done = self._pending_fetch
    while not done.wait(self._retry_period_s):
      if self._stop_requested():
        return None
      self._probe()
    self._pending_fetch = None
    if 'error' in box:
      raise box['error']
    return box['sample']

  def _start_waiting(self, error: BaseException) -> None:
    if self._waiting:
      return
    self._waiting = True
    self._num_waits += 1
    self._wait_start = time.time()
    message = str(error).splitlines()[0] if str(error) else ''
    logging.warning(
        'Learner waits for replay (server down or below its minimum size of '
        '%d): %s: %s', self._config.min_replay_size, type(error).__name__,
        message)
    if self._logger is not None:
      self._logger.write({'waiting_for_replay': True,
                          'learner_steps': int(self._num_steps.numpy())})

  def _next_sample(self) -> Optional[reverb.ReplaySample]:
    """Next batch, waiting (and rebuilding the iterator) while replay is down.

    Returns None if a stop was requested while waiting.
    """
    while True:
      try:
        if self._iterator is None:
          self._iterator = self._new_iterator()
        sample = self._fetch()
        if sample is None:
          return None  # Stop requested.
        if self._waiting:
          logging.info('Replay is back after %.1f s: learner resumes at '
                       'step %d.', time.time() - self._wait_start,
                       int(self._num_steps.numpy()))
          self._waiting = False
        return sample
      except node_runtime.RETRYABLE_REPLAY_ERRORS as e:  # pylint: disable=catching-non-exception
        if self._make_dataset is None:
          raise
        self._iterator = None
        self._start_waiting(e)
      if self._stop_requested():
        return None
      time.sleep(self._retry_period_s)
      if self._stop_requested():
        return None

  def step(self) -> Optional[Dict[str, Any]]:
    """One learner update; returns its metrics, or None if stopped first."""
    sample = self._next_sample()
    if sample is None:
      return None
    data, info = sample.data, sample.info
    out = self._step_fn(data.observation, data.action, data.reward,
                        data.discount, data.next_observation,
                        info.probability, info.table_size)
    priorities = out['priorities'].numpy()
    self._write_priorities(info.key.numpy(), priorities)

    self._steps_this_run += 1
    self._last_loss = float(out['loss'].numpy())
    self._last_grad_norm = float(out['gradient_norm'].numpy())
    if self._counter is not None:
      self._counter_increments.increment(learner_steps=1)
    metrics = {
        'learner_steps': int(self._num_steps.numpy()),
        'loss': self._last_loss,
        'gradient_norm': self._last_grad_norm,
        'target_updated': bool(out['target_updated'].numpy()),
        'mean_priority': float(np.mean(priorities)),
    }
    if self._logger is not None:
      self._logger.write(metrics)
    return metrics

  def _write_priorities(self, keys: np.ndarray, priorities: np.ndarray):
    """Writes step k's new priorities before step k+1 (on a watched thread).

    Overlapping the write with the next step was tried and measured: no gain
    here (272 -> 274 samples/s); while it was on, the two-state learning test
    once ended in NaN (cause not established), so the write stays in step.
    """
    if self._client is None:
      return
    self.wait_for_priority_writes()
    updates = {int(k): float(p) for k, p in zip(keys, priorities)}
    box = {}
    done = threading.Event()
    client, table = self._client, self._config.replay_table_name

    def write():
      try:
        client.mutate_priorities(table, updates=updates)
      except BaseException as e:  # pylint: disable=broad-except
        box['error'] = e
      done.set()

    threading.Thread(target=write, daemon=True,
                     name='apex_learner_priorities').start()
    self._priority_write = (box, done)
    self.wait_for_priority_writes()

  def wait_for_priority_writes(self) -> None:
    """Waits for the write in flight; mutate_priorities has no timeout and
    blocks while the server is down (gRPC waits for it to come back, then
    unknown keys are ignored), so the learner waits in slices, checking for
    a stop and reporting that it waits."""
    if self._priority_write is None:
      return
    box, done = self._priority_write
    while not done.wait(self._retry_period_s):
      if self._stop_requested():
        return
      self._probe()
    self._priority_write = None
    if 'error' in box:
      # The server went away with the items these priorities belong to.
      self._priority_write_failures += 1
      logging.warning('Priority write-back failed (%s); dropped.',
                      type(box['error']).__name__)

  def _probe(self) -> None:
    """Marks the learner as waiting if the replay server does not answer."""
    if self._client is None or self._waiting:
      return
    try:
      self._client.server_info(timeout=max(1, int(self._retry_period_s)))
    except Exception as e:  # pylint: disable=broad-except
      self._start_waiting(e)

  def run(self, num_steps: Optional[int] = None) -> None:
    """Steps until a stop (Launchpad or stop()) or `num_steps` steps."""
    node_runtime.run_steps(
        self.step, self._stop_requested,
        checkpoint_due=lambda: (time.time() - self._last_checkpoint_time
                                >= self._checkpoint_period_s),
        save=self.save if self._manager is not None else None,
        num_steps=num_steps)

  # ---------------------------------------------------------------------------
  # Variables, checkpoints, reporting.
  # ---------------------------------------------------------------------------

  def get_variables(self, names: Sequence[str]) -> List[List[np.ndarray]]:
    sources = {
        'policy': lambda: self._network.variables,
        'target': lambda: self._target_network.variables,
        'version': lambda: [self._num_steps],
    }
    return [[np.asarray(v.numpy()) for v in sources[name]()] for name in names]

  @property
  def num_steps(self) -> int:
    return int(self._num_steps.numpy())

  @property
  def optimizer(self) -> snt.optimizers.RMSProp:
    return self._optimizer

  def save(self) -> Optional[str]:
    """Writes a checkpoint (keeps the latest 3); returns its path."""
    if self._manager is None:
      return None
    state = node_runtime.counter_state_json(self._counter,
                                            self._counter_increments)
    if state is not None:
      self._counter_state.assign(state)
    path = self._manager.save(checkpoint_number=self._num_steps)
    self._last_checkpoint_time = time.time()
    logging.info('Learner checkpoint at step %d: %s',
                 int(self._num_steps.numpy()), path)
    return path

  def restore(self, path: Optional[str] = None) -> None:
    """Restores `path` (default: latest in checkpoint_dir)."""
    if path is None:
      if self._manager is None or not self._manager.latest_checkpoint:
        raise ValueError('No checkpoint to restore.')
      path = self._manager.latest_checkpoint
    self._checkpoint.restore(path).assert_existing_objects_matched()
    node_runtime.restore_counter(self._counter,
                                 self._counter_state.numpy().decode())
    self.restored_from = path
    logging.info('Learner restored from %s at step %d.', path,
                 int(self._num_steps.numpy()))

  def report(self) -> Dict[str, Any]:
    """Learner progress and replay statistics for the supervisor."""
    elapsed = max(time.time() - self._start_time, 1e-9)
    result = {
        'learner_steps': int(self._num_steps.numpy()),
        'learner_steps_this_run': self._steps_this_run,
        'learner_steps_per_s': self._steps_this_run / elapsed,
        'last_loss': self._last_loss,
        'last_gradient_norm': self._last_grad_norm,
        'waiting_for_replay': self._waiting,
        'replay_waits': self._num_waits,
        'priority_write_failures': self._priority_write_failures,
    }
    if self._client is not None:
      try:
        info = self._client.server_info(timeout=5)[
            self._config.replay_table_name]
        limiter = info.rate_limiter_info
        result.update({
            'replay_size': int(info.current_size),
            'items_inserted': int(limiter.insert_stats.completed),
            'items_sampled': int(limiter.sample_stats.completed),
        })
      except Exception as e:  # pylint: disable=broad-except
        result['replay_error'] = type(e).__name__
    return result
