"""PPO's deployable policy as a codec payload of kind `PPO_POLICY`: the arrays are the actor's
tensors and its observation normalizer, the meta is the policy's card (both from
`agents.ppo.deployable`, what `export_policy` writes to disk). The ppo_learner node publishes it on
`rl/policy`, signed with the run's secret when it has a run directory; the juggling actor flies it."""

from __future__ import annotations

from typing import Any

from robot_rl.agents.ppo import ActorCritic, DeployedPolicy, deployable
from robot_rl.transport import codec
from robot_rl.transport.kinds import PPO_POLICY


def encode_ppo_policy(actor_critic: ActorCritic, card: dict[str, Any], key: bytes | None = None) -> bytes:
    tensors, full_card = deployable(actor_critic, card)
    return codec.encode(PPO_POLICY, codec.state_dict_to_arrays(tensors), full_card, key=key)


def decode_ppo_policy(data: Any, key: bytes | None = None, device: str = "cpu") -> DeployedPolicy:
    """The policy in a payload (any bytes-like object). With `key`, only a payload signed with it is
    accepted. Raises ValueError (`codec.PayloadError` for a malformed, unsigned or forged payload)."""
    payload = codec.decode(data, expect_kind=PPO_POLICY, key=key)
    return DeployedPolicy.from_tensors(codec.arrays_to_state_dict(payload.arrays), payload.meta, device,
                                       f"{PPO_POLICY} payload")
