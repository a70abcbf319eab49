"""rabbitmqctl stop_app / start_app through `warren ctl`, as a client sees it: stop_app tells
every connection 320 CONNECTION_FORCED "broker forced connection closure with reason
'shutdown'" and closes the AMQP listener, so a new connection is refused while the HTTP API
still answers; start_app opens it on the same port again, with the durable queues and their
messages still there (the Java client's suites restart the broker this way). Each test
starts its own broker (WARREN_BIN) with an API port."""
import socket
import subprocess
import tempfile
import time

import pika
import pika.exceptions
import pytest

from own_broker import WARREN_BIN, Broker, free_port, needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]

SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


@pytest.fixture
def broker():
    mgmt_port = free_port()
    b = Broker(tempfile.mkdtemp(prefix="warren-stop-app-"), "--management-port", str(mgmt_port))
    b.mgmt_url = "http://127.0.0.1:%d" % mgmt_port
    yield b
    b.stop()


def ctl(broker, *args):
    r = subprocess.run([WARREN_BIN, "ctl", "--url", broker.mgmt_url, *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "warren ctl %s: exit %d, stderr %r" % (args, r.returncode, r.stderr)
    return r.stdout


def connect(broker):
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def closed_by_broker(conn, timeout_s=10.0):
    """The ConnectionClosedByBroker the connection gets within the timeout."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
    return closed.value


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_stop_app_closes_clients_with_320_and_refuses_new_ones_until_start_app(broker):
    publisher, consumer = connect(broker), connect(broker)
    ch = publisher.channel()
    ch.confirm_delivery()
    ch.queue_declare("kept", durable=True)
    for i in range(3):
        ch.basic_publish("", "kept", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    consumer.channel().queue_declare("", exclusive=True)

    out = ctl(broker, "stop_app")
    assert out.startswith("Stopping rabbit application on node ")

    for conn in (publisher, consumer):
        closed = closed_by_broker(conn)
        assert (closed.reply_code, closed.reply_text) == (320, SHUTDOWN_TEXT)
    assert refused(broker.port)
    # The process and its API go on: the queue and its messages are listed.
    assert "kept\t3" in ctl(broker, "list_queues", "-q", "name", "messages")
    # Asked again, stop_app is done at once.
    ctl(broker, "stop_app")
    assert refused(broker.port)

    out = ctl(broker, "start_app")
    assert out.startswith("Starting node ")
    ch = connect(broker).channel()
    assert ch.queue_declare("kept", passive=True).method.message_count == 3
    bodies = [ch.basic_get("kept", auto_ack=True)[2] for _ in range(3)]
    assert bodies == [b"m0", b"m1", b"m2"]
    ch.connection.close()


def test_the_app_stops_and_starts_again_and_again(broker):
    for round_no in range(3):
        conn = connect(broker)
        ch = conn.channel()
        ch.queue_declare("rounds", durable=True)
        ch.basic_publish("", "rounds", b"r%d" % round_no, pika.BasicProperties(delivery_mode=2))
        ctl(broker, "stop_app")
        assert closed_by_broker(conn).reply_code == 320
        ctl(broker, "start_app")
    ch = connect(broker).channel()
    assert ch.queue_declare("rounds", passive=True).method.message_count == 3
    ch.connection.close()
