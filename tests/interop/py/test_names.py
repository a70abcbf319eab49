"""How queue and exchange names are read: CR and LF are stripped where RabbitMQ strips them
(declare, delete, bind, unbind — not publish, consume, get or purge), and an empty queue name
means the channel's last declared queue."""
import pika

from amqp_raw import RawConnection
from conftest import AMQP_URL, channel_error, connect, drain, exchange_exists, get_one, \
    queue_exists


def test_cr_lf_stripped_in_declare_bind_unbind_delete(ch, names):
    x, q = names.exchange(), names.queue()
    raw = RawConnection(AMQP_URL)
    try:
        raw.handshake()
        raw.open_channel(1)
        # pika waits for a declare-ok naming the queue as sent, so declares with CR/LF go
        # over the raw client
        assert raw.queue_declare(1, q[:5] + "\r\n" + q[5:] + "\n") == q
    finally:
        raw.close()
    ch.exchange_declare(x[:3] + "\n" + x[3:] + "\r", "fanout")
    ch.exchange_declare(x, passive=True)
    ch.queue_bind(q + "\n", "\r" + x, routing_key="")
    ch.basic_publish(x, "", b"via the binding")
    assert drain(ch, q, 1) == [b"via the binding"]
    ch.queue_unbind("\n" + q, x + "\r\n", routing_key="")
    ch.basic_publish(x, "", b"unbound")
    assert drain(ch, q, 1, timeout=0.5) == []
    ch.exchange_delete(x + "\n")
    assert not exchange_exists(x)
    ch.queue_delete(q + "\r")
    assert not queue_exists(queue=q)


def test_cr_lf_stripped_in_exchange_to_exchange_bindings(ch, names):
    src, dst, q = names.exchange("src"), names.exchange("dst"), names.queue()
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(dst, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, dst)
    ch.exchange_bind(destination=dst + "\n", source="\r" + src)
    ch.basic_publish(src, "", b"hop")
    assert drain(ch, q, 1) == [b"hop"]
    ch.exchange_unbind(destination=dst + "\r\n", source=src + "\n")
    ch.basic_publish(src, "", b"no hop")
    assert drain(ch, q, 1, timeout=0.5) == []


def test_cr_lf_kept_in_publish_get_purge_consume(conn, names):
    q, x = names.queue(), names.exchange()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.exchange_declare(x, "fanout")
    for call in (lambda c: c.basic_get(q + "\n"),
                 lambda c: c.queue_purge(q + "\n"),
                 lambda c: c.basic_consume(q + "\r", lambda *a: None)):
        ch = conn.channel()
        e = channel_error(ch, lambda: call(ch))
        assert e.reply_code == 404
        assert e.reply_text.startswith("NOT_FOUND - no queue '%s" % q), e.reply_text
    ch = conn.channel()
    ch.confirm_delivery()
    e = channel_error(ch, lambda: ch.basic_publish(x + "\n", "", b"x"))
    assert e.reply_code == 404
    assert e.reply_text == "NOT_FOUND - no exchange '%s\n' in vhost '/'" % x


def test_empty_names_mean_the_last_declared_queue(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    # empty queue and routing key: the binding key is the queue's name
    ch.queue_bind("", "amq.direct")
    ch.basic_publish("amq.direct", q, b"one")
    m, _, body = get_one(ch, "")
    assert body == b"one"
    assert m.routing_key == q
    ch.basic_publish("amq.direct", q, b"two")
    assert ch.queue_purge("").method.message_count == 1
    ch.queue_unbind("", "amq.direct")
    ch.basic_publish("amq.direct", q, b"unbound")
    assert drain(ch, q, 1, timeout=0.5) == []
    got = []
    ch.basic_consume("", lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", q, b"consumed")
    while not got:
        ch.connection.process_data_events(time_limit=0.05)
    assert got == [b"consumed"]
    ch.queue_delete("")
    assert not queue_exists(queue=q)


def test_empty_queue_name_with_a_routing_key_binds_that_key(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind("", "amq.direct", "explicit-" + q)
    ch.basic_publish("amq.direct", "explicit-" + q, b"k")
    ch.basic_publish("amq.direct", q, b"not bound by name")
    assert drain(ch, q, 2, timeout=1.0) == [b"k"]


def test_empty_queue_name_before_any_declare_is_404(names):
    c = connect()
    try:
        for call in (lambda ch: ch.queue_bind("", "amq.direct"),
                     lambda ch: ch.queue_unbind("", "amq.direct"),
                     lambda ch: ch.basic_get(""),
                     lambda ch: ch.queue_purge(""),
                     lambda ch: ch.basic_consume("", lambda *a: None),
                     lambda ch: ch.queue_delete("")):
            ch = c.channel()
            e = channel_error(ch, lambda: call(ch))
            assert e.reply_code == 404
            assert e.reply_text == "NOT_FOUND - no previously declared queue"
    finally:
        c.close()
