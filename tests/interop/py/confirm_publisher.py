"""A confirming publisher for availability tests and measurements: one message in flight, so
the time of each confirm (or nack) is exact; `longest_gap_since(t)` is how long confirms
stopped after a fault at `t`. And a consumer acking what it gets, noting any basic.cancel."""
import threading
import time

import pika
import pika.exceptions


class _Worker(threading.Thread):
    """A client thread on `queue` through `node`, run until `stop`, which fails if it failed."""

    def __init__(self, node, queue):
        super().__init__()
        self.node = node
        self.queue = queue
        self.failures = []
        self.stopping = threading.Event()

    def stop(self):
        self.stopping.set()
        self.join(30)
        assert not self.failures, (self.node.name, self.failures)


class ConfirmPublisher(_Worker):
    """Publishes persistent messages to `queue` through `node` with confirms until stopped."""

    def __init__(self, node, queue, fallback=()):
        """`fallback`: nodes to reconnect to, in turn, when the connection to the current one
        is lost (a node restarted under it); without them a lost connection fails `stop`."""
        super().__init__(node, queue)
        self.nodes = [node, *fallback]
        self.reconnects = 0
        self.confirmed_at = []
        # The bodies confirmed (acked), each unique: "<node>-<n>".
        self.confirmed = []
        self.nacks = 0

    def run(self):
        sequence = 0
        current = 0
        while not self.stopping.is_set():
            try:
                conn = self.nodes[current].connect()
                channel = conn.channel()
                channel.confirm_delivery()
                while not self.stopping.is_set():
                    sequence += 1
                    body = ("%s-%d" % (self.node.name, sequence)).encode()
                    try:
                        channel.basic_publish("", self.queue, body,
                                              pika.BasicProperties(delivery_mode=2))
                        self.confirmed.append(body)
                    except pika.exceptions.NackError:
                        self.nacks += 1
                    self.confirmed_at.append(time.monotonic())
                    time.sleep(0.005)
                conn.close()
            except (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelClosed,
                    pika.exceptions.StreamLostError) as e:
                if len(self.nodes) == 1:
                    self.failures.append(e)
                    return
                self.reconnects += 1
                current = (current + 1) % len(self.nodes)
            except Exception as e:  # noqa: BLE001 (reported by `stop`)
                self.failures.append(e)
                return

    def longest_gap_since(self, fault_at):
        during = [t for t in self.confirmed_at if t >= fault_at]
        assert during, "no confirm since the fault"
        return max(b - a for a, b in zip([fault_at] + during, during))


class AckingConsumer(_Worker):
    """Consumes `queue` through `node` with manual acks (prefetch 20) until stopped, keeping
    every body it got and every basic.cancel the broker sent."""

    def __init__(self, node, queue):
        super().__init__(node, queue)
        self.bodies = []
        self.cancelled = []

    def run(self):
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                host=self.node.host, port=self.node.amqp_port, heartbeat=0,
                connection_attempts=3, retry_delay=1))
            channel = conn.channel()
            channel.basic_qos(prefetch_count=20)
            channel.add_on_cancel_callback(lambda frame: self.cancelled.append(frame))

            def on_message(ch, method, _props, body):
                self.bodies.append(body)
                ch.basic_ack(method.delivery_tag)
            channel.basic_consume(self.queue, on_message)
            while not self.stopping.is_set():
                conn.process_data_events(time_limit=0.2)
            conn.close()
        except Exception as e:  # noqa: BLE001 (reported by `stop`)
            self.failures.append(e)
