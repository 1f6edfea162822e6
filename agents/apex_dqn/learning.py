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
* Centered RMSProp, TF1-style (eps inside the root, the mean-square slot
  started at 1 by `rms_initial_mean_square`): agents/optimizers.py. With
  eps = 1.5e-7 inside the root the floor on the denominator is
  sqrt(1.5e-7) ~= 3.9e-4.
* Replay restarts (App. F "Failure Tolerance": the replay is refilled and
  the learner waits until the minimum size is reached again):
  agents/replay_feed.py. Priority write-backs that fail (server down, or keys
  of a lost table) are dropped: agents/replay/prioritized.py.
* Checkpoints (online and target networks, optimizer slots, step counter,
  the shared counter's state), the run loop and the parameter service:
  agents/learner_runtime.py.
"""

import time
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import reverb
import sonnet as snt
import tensorflow as tf

from agents import learner_runtime
from agents import optimizers
from agents import replay_feed
from agents.apex_dqn import config as config_lib
from agents.apex_dqn import targets
from agents.replay import prioritized

# Per-update diagnostics computed inside the compiled step (Q scale, |TD|,
# importance weights); the run record averages them over each report period.
DIAGNOSTICS = ('mean_q', 'max_q', 'mean_abs_td_error',
               'importance_weight_min', 'importance_weight_mean',
               'sample_age_mean', 'sample_age_max')
PERIOD_MEAN_METRICS = ('loss', 'gradient_norm', 'mean_priority') + DIAGNOSTICS
# Seconds between the learner's questions to the replay about its counts.
REPLAY_STATS_PERIOD_S = 5.0


class ApeXDQNLearner(learner_runtime.DistributedLearner):
  """The Ape-X DQN learner: Acme-style step()/run()/get_variables()."""

  def __init__(self,
               network: snt.Module,
               target_network: snt.Module,
               dataset: Optional[replay_feed.DatasetLike] = None,
               replay_client: Optional[reverb.Client] = None,
               config: Optional[config_lib.ApeXDQNConfig] = None,
               *,
               make_dataset: Optional[Callable[[], tf.data.Dataset]] = None,
               observation_spec: Optional[tf.TensorSpec] = None,
               retry_period_s: float = 1.0,
               rms_initial_mean_square: float = 1.0,
               input_pipeline_cpus: Optional[Sequence[int]] = None,
               **runtime: Any):
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
      make_dataset: alternative keyword for a dataset factory.
      observation_spec: unbatched observation spec used to create the
        networks' variables; if None it is read from the dataset's
        element_spec (which needs the replay server to answer).
      retry_period_s: pause between sampling attempts while replay is down.
      rms_initial_mean_square: initial value of RMSProp's mean-square slot
        (1, the default: TF1's RMSPropOptimizer; 0: Sonnet's). See the
        module docstring.
      input_pipeline_cpus: cores for the input pipeline (Reverb sampling,
        PNG decoding), None: wherever the learner runs. Sec. 4.1: the learner
        "decompresses data as it prefetches it, in parallel with computing
        and applying gradients" -- on its CPU while its GPU trains. On a
        CPU-only host this keeps decoding off the cores of the update.
      **runtime: counter, logger and checkpoint options
        (learner_runtime.DistributedLearner).
    """
    super().__init__(config or config_lib.ApeXDQNConfig(), replay_client,
                     **runtime)
    self._network = network
    self._target_network = target_network
    self._feed = self._make_feed(
        dataset, make_dataset, retry_period_s,
        on_wait=self._log_wait,
        waiting_for=f'replay (server down or below its minimum size of '
                    f'{self._config.min_replay_size})',
        input_pipeline_cpus=input_pipeline_cpus)
    self._priorities = prioritized.PriorityWriter(
        replay_client, self._config.replay_table_name,
        stop_requested=self._stop_requested, probe=self._feed.probe,
        wait_slice_s=retry_period_s)

    # --- Variables. ---------------------------------------------------------
    if observation_spec is None:
      batched = self._feed.element_spec.data.observation
      observation_spec = tf.TensorSpec(batched.shape[1:], batched.dtype)
    dummy = tf.zeros([1] + list(observation_spec.shape), observation_spec.dtype)
    network(dummy)
    target_network(dummy)
    if len(network.variables) != len(target_network.variables):
      raise ValueError('network and target_network have different variables.')

    c = self._config
    self._optimizer = optimizers.tf1_rmsprop(
        network.trainable_variables, c.learning_rate, decay=c.rmsprop_decay,
        momentum=c.rmsprop_momentum, epsilon=c.rmsprop_epsilon,
        centered=c.rmsprop_centered,
        initial_mean_square=rms_initial_mean_square)
    self._update_target()
    self._set_up_services(
        collections={'policy': lambda: self._network.variables},
        network=network, target_network=target_network,
        optimizer=self._optimizer)

    self._step_fn = tf.function(self._train_step, jit_compile=c.jit_compile)

    self._start_time = time.time()
    self._steps_this_run = 0
    self._last_loss = None
    self._last_grad_norm = None
    self._replay_stats: Dict[str, Any] = {}
    self._replay_stats_time = -float('inf')

  # ---------------------------------------------------------------------------
  # Learning.
  # ---------------------------------------------------------------------------

  def _update_target(self) -> None:
    for src, dst in zip(self._network.variables,
                        self._target_network.variables):
      dst.assign(src)

  def _train_step(self, observation, action, reward, discount,
                  next_observation, probability, table_size, learner_step):
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
      self._update_target()
      return tf.constant(True)

    updated = tf.cond(
        tf.equal(steps % c.target_update_period, 0), copy,
        lambda: tf.constant(False))
    q_taken = tf.gather(q, tf.cast(action, tf.int32), batch_dims=1)
    # Age of the sampled items: updates since the parameters that acted
    # (before this one); items of unknown version (-1) are left out.
    known = tf.cast(learner_step >= 0, tf.float32)
    age = known * tf.cast(steps - 1 - learner_step, tf.float32)
    count = tf.maximum(tf.reduce_sum(known), 1.0)
    return {
        'loss': out.loss,
        'priorities': out.priorities,
        'gradient_norm': grad_norm,
        'target_updated': updated,
        # Diagnostics: the scale of the values, how far the targets are from
        # them, and how strongly prioritization is being corrected for.
        'mean_q': tf.reduce_mean(q_taken),
        'max_q': tf.reduce_max(q),
        'mean_abs_td_error': tf.reduce_mean(tf.abs(out.td_error)),
        'importance_weight_min': tf.reduce_min(weights),
        'importance_weight_mean': tf.reduce_mean(weights),
        'sample_age_mean': tf.reduce_sum(age) / count,
        'sample_age_max': tf.reduce_max(age),
    }

  def _log_wait(self, error: BaseException) -> None:
    del error
    if self._logger is not None:
      self._logger.write({'waiting_for_replay': True,
                          'learner_steps': self.num_steps})

  def step(self) -> Optional[Dict[str, Any]]:
    """One learner update; returns its metrics, or None if stopped first."""
    sample = self._feed.next()
    if sample is None:
      return None
    data, info = sample.data, sample.info
    with self._updating():
      out = self._step_fn(data.observation, data.action, data.reward,
                          data.discount, data.next_observation,
                          info.probability, info.table_size,
                          data.extras['learner_step'])
    priorities = out['priorities'].numpy()
    self._priorities.write(info.key.numpy(), priorities)

    self._steps_this_run += 1
    self._last_loss = float(out['loss'].numpy())
    self._last_grad_norm = float(out['gradient_norm'].numpy())
    metrics = {
        'learner_steps': int(self._num_steps.numpy()),
        'loss': self._last_loss,
        'gradient_norm': self._last_grad_norm,
        'target_updated': bool(out['target_updated'].numpy()),
        'mean_priority': float(np.mean(priorities)),
        'replay_size': int(np.asarray(info.table_size).reshape(-1)[0]),
    }
    for key in DIAGNOSTICS:
      metrics[key] = float(out[key].numpy())
    metrics.update(self._replay_rates())
    self._after_update(metrics)
    return metrics

  def _replay_rates(self) -> Dict[str, Any]:
    """Items inserted and sampled so far, and samples per insert, from the
    server at most every REPLAY_STATS_PERIOD_S (one cheap RPC)."""
    now = time.time()
    if self._client is not None and (
        now - self._replay_stats_time >= REPLAY_STATS_PERIOD_S):
      self._replay_stats_time = now
      try:
        sizes = prioritized.table_sizes(self._client,
                                        self._config.replay_table_name)
      except Exception:  # pylint: disable=broad-except
        return self._replay_stats
      inserted, sampled = sizes['items_inserted'], sizes['items_sampled']
      self._replay_stats = {
          'items_inserted': inserted, 'items_sampled': sampled,
          # Ape-X Sec. 3: the learner's replay ratio; each sampled batch is
          # `batch_size` samples of distinct-or-not items.
          'samples_per_insert': sampled / inserted if inserted else None}
    return self._replay_stats

  def wait_for_priority_writes(self) -> None:
    """Waits for the priority write in flight (tests)."""
    self._priorities.wait()

  @property
  def optimizer(self) -> snt.optimizers.RMSProp:
    return self._optimizer

  def report(self) -> Dict[str, Any]:
    """Learner progress and replay statistics for the supervisor."""
    elapsed = max(time.time() - self._start_time, 1e-9)
    result = {
        'learner_steps': int(self._num_steps.numpy()),
        'learner_steps_this_run': self._steps_this_run,
        'learner_steps_per_s': self._steps_this_run / elapsed,
        'last_loss': self._last_loss,
        'last_gradient_norm': self._last_grad_norm,
        'waiting_for_replay': self._feed.waiting,
        'replay_waits': self._feed.num_waits,
        'priority_write_failures': self._priorities.failures,
    }
    if self._client is not None:
      try:
        result.update(prioritized.table_sizes(
            self._client, self._config.replay_table_name))
      except Exception as e:  # pylint: disable=broad-except
        result['replay_error'] = type(e).__name__
    return result
