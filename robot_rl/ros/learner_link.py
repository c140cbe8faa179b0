"""An actor node's link to the learner, shared by the arm `actor` and the `car_actor`.

Out: the `ActorCore`'s transition batches on `rl/transitions`, sent from its packing thread as soon as each is
packed (batch_packer.py) and resent until acknowledged on `rl/acks` (the core's outbox spills to disk past its
memory bound). In: policies from `rl/policy`,
decoded on a worker thread (only the newest waits) and swapped into the core between steps.
"""

from __future__ import annotations

import queue
import sys
import threading

from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from std_msgs.msg import UInt8MultiArray

from robot_rl.ros import qos
from robot_rl.ros.messages import bytes_to_uint8_multiarray, uint8_multiarray_view
from robot_rl.training.actor import ActorCore
from robot_rl.transport import codec

GIL_SWITCH_INTERVAL_S = 0.001


class LearnerLink:
    def __init__(self, node: Node, core: ActorCore, core_lock: threading.Lock):
        self.node, self.core, self.core_lock = node, core, core_lock
        self.rejected = 0
        """Malformed policy or ack payloads."""
        self.transitions_pub = node.create_publisher(UInt8MultiArray, "rl/transitions", qos.TRANSITIONS)
        node.create_subscription(UInt8MultiArray, "rl/policy", self._on_policy, qos.POLICY)
        node.create_subscription(UInt8MultiArray, "rl/acks", self._on_ack, qos.EVENTS)
        self._inbox: queue.Queue[bytes] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._policy_loop, name=f"{node.get_name()}-policy", daemon=True)
        self._thread.start()
        if core.packer is not None:
            core.packer.on_packed = self._send_new
        # The link's threads (policy decoding, packing) hand the GIL to the control loop within a millisecond
        # (the default 5 ms is a sixth of a 30 Hz period).
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)

    def _on_policy(self, msg: UInt8MultiArray) -> None:
        data = bytes(uint8_multiarray_view(msg))
        try:  # keep only the newest weights waiting
            self._inbox.get_nowait()
        except queue.Empty:
            pass
        self._inbox.put_nowait(data)

    def _policy_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._inbox.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                # Decoded and built outside the core's lock: the control loop never waits for a
                # weights copy, only for the swap.
                payload = codec.decode(data, expect_kind="policy", key=self.core.key)  # only this run's learner
                prepared = self.core.prepare_policy(payload)
                if prepared is not None:
                    with self.core_lock:
                        self.core.adopt_policy(prepared)
            except (codec.PayloadError, ValueError, KeyError) as exc:
                self.rejected += 1
                self.node.get_logger().warning(f"rejected policy payload: {exc}", throttle_duration_sec=5.0)
            except Exception as exc:  # noqa: BLE001 - this thread must outlive any one bad payload
                self.rejected += 1
                self.node.get_logger().error(f"policy payload failed to load ({type(exc).__name__}: {exc}); "
                                             "keeping the current policy", throttle_duration_sec=5.0)

    def _on_ack(self, msg: UInt8MultiArray) -> None:
        try:
            payload = codec.decode(uint8_multiarray_view(msg), expect_kind="ack", key=self.core.key)
        except codec.PayloadError as exc:
            self.rejected += 1
            self.node.get_logger().warning(f"rejected ack: {exc}", throttle_duration_sec=5.0)
            return
        with self.core_lock:
            self.core.handle_ack(payload)

    def send_due(self) -> None:
        """Flushes a batch that is due and (re)sends what the learner has not acknowledged."""
        with self.core_lock:
            self.core.flush_if_due()
        self._send_new()

    def _send_new(self) -> None:
        """Sends what is due in the outbox (thread-safe: also called on the packing thread)."""
        for _, data in self.core.outbox.due():
            self.transitions_pub.publish(bytes_to_uint8_multiarray(data))

    def health(self) -> tuple[bytes, str]:
        """The /diagnostics level and message of the link: a batch that cannot be packed (a full disk) is an
        error, a learner that acknowledges nothing a warning."""
        packer = self.core.packer
        if packer is not None and packer.error is not None:
            return DiagnosticStatus.ERROR, f"cannot pack transitions into the outbox: {packer.error}"
        if self.core.unacknowledged > 100:
            return DiagnosticStatus.WARN, "learner not acknowledging"
        return DiagnosticStatus.OK, "ok"

    def close(self) -> None:
        """Packs the batches still being packed into the outbox (on disk for a restart) and stops the policy
        thread."""
        if not self.core.close():
            self.node.get_logger().error(f"{self.core.unacknowledged} transition batches not packed in time: their "
                                         f"steps are taken again on a restart ({self.core.packer.error})")
        self._stop.set()
        self._thread.join(timeout=5)
