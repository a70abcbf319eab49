"""AMQP 1.0 as RabbitMQ 4's own clients and JMS applications use it (python-qpid-proton):
the open frame's server properties (RabbitMQ's AMQP 1.0 clients read the broker's version
there), anonymous relay offered, a transaction coordinator refused as one link only, the
distribution mode and filters a receiver gets answered with what is in force, and temporary
queues for dynamic receivers and senders (RabbitMQ 4.1's `temporary-queue` capability).

Runs against the broker at AMQP_URL (pika on the same broker for the 0-9-1 side).
"""
import urllib.parse

import pika
import pika.exceptions
import pytest
from proton import Data, Message, Terminus
from proton.reactor import Copy, LinkOption, Selector
from proton.utils import LinkDetached

from test_amqp10 import addr_queue, amqp10, c10  # noqa: F401 (fixture)


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def test_open_carries_the_server_properties_as_rabbitmq_4_does(ch, c10):
    """RabbitMQ 4's own AMQP 1.0 clients refuse a product other than "RabbitMQ" or a version
    under 4.0: the 1.0 open says RabbitMQ 4; the rest is 0-9-1's list, Warren's own release
    (product_version) included."""
    props = {str(k): text(v) for k, v in c10.conn.remote_properties.items()}
    server = {k: text(v) for k, v in ch.connection._impl.server_properties.items()
              if k != "capabilities"}
    assert props["product"] == "RabbitMQ"
    assert int(props["version"].split(".")[0]) >= 4
    for key in ("platform", "product_version", "cluster_name"):
        assert props[key] and props[key] == server[key], key
    assert props["node"]
    assert "ANONYMOUS-RELAY" in [str(c) for c in c10.conn.remote_offered_capabilities]


class Coordinator(LinkOption):
    def apply(self, link):
        link.target.type = Terminus.COORDINATOR


def test_a_transaction_coordinator_is_refused_as_one_link(names, ch, c10):
    with pytest.raises(LinkDetached) as refused:
        c10.create_sender(None, options=Coordinator())
    assert refused.value.condition == "amqp:not-implemented"
    # The session and connection carry on.
    q = names.queue()
    ch.queue_declare(q)
    c10.create_sender(addr_queue(q)).send(Message(body="after the coordinator"))
    assert ch.queue_declare(q, passive=True).method.message_count == 1


def test_a_receiver_is_answered_with_the_mode_and_filters_in_force(names, ch, c10):
    """A JMS QueueBrowser asks for `copy`; Warren's queues move each message to one
    receiver, so the answer says `move`. A selector Warren does not apply is not listed."""
    q = names.queue()
    ch.queue_declare(q)
    receiver = c10.create_receiver(addr_queue(q), options=[Copy(), Selector("color = 'red'")])
    source = receiver.link.remote_source
    assert source.distribution_mode == Terminus.DIST_MODE_MOVE
    assert not source.filter.format()


class TemporaryQueue(LinkOption):
    """The `temporary-queue` capability on the dynamic terminus (RabbitMQ 4.1's clients and
    Qpid JMS's temporary queues set it)."""

    def __init__(self, terminus):
        self.terminus = terminus

    def apply(self, link):
        caps = getattr(link, self.terminus).capabilities
        caps.put_array(False, Data.SYMBOL)
        caps.enter()
        caps.put_symbol("temporary-queue")
        caps.exit()


def queue_of(address):
    assert address.startswith("/queues/amq.dyn"), address
    return urllib.parse.unquote(address[len("/queues/"):])


def gone(ch, queue):
    try:
        ch.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as e:
        return e.reply_code == 404
    return False


def test_a_dynamic_receiver_gets_a_temporary_queue_that_goes_with_it(conn, c10):
    receiver = c10.create_receiver(None, dynamic=True, options=[TemporaryQueue("source")])
    source = receiver.link.remote_source
    assert source.dynamic and source.expiry_policy == Terminus.EXPIRE_WITH_LINK
    queue = queue_of(source.address)
    ch = conn.channel()
    ch.basic_publish("", queue, b"a reply")
    m = receiver.receive(timeout=5)
    receiver.accept()
    assert bytes(m.body) == b"a reply"
    # Exclusive to the AMQP 1.0 connection that made it.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
        ch.basic_consume(queue, lambda *a: None)
    assert locked.value.reply_code == 405
    ch = conn.channel()
    receiver.close()
    assert gone(ch, queue)


def test_a_dynamic_sender_gets_a_temporary_queue_to_send_to(ch, c10):
    sender = c10.create_sender(None, options=[DynamicTarget(), TemporaryQueue("target")])
    queue = queue_of(sender.link.remote_target.address)
    sender.send(Message(body="to myself"))
    receiver = c10.create_receiver(addr_queue(queue))
    assert receiver.receive(timeout=5).body == "to myself"
    receiver.accept()
    receiver.close()
    sender.close()
    assert gone(ch, queue)


class DynamicTarget(LinkOption):
    def apply(self, link):
        link.target.dynamic = True


def test_a_dynamic_terminus_without_the_capability_is_refused(c10):
    with pytest.raises(LinkDetached) as refused:
        c10.create_receiver(None, dynamic=True)
    assert refused.value.condition == "amqp:not-implemented"
