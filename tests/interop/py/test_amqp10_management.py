"""RabbitMQ 4's management node over AMQP 1.0, driven by RabbitMQ's own Python AMQP 1.0
client (rabbitmq-amqp-python-client 1.0.1), as its users write topology code: queues
(classic and quorum, with arguments), exchanges, exchange-to-queue and exchange-to-exchange
bindings, purge, queue info, delete; the statuses it checks (409 for a declaration that
differs) and the refusals (reserved names, a missing queue, a refused permission); then
messages through what it declared, with its publisher and consumer.

Runs against the broker at AMQP_URL (pika on the same broker checks the 0-9-1 view); the
permission test needs the HTTP API (WARREN_MGMT_URL), as test_access.py.
"""
import urllib.parse

import pytest
from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    ClassicQueueSpecification,
    Environment,
    ExchangeSpecification,
    ExchangeToExchangeBindingSpecification,
    ExchangeToQueueBindingSpecification,
    ExchangeType,
    Message,
    QueueType,
    QuorumQueueSpecification,
    ValidationCodeException,
)

from proton import Endpoint, Link, symbol
from proton import Message as ProtonMessage
from proton.reactor import LinkOption
from proton.utils import LinkDetached
from rabbitmq_amqp_python_client.qpid.proton.utils import SendException

from conftest import AMQP_URL
from test_access import needs_api, tenant  # noqa: F401 (fixture)
from test_amqp10 import amqp10

_url = urllib.parse.urlparse(AMQP_URL)
HOST, PORT = _url.hostname, _url.port or 5672


def uri(user="guest", password="guest", vhost="/"):
    path = "/" if vhost == "/" else "/" + urllib.parse.quote(vhost, safe="")
    return "amqp://%s:%s@%s:%d%s" % (user, password, HOST, PORT, path)


@pytest.fixture
def env():
    e = Environment(uri())
    yield e
    e.close()


@pytest.fixture
def connection(env):
    c = env.connection()
    c.dial()
    yield c
    c.close()


@pytest.fixture
def management(connection):
    m = connection.management()
    yield m
    m.close()


def members(info):
    """The replicas as RabbitMQ 4 sends them: an AMQP array of strings."""
    return list(getattr(info.members, "elements", info.members))


def ready(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


class Collected(Exception):
    pass


class Collect(AMQPMessagingHandler):
    """Accepts `n` messages, keeping their bodies, then ends the consumer's run by raising
    (the client's own tests stop a run this way)."""

    def __init__(self, n):
        super().__init__()
        self.n, self.bodies = n, []

    def on_amqp_message(self, event):
        self.bodies.append(bytes(event.message.body))
        self.delivery_context.accept(event)
        if len(self.bodies) == self.n:
            raise Collected()


def publish(connection, address, bodies):
    publisher = connection.publisher(address)
    try:
        for body in bodies:
            publisher.publish(Message(body=body.encode()))
    finally:
        publisher.close()


def test_a_declared_classic_queue_is_described_as_rabbitmq_4_does(names, ch, management):
    q = names.queue()
    management.declare_queue(ClassicQueueSpecification(
        name=q, max_len=10, dead_letter_exchange="dlx", is_durable=True))
    info = management.queue_info(q)
    assert (info.name, info.queue_type) == (q, QueueType.classic)
    assert info.is_durable and not info.is_exclusive and not info.is_auto_delete
    assert info.arguments["x-max-length"] == 10
    assert info.arguments["x-dead-letter-exchange"] == "dlx"
    assert info.arguments["x-queue-type"] == "classic"
    assert info.leader and members(info) == [info.leader]
    assert (info.message_count, info.consumer_count) == (0, 0)
    # The 0-9-1 side sees the same queue, with its arguments.
    assert ready(ch, q) == 0
    # Declaring it again the same way is fine; differently is 409, which the client reports.
    management.declare_queue(ClassicQueueSpecification(
        name=q, max_len=10, dead_letter_exchange="dlx", is_durable=True))
    with pytest.raises(ValidationCodeException, match="ErrPreconditionFailed"):
        management.declare_queue(ClassicQueueSpecification(name=q, max_len=20))


def test_messages_flow_through_exchanges_and_bindings_it_declared(names, ch, env, connection,
                                                                   management):
    x, fan, q = names.exchange(), names.exchange(), names.queue()
    management.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.topic))
    management.declare_exchange(ExchangeSpecification(name=fan, exchange_type=ExchangeType.fanout))
    management.declare_queue(ClassicQueueSpecification(name=q))
    to_queue = management.bind(ExchangeToQueueBindingSpecification(
        source_exchange=x, destination_queue=q, binding_key="orders.#"))
    management.bind(ExchangeToExchangeBindingSpecification(
        source_exchange=fan, destination_exchange=x))
    publish(connection, AddressHelper.exchange_address(x, "orders.new"), ["a", "b"])
    # No queue takes it: RabbitMQ 4 answers released, which the client raises.
    with pytest.raises(SendException):
        publish(connection, AddressHelper.exchange_address(x, "payments.new"), ["not routed"])
    # Through the exchange-to-exchange binding: the fanout passes the key on.
    publish(connection, AddressHelper.exchange_address(fan, "orders.late"), ["c"])
    assert ready(ch, q) == 3
    assert management.queue_info(q).message_count == 3

    # Unbinding by the path bind() returned: nothing more reaches the queue.
    management.unbind(to_queue)
    with pytest.raises(SendException):
        publish(connection, AddressHelper.exchange_address(x, "orders.new"), ["after unbind"])
    assert ready(ch, q) == 3

    # The consumer gets what was routed, in order (the client's own consuming pattern: a
    # handler that settles each message and stops the run when it has them all).
    collect = Collect(3)
    consuming = env.connection()
    consuming.dial()
    consumer = consuming.consumer(AddressHelper.queue_address(q), message_handler=collect)
    with pytest.raises(Collected):
        consumer.run()
    consumer.close()
    consuming.close()
    assert collect.bodies == [b"a", b"b", b"c"]
    assert ready(ch, q) == 0


def test_purge_and_delete_answer_the_message_count(names, ch, connection, management):
    q = names.queue()
    management.declare_queue(ClassicQueueSpecification(name=q))
    publish(connection, AddressHelper.queue_address(q), ["1", "2", "3"])
    assert management.purge_queue(q) == 3
    assert ready(ch, q) == 0
    publish(connection, AddressHelper.queue_address(q), ["4"])
    management.delete_queue(q)
    with pytest.raises(ValidationCodeException, match="404"):
        management.queue_info(q)
    # Deleting what is gone succeeds, as RabbitMQ 4's.
    management.delete_queue(q)
    x = names.exchange()
    management.declare_exchange(ExchangeSpecification(name=x))
    management.delete_exchange(x)
    management.delete_exchange(x)


def test_a_quorum_queue_names_its_leader_and_members(names, management):
    q = names.queue()
    management.declare_queue(QuorumQueueSpecification(name=q))
    info = management.queue_info(q)
    assert info.queue_type == QueueType.quorum
    assert info.is_durable
    assert info.leader in members(info)


def test_refusals_come_back_as_statuses_and_the_connection_goes_on(names, management):
    with pytest.raises(ValidationCodeException, match="403"):
        management.declare_queue(ClassicQueueSpecification(name="amq.mine"))
    with pytest.raises(ValidationCodeException, match="403"):
        management.declare_exchange(ExchangeSpecification(name="amq.mine"))
    with pytest.raises(ValidationCodeException, match="404"):
        management.queue_info(names.queue())
    with pytest.raises(ValidationCodeException, match="404"):
        management.purge_queue(names.queue())
    # The same link pair answers the next request.
    q = names.queue()
    management.declare_queue(ClassicQueueSpecification(name=q))
    assert management.queue_info(q).name == q


class Paired(LinkOption):
    """Link Pair CS 01: both halves carry `paired` = true and share one name."""

    def apply(self, link):
        link.properties = {symbol("paired"): True}
        link.snd_settle_mode = Link.SND_SETTLED


class Pair:
    """A bare management link pair on a python-qpid-proton connection: requests written by
    hand, to check what RabbitMQ's clients never send and how the session ends."""

    def __init__(self, connection):
        self.connection = connection
        self.sender = connection.create_sender("/management", name="pair", options=Paired())
        self.receiver = connection.create_receiver("/management", name="pair", options=Paired(),
                                                   credit=8)

    def request(self, method, path, body=None, message_id="m-1"):
        self.sender.send(ProtonMessage(id=message_id, address=path, subject=method, reply_to="$me",
                                 body=body, inferred=False))
        answer = self.receiver.receive(timeout=5)
        return int(answer.subject), answer


def test_requests_a_client_writes_by_hand_get_a_status_each():
    c = amqp10()
    try:
        pair = Pair(c)
        status, answer = pair.request("GET", "/queues/no-such-queue-here", message_id="abc")
        assert status == 404
        assert answer.correlation_id == "abc"
        assert answer.properties["http:response"] == "1.1"
        assert "not found" in answer.body
        assert pair.request("PATCH", "/queues/q")[0] == 400
        assert pair.request("PUT", "/queues/q", body={"durable": "yes"})[0] == 400
        assert pair.request("PUT", "/queues/q", body={"colour": True})[0] == 400
        assert pair.request("PUT", "/queues/q", body="not a map")[0] == 400
        assert pair.request("DELETE", "/bindings/nonsense")[0] == 400
        assert pair.request("GET", "/bindings?src=x")[0] == 400
        assert pair.request("PUT", "/exchanges/", body={"type": "direct"})[0] == 403
        assert pair.request("PUT", "/exchanges/x-bad-type", body={"type": "nope"})[0] == 400
        # Still answering.
        assert pair.request("GET", "/queues/no-such-queue-here")[0] == 404
    finally:
        c.close()


def test_a_half_without_the_paired_property_is_refused_alone():
    c = amqp10()
    try:
        with pytest.raises(LinkDetached) as refused:
            c.create_sender("/management", name="unpaired")
        assert refused.value.condition == "amqp:invalid-field"
        assert Pair(c).request("GET", "/queues/no-such-queue-here")[0] == 404
    finally:
        c.close()


@needs_api
def test_a_refused_permission_ends_the_session_with_unauthorized_access(tenant):
    """A user whose configure permission does not cover the name: RabbitMQ 4 ends the
    session with amqp:unauthorized-access; a queue the user may configure is declared."""
    tenant.permit(tenant.user, "^mine-", ".*", ".*")
    c = amqp10(tenant.user, tenant.password, vhost=tenant.vhost)
    try:
        pair = Pair(c)
        assert pair.request("PUT", "/queues/mine-1", body={})[0] == 201
        pair.sender.send(ProtonMessage(id="2", address="/queues/theirs-1", subject="PUT",
                                 reply_to="$me", body={}, inferred=False))
        session = pair.sender.link.session
        c.wait(lambda: session.state & Endpoint.REMOTE_CLOSED, timeout=5)
        assert session.remote_condition.name == "amqp:unauthorized-access"
        assert "configure access to queue 'theirs-1'" in session.remote_condition.description
    finally:
        c.close()
