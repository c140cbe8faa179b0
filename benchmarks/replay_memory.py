"""Replay memory per transition with two 128x128 RGB cameras: frames stored once vs (obs, next_obs).

Fills both buffers with 100-step episodes (HIL-SERL's episode length) and measures resident
memory actually committed (RSS growth) per stored transition, relative to the raw bytes of ONE
observation's frames (2 x 128 x 128 x 3 = 98,304 B). Target: overhead_ratio <= 1.1.

    python benchmarks/replay_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource

import numpy as np

from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import ReplayBuffer

CAMERAS = {"front": (128, 128, 3), "wrist": (128, 128, 3)}
RAW = sum(int(np.prod(s)) for s in CAMERAS.values())
STATE, ACTION, EPISODE = 33, 7, 100


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def observations(n: int, rng: np.random.Generator):
    """A stream of distinct observations (random frames: nothing deduplicates by accident)."""
    for t in range(n + 1):
        yield {"front": rng.integers(0, 255, CAMERAS["front"], np.uint8),
               "wrist": rng.integers(0, 255, CAMERAS["wrist"], np.uint8),
               "state": np.full(STATE, t, np.float32)}


def fill_frames(n: int) -> float:
    gc.collect()
    before = rss_bytes()
    slots = n + n // EPISODE + 1
    buf = FrameReplayBuffer(slots, CAMERAS, STATE, ACTION)
    stream = observations(n, np.random.default_rng(0))
    obs = next(stream)
    for t in range(n):
        nxt = next(stream)
        buf.add(obs, np.zeros(ACTION, np.float32), 0.0, nxt, False, (t + 1) % EPISODE == 0)
        obs = nxt
    assert len(buf) == n, (len(buf), n)
    per = (rss_bytes() - before) / n
    del buf
    return per


def fill_pairs(n: int) -> float:
    """Reference: the common layout, obs and next_obs frames both stored (uint8)."""
    gc.collect()
    before = rss_bytes()
    layout = {f"{p}{k}": (s, np.dtype(np.uint8)) for p in ("", "next_") for k, s in CAMERAS.items()}
    layout.update({"state": ((STATE,), np.dtype(np.float32)), "next_state": ((STATE,), np.dtype(np.float32)),
                   "action": ((ACTION,), np.dtype(np.float32)), "reward": ((), np.dtype(np.float32)),
                   "terminated": ((), np.dtype(bool)), "truncated": ((), np.dtype(bool))})
    buf = ReplayBuffer(n, layout)
    stream = observations(n, np.random.default_rng(0))
    obs = next(stream)
    for t in range(n):
        nxt = next(stream)
        buf.add_batch({"front": obs["front"][None], "wrist": obs["wrist"][None], "next_front": nxt["front"][None],
                       "next_wrist": nxt["wrist"][None], "state": obs["state"][None], "next_state": nxt["state"][None],
                       "action": np.zeros((1, ACTION), np.float32), "reward": np.zeros(1, np.float32),
                       "terminated": np.zeros(1, bool), "truncated": np.array([(t + 1) % EPISODE == 0])})
        obs = nxt
    per = (rss_bytes() - before) / n
    del buf
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 transitions instead of 20,000")
    args = parser.parse_args()
    n = 2_000 if args.quick else 20_000
    ours = fill_frames(n)
    reference = fill_pairs(n)
    result = {
        "transitions": n, "bytes_per_transition": round(ours), "reference_bytes_per_transition": round(reference),
        "raw_observation_bytes": RAW, "overhead_ratio": round(ours / RAW, 4),
        "reference_overhead_ratio": round(reference / RAW, 4), "ratio": round(reference / ours, 3),
        "projected_gb_200k": round(ours * 200_000 / 1e9, 2), "target_overhead_ratio": 1.1,
    }
    print(f"frames stored once : {ours / 1e3:8.1f} kB/transition ({ours / RAW:.3f} x one observation)")
    print(f"(obs, next_obs)    : {reference / 1e3:8.1f} kB/transition ({reference / RAW:.3f} x)")
    print(f"200k transitions   : {result['projected_gb_200k']} GB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
