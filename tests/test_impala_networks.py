"""IMPALA networks: shapes, parameter counts from the paper, LSTM resets.

Parameter counts are recomputed here from the architecture as the appendix
describes it (IMPALA Figure 3 and its appendix description), with the
conv output sizes derived by hand, so a wrong padding, pooling or layer size
in networks/impala.py changes the count and fails the test.
"""

import numpy as np
import pytest
import tensorflow as tf
import tree

from networks import impala

ATARI_SHAPE = (84, 84, 4)


def conv(kernel, c_in, c_out):
  return kernel * kernel * c_in * c_out + c_out


def linear(n_in, n_out):
  return n_in * n_out + n_out


def lstm(n_in, hidden):
  # Sonnet LSTM: input and recurrent weights for 4 gates, one bias per gate.
  return 4 * hidden * (n_in + hidden) + 4 * hidden


def heads(n_in, num_actions):
  return linear(n_in, num_actions) + linear(n_in, 1)


def valid(size, kernel, stride):
  return (size - kernel) // stride + 1


def shallow_torso_params(channels=4, size=84):
  # Figure 3 left / A3C: 16 8x8/4, 32 4x4/2, VALID, FC 256.
  side = valid(valid(size, 8, 4), 4, 2)
  assert side == 9
  return conv(8, channels, 16) + conv(4, 16, 32) + linear(side * side * 32,
                                                          256)


def nature_torso_params(channels=4, size=84):
  side = valid(valid(valid(size, 8, 4), 4, 2), 3, 1)
  assert side == 7
  return (conv(8, channels, 32) + conv(4, 32, 64) + conv(3, 64, 64) +
          linear(side * side * 64, 256))


def deep_torso_params(channels=4, size=84):
  # Three sections (16, 32, 32): conv 3x3, max-pool 3x3/2 SAME, 2 residual
  # blocks of two 3x3 convs; FC 256 on the flattened output.
  total, c_in, side = 0, channels, size
  for c_out in (16, 32, 32):
    total += conv(3, c_in, c_out) + 4 * conv(3, c_out, c_out)
    side = -(-side // 2)  # SAME pooling with stride 2: ceil.
    c_in = c_out
  assert side == 11  # 84 -> 42 -> 21 -> 11: 3872 features.
  return total + linear(side * side * 32, 256)


def count(network):
  return sum(int(np.prod(v.shape)) for v in network.trainable_variables)


def build(network, shape=ATARI_SHAPE, dtype=tf.uint8):
  impala.create_variables(network, tf.TensorSpec(shape, dtype))
  return network


@pytest.mark.parametrize('kind,variant,torso', [
    ('shallow', 'a3c', shallow_torso_params),
    ('shallow', 'nature', nature_torso_params),
    ('deep', 'a3c', deep_torso_params),
])
@pytest.mark.parametrize('use_lstm', [False, True])
@pytest.mark.parametrize('num_actions', [6, 18])
def test_parameter_counts_match_the_architecture(kind, variant, torso,
                                                 use_lstm, num_actions):
  network = build(impala.make_network(num_actions, kind, use_lstm=use_lstm,
                                      shallow_variant=variant))
  expected = torso()
  if use_lstm:
    # LSTM input: torso output, one-hot last action, clipped last reward.
    expected += lstm(256 + num_actions + 1, 256) + heads(256, num_actions)
  else:
    expected += heads(256, num_actions)
  assert count(network) == expected


def test_paper_sized_models_with_lstm():
  """Figure 3's caption: about 1.2M (shallow) and 1.6M (deep) parameters.

  The caption counts the DMLab models (72x96 RGB, 9 actions, a language
  LSTM); on Atari frames with the LSTM our counts land on the same figures.
  """
  shallow = count(build(impala.make_network(9, 'shallow', use_lstm=True)))
  deep = count(build(impala.make_network(9, 'deep', use_lstm=True)))
  assert round(shallow / 1e6, 1) == 1.2
  assert round(deep / 1e6, 1) == 1.6


@pytest.mark.parametrize('kind', ['shallow', 'deep'])
@pytest.mark.parametrize('use_lstm', [False, True])
def test_output_shapes(kind, use_lstm):
  network = build(impala.make_network(6, kind, use_lstm=use_lstm))
  batch, time_steps = 3, 4
  rng = np.random.default_rng(0)
  step_inputs = impala.ImpalaInputs(
      observation=rng.integers(0, 256, (batch,) + ATARI_SHAPE, np.uint8),
      first=np.array([True, False, False]),
      last_action=np.array([0, 5, 2], np.int32),
      last_reward=np.array([0.0, 1.5, -3.0], np.float32))
  state = network.initial_state(batch)
  outputs, next_state = network(step_inputs, state)
  assert outputs.policy_logits.shape == (batch, 6)
  assert outputs.baseline.shape == (batch,)
  if use_lstm:
    assert next_state.hidden.shape == (batch, 256)
    assert next_state.cell.shape == (batch, 256)
  else:
    assert state == () and next_state == ()

  unroll_inputs = impala.ImpalaInputs(
      observation=rng.integers(0, 256, (time_steps, batch) + ATARI_SHAPE,
                               np.uint8),
      first=np.zeros((time_steps, batch), bool),
      last_action=np.zeros((time_steps, batch), np.int32),
      last_reward=np.zeros((time_steps, batch), np.float32))
  outputs, _ = network.unroll(unroll_inputs, state)
  assert outputs.policy_logits.shape == (time_steps, batch, 6)
  assert outputs.baseline.shape == (time_steps, batch)


@pytest.mark.parametrize('kind', ['shallow', 'deep'])
def test_uint8_frames_are_scaled_to_unit_interval(kind):
  network = build(impala.make_network(4, kind))
  frames = np.random.default_rng(1).integers(0, 256, (2,) + ATARI_SHAPE,
                                             np.uint8)
  extra = (np.zeros(2, bool), np.zeros(2, np.int32), np.zeros(2, np.float32))
  from_uint8, _ = network(impala.ImpalaInputs(frames, *extra))
  from_float, _ = network(
      impala.ImpalaInputs(frames.astype(np.float32) / 255.0, *extra))
  np.testing.assert_allclose(from_uint8.policy_logits,
                             from_float.policy_logits, rtol=1e-5, atol=1e-5)
  with pytest.raises(TypeError, match='uint8'):
    network(impala.ImpalaInputs(frames.astype(np.int32), *extra))


def _random_sequence(rng, time_steps, batch, features, num_actions, first):
  return impala.ImpalaInputs(
      observation=rng.normal(size=(time_steps, batch, features)).astype(
          np.float32),
      first=first,
      last_action=rng.integers(0, num_actions, (time_steps, batch)).astype(
          np.int32),
      last_reward=rng.normal(scale=2.0, size=(time_steps, batch)).astype(
          np.float32))


def test_lstm_unroll_equals_step_by_step_calls_with_resets():
  num_actions, batch, time_steps, features = 3, 3, 7, 5
  network = impala.make_network(num_actions, 'mlp', use_lstm=True,
                                lstm_size=8, mlp_sizes=(16,))
  build(network, (features,), tf.float32)
  rng = np.random.default_rng(2)
  first = np.zeros((time_steps, batch), bool)
  first[0, 0] = first[3, 0] = first[4, 1] = first[6, 2] = True
  inputs = _random_sequence(rng, time_steps, batch, features, num_actions,
                            first)
  # A non-zero starting state, as a learner gets from an actor mid-episode.
  state = tree.map_structure(
      lambda x: tf.constant(rng.normal(size=x.shape).astype(np.float32)),
      network.initial_state(batch))

  unrolled, final_state = network.unroll(inputs, state)

  stepped_logits, stepped_values = [], []
  step_state = state
  for t in range(time_steps):
    out, step_state = network(
        tree.map_structure(lambda x, t=t: x[t], inputs), step_state)
    stepped_logits.append(out.policy_logits)
    stepped_values.append(out.baseline)
  np.testing.assert_allclose(unrolled.policy_logits, np.stack(stepped_logits),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(unrolled.baseline, np.stack(stepped_values),
                             rtol=1e-5, atol=1e-5)
  tree.map_structure(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
      final_state, step_state)


def test_lstm_state_and_last_inputs_reset_at_episode_starts():
  """From a first step on, nothing before it can matter."""
  num_actions, batch, time_steps, features = 3, 2, 6, 5
  network = impala.make_network(num_actions, 'mlp', use_lstm=True,
                                lstm_size=8, mlp_sizes=(16,))
  build(network, (features,), tf.float32)
  rng = np.random.default_rng(3)
  reset_at = 2
  first = np.zeros((time_steps, batch), bool)
  first[reset_at] = True
  inputs = _random_sequence(rng, time_steps, batch, features, num_actions,
                            first)
  state = tree.map_structure(
      lambda x: tf.constant(rng.normal(size=x.shape).astype(np.float32)),
      network.initial_state(batch))
  full, _ = network.unroll(inputs, state)

  # Different history before the reset, and different last action / reward
  # at the reset step itself: the outputs from the reset on are unchanged.
  other = _random_sequence(rng, time_steps, batch, features, num_actions,
                           first)
  spliced = tree.map_structure(
      lambda a, b: np.concatenate([b[:reset_at], a[reset_at:]]), inputs,
      other)
  spliced = spliced._replace(
      last_action=np.where(first, (inputs.last_action + 1) % num_actions,
                           spliced.last_action),
      last_reward=np.where(first, inputs.last_reward + 5.0,
                           spliced.last_reward))
  changed, _ = network.unroll(spliced, network.initial_state(batch))
  np.testing.assert_allclose(full.policy_logits[reset_at:],
                             changed.policy_logits[reset_at:], rtol=1e-5,
                             atol=1e-5)
  # And the reset state is the zero state: equal to a fresh start there.
  fresh = tree.map_structure(lambda x: x[reset_at:], inputs)
  fresh_out, _ = network.unroll(fresh, network.initial_state(batch))
  np.testing.assert_allclose(full.baseline[reset_at:], fresh_out.baseline,
                             rtol=1e-5, atol=1e-5)
  # Before the reset the history does matter (the check above is not vacuous).
  assert not np.allclose(full.baseline[:reset_at],
                         changed.baseline[:reset_at])


def test_feed_forward_network_ignores_last_action_and_reward():
  network = impala.make_network(3, 'mlp', mlp_sizes=(16,))
  build(network, (5,), tf.float32)
  rng = np.random.default_rng(4)
  inputs = _random_sequence(rng, 4, 2, 5, 3, np.zeros((4, 2), bool))
  a, _ = network.unroll(inputs, ())
  b, _ = network.unroll(
      inputs._replace(last_action=(inputs.last_action + 1) % 3,
                      last_reward=inputs.last_reward * 7.0), ())
  np.testing.assert_allclose(a.policy_logits, b.policy_logits)


def test_unroll_compiles_with_xla_and_matches_eager():
  network = impala.make_network(4, 'deep', use_lstm=True)
  build(network)
  rng = np.random.default_rng(5)
  first = np.zeros((3, 2), bool)
  first[1, 1] = True
  inputs = impala.ImpalaInputs(
      observation=rng.integers(0, 256, (3, 2) + ATARI_SHAPE, np.uint8),
      first=first, last_action=np.ones((3, 2), np.int32),
      last_reward=np.ones((3, 2), np.float32))
  state = network.initial_state(2)
  eager, _ = network.unroll(inputs, state)
  compiled, _ = tf.function(network.unroll, jit_compile=True)(inputs, state)
  np.testing.assert_allclose(eager.policy_logits, compiled.policy_logits,
                             rtol=1e-4, atol=1e-4)


def test_bad_names_list_the_valid_choices():
  with pytest.raises(ValueError, match="'shallow', 'deep', 'mlp'|shallow, "
                     'deep, mlp'):
    impala.make_network(4, 'resnet')
  with pytest.raises(ValueError, match='a3c, nature'):
    impala.make_network(4, 'shallow', shallow_variant='alexnet')
  with pytest.raises(ValueError, match='num_actions'):
    impala.make_network(0, 'deep')


def test_core_state_spec():
  assert impala.core_state_spec(impala.make_network(3, 'mlp')) == ()
  spec = impala.core_state_spec(
      impala.make_network(3, 'mlp', use_lstm=True, lstm_size=8))
  assert spec.hidden.shape == (8,) and spec.cell.shape == (8,)
