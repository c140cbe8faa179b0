"""A message rclpy fails to take is logged and counted; the node keeps receiving (over DDS, loopback)."""

from __future__ import annotations

import time

import pytest
import rclpy
from std_msgs.msg import String

from robot_rl.ros.node_utils import ResilientExecutor
from robot_rl.ros.probe import fresh_domain_id


class _FailingFirstTake:
    """Stands in for a subscription's rclpy handle: the first take raises as rclpy#848's pybind11 error does."""

    def __init__(self, handle):
        self.handle, self.failed = handle, False

    def __enter__(self):
        return self.handle.__enter__()

    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)

    def take_message(self, *args):
        if not self.failed:
            self.failed = True
            self.handle.take_message(*args)  # the message is consumed, as in the real failure
            raise RuntimeError("Unable to convert call argument '0' to Python object")
        return self.handle.take_message(*args)

    def __getattr__(self, name):
        return getattr(self.handle, name)


@pytest.fixture
def node():
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=fresh_domain_id())
    node = rclpy.create_node("resilient_executor_test", context=context, start_parameter_services=False)
    yield node
    node.destroy_node()
    rclpy.shutdown(context=context)


def test_a_message_that_cannot_be_taken_is_counted_and_the_next_ones_arrive(node, capsys):
    received = []
    sub = node.create_subscription(String, "resilience_probe", lambda m: received.append(m.data), 10)
    sub._Subscription__subscription = _FailingFirstTake(sub.handle)
    publisher = node.create_publisher(String, "resilience_probe", 10)
    executor = ResilientExecutor(context=node.context)
    executor.add_node(node)
    sent = 0
    deadline = time.monotonic() + 10
    while len(received) < 3 and time.monotonic() < deadline:
        publisher.publish(String(data=f"m{sent}"))
        sent += 1
        executor.spin_once(timeout_sec=0.05)
    assert sub.handle.failed
    assert executor.lost_messages == {"/resilience_probe": 1}
    assert len(received) >= 3, f"the subscription went deaf after the failed take: {received}"
    assert sent - len(received) >= 1 and "m0" not in received
    assert "lost a message on /resilience_probe" in capsys.readouterr().err


def test_errors_in_callbacks_still_end_the_spin(node):
    def broken(_msg):
        raise ValueError("a bug in our callback")

    node.create_subscription(String, "resilience_probe", broken, 10)
    publisher = node.create_publisher(String, "resilience_probe", 10)
    executor = ResilientExecutor(context=node.context)
    executor.add_node(node)
    deadline = time.monotonic() + 10
    with pytest.raises(ValueError, match="a bug in our callback"):
        while time.monotonic() < deadline:
            publisher.publish(String(data="x"))
            executor.spin_once(timeout_sec=0.05)
    assert executor.lost_messages == {}
