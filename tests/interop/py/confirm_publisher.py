"""A confirming publisher for availability tests and measurements: one message in flight, so
the time of each confirm (or nack) is exact; `longest_gap_since(t)` is how long confirms
stopped after a fault at `t`."""
import threading
import time

import pika
import pika.exceptions


class ConfirmPublisher(threading.Thread):
    """Publishes persistent messages to `queue` through `node` with confirms until stopped."""

    def __init__(self, node, queue):
        super().__init__()
        self.node = node
        self.queue = queue
        self.confirmed_at = []
        self.nacks = 0
        self.failures = []
        self.stopping = threading.Event()

    def run(self):
        try:
            conn = self.node.connect()
            channel = conn.channel()
            channel.confirm_delivery()
            while not self.stopping.is_set():
                try:
                    channel.basic_publish("", self.queue, b"m",
                                          pika.BasicProperties(delivery_mode=2))
                except pika.exceptions.NackError:
                    self.nacks += 1
                self.confirmed_at.append(time.monotonic())
                time.sleep(0.005)
            conn.close()
        except Exception as e:  # noqa: BLE001 (reported by `stop`)
            self.failures.append(e)

    def stop(self):
        """Stops publishing; fails if the publisher's connection failed."""
        self.stopping.set()
        self.join(30)
        assert not self.failures, self.failures

    def longest_gap_since(self, fault_at):
        during = [t for t in self.confirmed_at if t >= fault_at]
        assert during, "no confirm since the fault"
        return max(b - a for a, b in zip([fault_at] + during, during))
