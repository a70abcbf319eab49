"""A broker stopping and starting again, as clients see it: a stop tells each client
(connection.close 320 CONNECTION_FORCED, RabbitMQ's "broker forced connection closure with
reason 'shutdown'", the Java client's Shutdown.errorOnShutdown), and after a clean restart a
persistent message that never reached a consumer comes back with redelivered=false, one that
did with redelivered=true (MessageRecovery). Each test starts its own broker (WARREN_BIN)."""
import tempfile
import time

import pika
import pika.exceptions
import pytest

from own_broker import Broker, needs_warren_bin

pytestmark = needs_warren_bin


def connect(broker):
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def test_a_stopping_broker_closes_client_connections_with_320():
    broker = Broker(tempfile.mkdtemp(prefix="warren-shutdown-"))
    try:
        conn = connect(broker)
        ch = conn.channel()
        ch.queue_declare("", exclusive=True)
        broker.proc.terminate()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.1)
        assert closed.value.reply_code == 320
        assert closed.value.reply_text == (
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
        assert broker.proc.wait(10) == 0
    finally:
        broker.stop()


def test_after_a_clean_restart_only_delivered_messages_are_redelivered():
    data_dir = tempfile.mkdtemp(prefix="warren-redelivered-")
    broker = Broker(data_dir)
    try:
        conn = connect(broker)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("recovery", durable=True)
        ch.queue_declare("untouched", durable=True, arguments={"x-queue-mode": "lazy"})
        for body in (b"delivered", b"never-1", b"never-2"):
            ch.basic_publish("", "recovery", body, pika.BasicProperties(delivery_mode=2))
        for i in range(100):
            ch.basic_publish("", "untouched", b"paged-%d" % i, pika.BasicProperties(delivery_mode=2))
        m, _, body = ch.basic_get("recovery", auto_ack=False)
        assert body == b"delivered" and not m.redelivered
        # Held unacked by this client while the broker stops: it was delivered.
        broker.stop()
        with pytest.raises(pika.exceptions.AMQPError):
            conn.process_data_events(time_limit=1)
    finally:
        broker.stop()

    broker = Broker(data_dir)
    try:
        ch = connect(broker).channel()
        got = [ch.basic_get("recovery", auto_ack=True) for _ in range(3)]
        assert [(b, m.redelivered) for m, _, b in got] == [
            (b"delivered", True), (b"never-1", False), (b"never-2", False)]
        for i in range(100):
            m, _, body = ch.basic_get("untouched", auto_ack=True)
            assert (body, m.redelivered) == (b"paged-%d" % i, False)
        # Restarted again without a delivery in between: still nothing redelivered.
        ch.basic_publish("", "recovery", b"again", pika.BasicProperties(delivery_mode=2))
        ch.connection.close()
    finally:
        broker.stop()

    broker = Broker(data_dir)
    try:
        ch = connect(broker).channel()
        m, _, body = ch.basic_get("recovery", auto_ack=True)
        assert (body, m.redelivered) == (b"again", False)
        ch.connection.close()
    finally:
        broker.stop()
