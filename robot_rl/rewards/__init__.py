"""Learned rewards: `progress` (VLAC-style progress and done from frames and a goal sentence, with a
small local model), `quality` (how good a progress reward is: VOC, negative share, done F1) and
`success` (the SERL/HIL-SERL image success classifier)."""
