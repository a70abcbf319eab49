"""A message workload for cluster chaos tests: publishers with publisher confirms and consumers
with manual acknowledgements on one queue, one of each per node given, each reconnecting
(to the next node) when its node fails. It counts what a user of the cluster checks:

- published: messages handed to the broker; confirmed (basic.ack), nacked (basic.nack or
  returned), unconfirmed at failure (the connection failed before the broker answered);
- received: distinct messages consumed and acknowledged; duplicates (a message received
  again — allowed, at-least-once, but reported); unexpected (a body this run never published);
- lost: confirmed messages never received — must be 0.

Every message body is `<tag>:<publisher>:<sequence>`, so consumers recognise them. The queue
is the caller's (a classic queue, or a quorum queue). A consumer the broker cancels (basic.cancel:
its queue's serving node or leader moved) consumes again on its next node; those cancels are
counted."""
import bisect
import threading
import time

import pika
import pika.exceptions

# What a client sees from a node that fails (killed, frozen, cut off) or refuses.
FAILURES = (pika.exceptions.AMQPError, OSError)


def _connect(node, timeout_s=5):
    params = pika.URLParameters(node.amqp_url)
    params.socket_timeout = timeout_s
    params.stack_timeout = timeout_s * 2
    params.blocked_connection_timeout = timeout_s * 4
    params.connection_attempts = 1
    params.heartbeat = 5
    return pika.BlockingConnection(params)


class MessageWorkload:
    def __init__(self, tag, queue, publish_nodes, consume_nodes, prefetch=50,
                 publish_interval_s=0.0):
        self.tag = tag
        self.queue = queue
        self.publish_nodes = list(publish_nodes)
        self.consume_nodes = list(consume_nodes)
        self.prefetch = prefetch
        self.publish_interval_s = publish_interval_s
        self.lock = threading.Lock()
        self.published = set()
        self.confirmed = set()
        self.nacked = set()
        self.unconfirmed_at_failure = set()
        self.received = set()
        self.duplicates = 0
        self.unexpected = []
        self.reconnects = 0
        self.cancels = 0
        # time.monotonic() of each confirm (basic.ack), for the gaps in confirms a fault makes.
        self.confirm_times = []
        # Each confirmed body's confirm: (time.monotonic(), the node it was published through),
        # to place a lost message among the faults.
        self.confirm_log = {}
        # (time.monotonic(), node) of each basic.cancel, to line up with a fault schedule.
        self.cancel_log = []
        self.errors = []
        self.publishing = threading.Event()
        self.consuming = threading.Event()
        self.threads = []
        self.publisher_threads = []

    # ------------------------------------------------------------------ threads

    def start(self):
        self.publishing.set()
        self.consuming.set()
        for i, _ in enumerate(self.consume_nodes):
            self._spawn(self._consume, i)
        for i, _ in enumerate(self.publish_nodes):
            self.publisher_threads.append(self._spawn(self._publish, i))

    def _spawn(self, target, i):
        thread = threading.Thread(target=target, args=(i,), daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def _failed(self, who, error):
        with self.lock:
            self.reconnects += 1
            self.errors.append("%s: %s: %s" % (who, type(error).__name__, error))
        time.sleep(0.5)

    def _publish(self, index):
        sequence = 0
        attempt = 0
        while self.publishing.is_set():
            node = self.publish_nodes[(index + attempt) % len(self.publish_nodes)]
            in_flight = None
            try:
                connection = _connect(node)
                try:
                    channel = connection.channel()
                    channel.confirm_delivery()
                    while self.publishing.is_set():
                        sequence += 1
                        body = "%s:%d:%d" % (self.tag, index, sequence)
                        in_flight = body
                        with self.lock:
                            self.published.add(body)
                        try:
                            channel.basic_publish(
                                "", self.queue, body.encode(), mandatory=True,
                                properties=pika.BasicProperties(delivery_mode=2))
                            outcome = self.confirmed
                        except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
                            outcome = self.nacked
                        with self.lock:
                            outcome.add(body)
                            if outcome is self.confirmed:
                                now = time.monotonic()
                                self.confirm_times.append(now)
                                self.confirm_log[body] = (now, node.name)
                        in_flight = None
                        if self.publish_interval_s:
                            time.sleep(self.publish_interval_s)
                finally:
                    try:
                        connection.close()
                    except FAILURES:
                        pass
            except FAILURES as e:
                if in_flight is not None:
                    with self.lock:
                        self.unconfirmed_at_failure.add(in_flight)
                attempt += 1
                self._failed("publisher %d on %s" % (index, node.name), e)

    def _consume(self, index):
        attempt = 0
        while self.consuming.is_set():
            node = self.consume_nodes[(index + attempt) % len(self.consume_nodes)]
            try:
                connection = _connect(node)
                try:
                    channel = connection.channel()
                    channel.basic_qos(prefetch_count=self.prefetch)
                    cancelled = []
                    channel.add_on_cancel_callback(cancelled.append)
                    channel.basic_consume(self.queue, self._on_message, auto_ack=False)
                    while self.consuming.is_set() and not cancelled:
                        connection.process_data_events(time_limit=0.2)
                    if cancelled:
                        with self.lock:
                            self.cancels += 1
                            self.cancel_log.append((time.monotonic(), node.name))
                        attempt += 1
                        # Give a leader election a moment before consuming again.
                        time.sleep(0.5)
                finally:
                    try:
                        connection.close()
                    except FAILURES:
                        pass
            except FAILURES as e:
                attempt += 1
                self._failed("consumer %d on %s" % (index, node.name), e)

    def _on_message(self, channel, method, _properties, body):
        text = body.decode(errors="replace")
        with self.lock:
            if text not in self.published:
                self.unexpected.append(text)
            elif text in self.received:
                self.duplicates += 1
            else:
                self.received.add(text)
        channel.basic_ack(method.delivery_tag)

    # ------------------------------------------------------------------ control

    def stop_publishing(self):
        self.publishing.clear()

    def drain(self, timeout=60):
        """Stops publishing, then waits until every confirmed message was received (or the
        timeout passed), then stops consuming. Returns report()."""
        self.stop_publishing()
        deadline = time.monotonic() + timeout
        # A publisher may still wait for the confirm of its last message (forwarded while the
        # queue's group elects a leader, that takes seconds): it counts as confirmed only once
        # the confirm came, which must be before the consumers stop, or a message confirmed
        # after that is "lost" though it waits in the queue.
        for thread in self.publisher_threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        while time.monotonic() < deadline:
            with self.lock:
                if self.confirmed <= self.received:
                    break
            time.sleep(0.2)
        # Messages published but unconfirmed may still arrive: a moment for them.
        time.sleep(1)
        self.consuming.clear()
        for thread in self.threads:
            thread.join(30)
        return self.report()

    def longest_gap_s(self, start, end):
        """The longest time without a confirm that overlaps [start, end] (time.monotonic()):
        from the last confirm before `start` to the first after `end`, every step between."""
        with self.lock:
            times = sorted(self.confirm_times)
        first = bisect.bisect_right(times, start)
        last = bisect.bisect_right(times, end)
        points = times[max(0, first - 1):min(len(times), last + 1)]
        if len(points) < 2:
            return None
        return max(b - a for a, b in zip(points, points[1:]))

    def report(self):
        with self.lock:
            return {
                "published": len(self.published),
                "confirmed": len(self.confirmed),
                "nacked": len(self.nacked),
                "unconfirmed_at_failure": len(self.unconfirmed_at_failure),
                "received": len(self.received),
                "duplicates": self.duplicates,
                "unexpected": len(self.unexpected),
                "lost": len(self.confirmed - self.received),
                "reconnects": self.reconnects,
                "consumer_cancels": self.cancels,
            }
