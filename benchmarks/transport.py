#!/usr/bin/env python3
"""Transport benchmark: our codec + message helpers over loopback DDS vs the
naive idiom.

Run from the repo root::

    python benchmarks/transport.py [--quick]

Every DDS measurement runs between SEPARATE PROCESSES: this script re-executes
itself as a receiver and a sender (``--role ...``), each with its own rclpy
context, a fresh random ``ROS_DOMAIN_ID`` in 100..200, and
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` / ``ROS_LOCALHOST_ONLY=1`` so
nothing leaves the machine. The parent process never initialises rclpy.

Paths compared (same payloads, same sizes, same QoS from robot_rl.ros.qos):

* ``ours`` -- ``codec.encode`` -> ``bytes_to_uint8_multiarray`` (one
  ``array.array.frombytes`` memcpy), receiver decodes from the zero-copy
  ``uint8_multiarray_view``. DDS: ``FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA``
  plus ``FASTDDS_DEFAULT_PROFILES_FILE`` pointing at
  ``robot_rl.ros.qos.fastdds_profile_xml()`` (64 MiB shared-memory segment).
  Why the profile: under ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
  rmw_fastrtps disables Fast DDS builtin transports and installs its own SHM
  (512 KiB segment) + UDP, so LARGE_DATA alone is silently ignored; a 5 MB
  sample overflows the small segment and is only completed by NACK repair.
* ``reference`` -- the common naive idiom ``msg.data = ndarray.tolist()``
  (here ``np.frombuffer(payload, np.uint8).tolist()``), receiver
  ``bytes(msg.data)`` then the same ``codec.decode``; Fast DDS defaults
  (no transport env vars, no XML profile).
* ``reference_bytes`` (full run only, informational) -- ``msg.data =
  payload_bytes`` with Fast DDS defaults. With ``ROS_PYTHON_CHECK_FIELDS``
  unset the generated setter does ``array('B', bytes)``, a memcpy, so this
  isolates the transport effect from the marshalling effect.
* ``ours_large_data_only`` (full run only, informational) -- our marshalling
  with ``FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA`` but without the XML profile.

Metrics:

* ``weights_5mb_ms``: one-way latency of a ~5 MiB dict of float32 tensors
  (a torch MLP ``state_dict`` -> ``state_dict_to_arrays`` -> ``encode``),
  measured from just before ``encode`` on the sender to "decoded arrays
  available" on the receiver using CLOCK_MONOTONIC (shared by all processes
  on one machine). The receiver acks each message (codec ``ack`` payload)
  and the sender only sends the next one after the ack, so there is no
  queueing. Median over N messages after warm-up.
* ``transitions_per_s``: batches of 32 transitions (two 128x128x3 uint8
  frames, 32-float state, 7-float action, reward, done) gathered from a
  frame pool, encoded, published, decoded by the receiver and acked; the
  sender keeps a bounded window of un-acked batches. Decoded (acked)
  transitions / wall time, after warm-up.
* ``image_128_codec_ms``: in-process ``image_to_msg`` + ``msg_to_image`` of a
  128x128 rgb8 frame, mean over many. Reference: ``Image`` built with
  ``msg.data = img.ravel().tolist()`` and decoded with
  ``np.array(msg.data, dtype=np.uint8).reshape(h, w, 3)``. Also reported:
  ``msg.data = img.tobytes()`` (fast unless field checks are on) and the
  same with ``check_fields=True`` (what ``ROS_PYTHON_CHECK_FIELDS=1`` does).

The last line printed is one JSON object with all metrics and ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from robot_rl.ros.probe import fresh_domain_id  # noqa: E402

TARGETS = {"weights_5mb_ms": 30.0, "transitions_per_s": 200.0, "image_128_codec_ms": 0.1}
BATCH = 32
IMG_SHAPE = (128, 128, 3)
STATE_DIM = 32
ACTION_DIM = 7

TOPIC_DATA = "rrl_bench/data"
TOPIC_ACK = "rrl_bench/ack"


# ==========================================================================
# child processes (each with its own rclpy context)
# ==========================================================================


# mode -> (marshalling idiom, DDS transport setup)
MODES: dict[str, tuple[str, str]] = {
    "ours": ("ours", "shm_profile"),
    "ours_large_data_only": ("ours", "large_data"),
    "reference": ("tolist", "default"),
    "reference_bytes": ("bytes", "default"),
}


def _make_msg(marshal: str, payload: bytes):
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros.messages import bytes_to_uint8_multiarray

    if marshal == "ours":
        return bytes_to_uint8_multiarray(payload)
    msg = UInt8MultiArray()
    if marshal == "tolist":  # the common naive idiom: msg.data = arr.tolist()
        msg.data = np.frombuffer(payload, dtype=np.uint8).tolist()
    elif marshal == "bytes":  # msg.data = arr.tobytes()
        msg.data = payload
    else:  # pragma: no cover
        raise ValueError(marshal)
    return msg


def _msg_bytes(marshal: str, msg):
    from robot_rl.ros.messages import uint8_multiarray_view

    if marshal == "ours":
        return uint8_multiarray_view(msg)
    return bytes(msg.data)


def _weights_arrays() -> dict[str, np.ndarray]:
    import torch

    from robot_rl.transport.codec import state_dict_to_arrays

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
    )
    # ~1.31 M float32 params = 5.0 MiB (+ biases)
    arrays = state_dict_to_arrays(model.state_dict())
    return {k: v.copy() for k, v in arrays.items()}


def child_main(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.messages import bytes_to_uint8_multiarray
    from robot_rl.transport.codec import decode, encode

    mode, what, role = args.mode, args.what, args.role
    marshal = MODES[mode][0]
    data_qos = qos.POLICY if what == "weights" else qos.TRANSITIONS
    deadline = time.monotonic() + args.hard_timeout

    rclpy.init()
    node = Node(f"rrl_bench_{what}_{role}")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    result: dict = {}
    try:
        if role == "rx":
            ack_pub = node.create_publisher(UInt8MultiArray, TOPIC_ACK, qos.EVENTS)
            state = {"stop": False, "n": 0}

            def on_data(msg) -> None:
                t_cb = time.monotonic_ns()
                p = decode(_msg_bytes(marshal, msg))
                t_rx = time.monotonic_ns()
                if p.kind == "stop":
                    state["stop"] = True
                    return
                n = int(p.arrays["reward"].shape[0]) if p.kind == "transitions" else 1
                state["n"] += n
                ack = encode("ack", {}, {"seq": p.meta["seq"], "t_cb": t_cb, "t_rx": t_rx, "n": n})
                ack_pub.publish(bytes_to_uint8_multiarray(ack))

            node.create_subscription(UInt8MultiArray, TOPIC_DATA, on_data, data_qos)
            while not state["stop"] and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.2)
            result = {"received": state["n"]}
        else:
            result = _sender(args, node, executor, data_qos, deadline)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def _sender(args, node, executor, data_qos, deadline) -> dict:
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.transport.codec import decode, encode

    mode, what = args.mode, args.what
    marshal = MODES[mode][0]
    acks: dict[int, dict] = {}

    def on_ack(msg) -> None:
        p = decode(msg.data, expect_kind="ack")
        acks[int(p.meta["seq"])] = dict(p.meta, t_ack=time.monotonic_ns())

    pub = node.create_publisher(UInt8MultiArray, TOPIC_DATA, data_qos)
    ack_sub = node.create_subscription(UInt8MultiArray, TOPIC_ACK, on_ack, qos.EVENTS)

    # wait for both directions to be matched
    while pub.get_subscription_count() < 1 or ack_sub.get_publisher_count() < 1:
        if time.monotonic() > deadline:
            raise TimeoutError("discovery timed out")
        executor.spin_once(timeout_sec=0.05)
    t_end = time.monotonic() + 0.3
    while time.monotonic() < t_end:  # let the reverse matching settle too
        executor.spin_once(timeout_sec=0.05)

    def wait_ack(seq: int, timeout: float) -> bool:
        limit = min(deadline, time.monotonic() + timeout)
        while seq not in acks and time.monotonic() < limit:
            executor.spin_once(timeout_sec=0.05)
        return seq in acks

    seq = 0
    out: dict = {"mode": mode, "what": what}
    if what == "weights":
        arrays = _weights_arrays()
        out["payload_bytes"] = len(encode("weights", arrays, {"seq": 0, "t0": 0}))
        one_way, rtt_half, publish_ms, to_cb = [], [], [], []
        measured = 0
        lost = 0
        while measured < args.n and time.monotonic() < deadline:
            t0 = time.monotonic_ns()
            payload = encode("weights", arrays, {"seq": seq, "t0": t0})
            msg = _make_msg(marshal, payload)
            pub.publish(msg)
            t_pub = time.monotonic_ns()
            ok = wait_ack(seq, timeout=10.0)
            if not ok:
                lost += 1
            elif seq >= args.warmup:
                a = acks[seq]
                one_way.append((a["t_rx"] - t0) / 1e6)
                rtt_half.append((a["t_ack"] - t0) / 2e6)
                publish_ms.append((t_pub - t0) / 1e6)
                to_cb.append((a["t_cb"] - t0) / 1e6)
                measured += 1
            seq += 1
            time.sleep(0.01)
        out.update(
            n=len(one_way),
            lost=lost,
            one_way_ms=one_way,
            median_ms=statistics.median(one_way) if one_way else None,
            rtt_half_median_ms=statistics.median(rtt_half) if rtt_half else None,
            publish_median_ms=statistics.median(publish_ms) if publish_ms else None,
            callback_median_ms=statistics.median(to_cb) if to_cb else None,
        )
    else:
        rng = np.random.default_rng(0)
        pool = 64
        cam0 = rng.integers(0, 256, (pool, *IMG_SHAPE), dtype=np.uint8)
        cam1 = rng.integers(0, 256, (pool, *IMG_SHAPE), dtype=np.uint8)
        states = rng.standard_normal((pool, STATE_DIM)).astype(np.float32)
        actions = rng.uniform(-1, 1, (pool, ACTION_DIM)).astype(np.float32)

        def send_batch(s: int) -> int:
            idx = rng.integers(0, pool, BATCH)
            arrays = {
                "obs_cam0": cam0[idx],
                "obs_cam1": cam1[idx],
                "state": states[idx],
                "action": actions[idx],
                "reward": rng.standard_normal(BATCH).astype(np.float32),
                "done": rng.random(BATCH) < 0.01,
            }
            payload = encode("transitions", arrays, {"seq": s, "t0": time.monotonic_ns()})
            pub.publish(_make_msg(marshal, payload))
            return len(payload)

        batch_bytes = 0
        # warm-up (connection setup, SHM segments, allocator)
        for _ in range(args.warmup):
            batch_bytes = send_batch(seq)
            wait_ack(seq, timeout=10.0)
            seq += 1
        first_measured = seq
        t_start = time.monotonic_ns()
        stop_sending = time.monotonic() + args.duration
        in_flight: set[int] = set()
        while time.monotonic() < deadline:
            for s in [s for s in in_flight if s in acks]:
                in_flight.discard(s)
            sending = time.monotonic() < stop_sending
            if sending and len(in_flight) < args.window:
                send_batch(seq)
                in_flight.add(seq)
                seq += 1
                executor.spin_once(timeout_sec=0)
            elif in_flight:
                executor.spin_once(timeout_sec=0.1 if sending else 0.5)
                if not sending and time.monotonic() > stop_sending + 10.0:
                    break  # give up on stragglers
            else:
                break
        got = [acks[s] for s in range(first_measured, seq) if s in acks]
        n_tr = sum(int(a["n"]) for a in got)
        t_last = max((a["t_ack"] for a in got), default=t_start)
        wall = (t_last - t_start) / 1e9
        out.update(
            batches_sent=seq - first_measured,
            batches_acked=len(got),
            transitions=n_tr,
            wall_s=wall,
            transitions_per_s=(n_tr / wall) if wall > 0 else 0.0,
            batch_bytes=batch_bytes,
        )
    # tell the receiver to exit
    pub.publish(_make_msg(marshal, encode("stop", {})))
    executor.spin_once(timeout_sec=0.2)
    return out


# ==========================================================================
# parent: orchestration
# ==========================================================================


def _ros_env(mode: str, profile_path: str) -> dict[str, str]:
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["ROS_LOCALHOST_ONLY"] = "1"
    env["ROS_DOMAIN_ID"] = str(fresh_domain_id())
    for k in ("ROS_PYTHON_CHECK_FIELDS", "FASTDDS_BUILTIN_TRANSPORTS",
              "FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE",
              "RMW_FASTRTPS_USE_QOS_FROM_XML", "RMW_FASTRTPS_PUBLICATION_MODE"):
        env.pop(k, None)
    transport = MODES[mode][1]
    if transport in ("large_data", "shm_profile"):
        env["FASTDDS_BUILTIN_TRANSPORTS"] = "LARGE_DATA"
    if transport == "shm_profile":
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = profile_path
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    return env


def run_pair(what: str, mode: str, *, n: int, warmup: int, duration: float,
             window: int, timeout: float, profile_path: str) -> dict:
    env = _ros_env(mode, profile_path)
    common = [
        sys.executable, str(Path(__file__).resolve()),
        "--what", what, "--mode", mode, "--n", str(n), "--warmup", str(warmup),
        "--duration", str(duration), "--window", str(window),
        "--hard-timeout", str(timeout),
    ]
    with tempfile.TemporaryFile("w+") as rx_err, tempfile.TemporaryFile("w+") as tx_err:
        rx = subprocess.Popen(common + ["--role", "rx"], env=env,
                              stdout=subprocess.DEVNULL, stderr=rx_err)
        tx = subprocess.Popen(common + ["--role", "tx"], env=env,
                              stdout=subprocess.PIPE, stderr=tx_err, text=True)
        try:
            stdout, _ = tx.communicate(timeout=timeout + 15)
        except subprocess.TimeoutExpired:
            tx.kill()
            stdout, _ = tx.communicate()
        try:
            rx.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rx.send_signal(signal.SIGINT)
            try:
                rx.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rx.kill()
                rx.wait()
        lines = [ln for ln in (stdout or "").splitlines() if ln.startswith("RESULT ")]
        if tx.returncode != 0 or not lines:
            tx_err.seek(0)
            rx_err.seek(0)
            sys.stderr.write(
                f"[{what}/{mode}] sender failed rc={tx.returncode}\n--- sender stderr ---\n"
                f"{tx_err.read()[-4000:]}\n--- receiver stderr ---\n{rx_err.read()[-2000:]}\n"
            )
            return {"error": f"sender rc={tx.returncode}"}
        return json.loads(lines[-1][len("RESULT "):])


def bench_image_codec(iters: int) -> dict[str, float]:
    from sensor_msgs.msg import Image

    from robot_rl.ros.messages import image_to_msg, msg_to_image

    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, IMG_SHAPE, dtype=np.uint8)
    h, w, _ = IMG_SHAPE
    stamp = time.time_ns()

    def ours() -> np.ndarray:
        return msg_to_image(image_to_msg(img, stamp, "cam0"))

    def naive_tolist() -> np.ndarray:
        m = Image(height=h, width=w, encoding="rgb8", step=w * 3)
        m.header.frame_id = "cam0"
        m.data = img.ravel().tolist()
        return np.array(m.data, dtype=np.uint8).reshape(h, w, 3)

    def naive_bytes() -> np.ndarray:
        m = Image(height=h, width=w, encoding="rgb8", step=w * 3)
        m.header.frame_id = "cam0"
        m.data = img.tobytes()
        return np.array(m.data, dtype=np.uint8).reshape(h, w, 3)

    def naive_bytes_checked() -> np.ndarray:  # what ROS_PYTHON_CHECK_FIELDS=1 does
        m = Image(height=h, width=w, encoding="rgb8", step=w * 3, check_fields=True)
        m.header.frame_id = "cam0"
        m.data = img.tobytes()
        return np.array(m.data, dtype=np.uint8).reshape(h, w, 3)

    def timeit(fn, k: int) -> float:
        assert np.array_equal(fn(), img)
        for _ in range(min(k, 20)):
            fn()
        t = time.perf_counter()
        for _ in range(k):
            fn()
        return (time.perf_counter() - t) / k * 1e3

    return {
        "ours": timeit(ours, iters),
        "reference": timeit(naive_tolist, max(20, iters // 50)),
        "reference_bytes": timeit(naive_bytes, iters),
        "reference_bytes_checked": timeit(naive_bytes_checked, max(10, iters // 100)),
    }


def _fmt(x, unit="") -> str:
    if x is None:
        return "n/a"
    return f"{x:,.3f}{unit}" if x < 10 else f"{x:,.1f}{unit}"


def parent_main(args: argparse.Namespace) -> int:
    from robot_rl.ros.qos import write_fastdds_profile

    quick = args.quick
    cfg = dict(
        n=5 if quick else 30,
        warmup=2 if quick else 3,
        duration=2.0 if quick else 8.0,
        window=8,
        timeout=40.0 if quick else 120.0,
    )
    modes = (["ours", "reference"] if quick
             else ["ours", "reference", "reference_bytes", "ours_large_data_only"])
    t_all = time.monotonic()
    print(f"robot_rl transport benchmark ({'quick' if quick else 'full'}); "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs", flush=True)

    img = bench_image_codec(300 if quick else 3000)
    print("image 128x128 rgb8 encode+decode (ms): " +
          ", ".join(f"{k}={v:.4f}" for k, v in img.items()), flush=True)

    weights: dict[str, dict] = {}
    trans: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="rrl_bench_") as tmp:
        profile = str(write_fastdds_profile(Path(tmp) / "fastdds_large_payloads.xml"))
        for mode in modes:
            weights[mode] = run_pair("weights", mode, profile_path=profile, **cfg)
            w = weights[mode]
            print(f"weights[{mode}]: median one-way {_fmt(w.get('median_ms'), ' ms')} "
                  f"(rtt/2 {_fmt(w.get('rtt_half_median_ms'), ' ms')}, "
                  f"sender encode+publish {_fmt(w.get('publish_median_ms'), ' ms')}, "
                  f"rx callback entered {_fmt(w.get('callback_median_ms'), ' ms')}, "
                  f"n={w.get('n')}, lost={w.get('lost')}, {w.get('payload_bytes')} B)",
                  flush=True)
            trans[mode] = run_pair("transitions", mode, profile_path=profile, **cfg)
            t = trans[mode]
            print(f"transitions[{mode}]: {_fmt(t.get('transitions_per_s'), '/s')} "
                  f"({t.get('transitions')} transitions, {t.get('batches_acked')}/"
                  f"{t.get('batches_sent')} batches of {t.get('batch_bytes')} B acked in "
                  f"{_fmt(t.get('wall_s'), ' s')})", flush=True)

    res = {
        "weights_5mb_ms": weights["ours"].get("median_ms"),
        "transitions_per_s": trans["ours"].get("transitions_per_s"),
        "image_128_codec_ms": img["ours"],
        "reference_weights_5mb_ms": weights["reference"].get("median_ms"),
        "reference_transitions_per_s": trans["reference"].get("transitions_per_s"),
        "reference_image_128_codec_ms": img["reference"],
    }

    def ratio(a, b):
        return round(a / b, 2) if a and b else None

    res["weights_speedup"] = ratio(res["reference_weights_5mb_ms"], res["weights_5mb_ms"])
    res["transitions_speedup"] = ratio(res["transitions_per_s"],
                                       res["reference_transitions_per_s"])
    res["image_codec_speedup"] = ratio(res["reference_image_128_codec_ms"],
                                       res["image_128_codec_ms"])
    # informational variants
    for mode in modes[2:]:
        res[f"{mode}_weights_5mb_ms"] = weights[mode].get("median_ms")
        res[f"{mode}_transitions_per_s"] = trans[mode].get("transitions_per_s")
    res["reference_bytes_image_128_codec_ms"] = img["reference_bytes"]
    res["reference_bytes_checked_image_128_codec_ms"] = img["reference_bytes_checked"]
    res["targets_met"] = {
        "weights_5mb_ms": res["weights_5mb_ms"] is not None
        and res["weights_5mb_ms"] <= TARGETS["weights_5mb_ms"],
        "transitions_per_s": res["transitions_per_s"] is not None
        and res["transitions_per_s"] >= TARGETS["transitions_per_s"],
        "image_128_codec_ms": res["image_128_codec_ms"] <= TARGETS["image_128_codec_ms"],
    }
    res["quick"] = quick
    res["elapsed_s"] = round(time.monotonic() - t_all, 1)
    for k, v in list(res.items()):
        if isinstance(v, float):
            res[k] = round(v, 4)

    cols = modes
    print()
    print(f"{'metric':<22}" + "".join(f"{m:>22}" for m in cols) + f"{'target':>10}")
    print(f"{'weights_5mb_ms':<22}" + "".join(
        f"{_fmt(weights[m].get('median_ms')):>22}" for m in cols) + f"{'<= 30':>10}")
    print(f"{'transitions_per_s':<22}" + "".join(
        f"{_fmt(trans[m].get('transitions_per_s')):>22}" for m in cols) + f"{'>= 200':>10}")
    img_cols = {"ours": img["ours"], "reference": img["reference"],
                "reference_bytes": img["reference_bytes"]}
    print(f"{'image_128_codec_ms':<22}" + "".join(
        f"{_fmt(img_cols.get(m)):>22}" for m in cols) + f"{'<= 0.1':>10}")
    print(json.dumps(res), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 1 min)")
    # internal (child process) arguments
    ap.add_argument("--role", choices=["rx", "tx"], help=argparse.SUPPRESS)
    ap.add_argument("--what", choices=["weights", "transitions"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=sorted(MODES),
                    help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=20, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--duration", type=float, default=5.0, help=argparse.SUPPRESS)
    ap.add_argument("--window", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--hard-timeout", type=float, default=60.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role:
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
