"""The payload kinds of the actor<->learner protocol: the `kind` a codec payload carries, and what
its arrays and meta hold. Decoders name the kind they expect (`codec.decode(expect_kind=...)`), so a
payload of one kind is never read as another."""

TRANSITIONS = "transitions"
"""Actor -> learner on `rl/transitions`: a batch in the transition layout (layout.py); meta: actor id,
sequence number, step counters."""
POLICY = "policy"
"""SAC learner -> actors on `rl/policy`: the actor network's state dict; meta: policy version."""
ACK = "ack"
"""Learner -> actor on `rl/acks`: `seqs`, the sequence numbers stored; meta: actor id."""
PPO_POLICY = "ppo_policy"
"""PPO learner -> juggling actor on `rl/policy`: the deployable tensors (actor and observation
normalizer); meta: the policy's card (ppo_policy.py)."""
