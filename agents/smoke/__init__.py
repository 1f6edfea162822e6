"""The smoke agent: the plumbing's own check, not a paper agent.

  builder  SmokeConfig and SmokeBuilder (Catch, one-step Q-learning)
  nodes    SmokeLearner and SmokeActor
"""
