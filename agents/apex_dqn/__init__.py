"""Ape-X DQN (Horgan et al., ICLR 2018, arXiv:1803.00933): building blocks.

Kept import-free on purpose: importing `agents.apex_dqn` must not pull in
TensorFlow or Reverb, so configs and launch scripts stay cheap to import.
Import submodules explicitly:

  config   ApeXDQNConfig (every paper value cited), actor_epsilons
  targets  n-step accumulation, double-Q targets, loss, priorities, IS weights
  replay   Reverb table(s), transition signature, writer and dataset helpers
"""
