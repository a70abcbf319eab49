"""Channel-level errors close only the offending channel, with RabbitMQ's reply codes."""
import pika
import pika.exceptions
import pytest

from conftest import channel_error, connect, get_one


def test_404_closes_only_that_channel(conn, names):
    ch1 = conn.channel()
    ch2 = conn.channel()
    q = names.queue()
    ch2.queue_declare(q)
    e = channel_error(ch1, lambda: ch1.queue_declare(names.queue(), passive=True))
    assert e.reply_code == 404
    assert e.reply_text.startswith("NOT_FOUND"), e.reply_text
    assert ch1.is_closed
    assert conn.is_open
    assert ch2.is_open
    ch2.basic_publish("", q, b"still works")
    m, _, body = get_one(ch2, q)
    assert body == b"still works"
    # and a fresh channel can be opened on the same connection
    ch3 = conn.channel()
    assert ch3.queue_declare(q, passive=True).method.message_count == 0


def test_403_declare_amq_prefixed_queue(ch):
    e = channel_error(ch, lambda: ch.queue_declare("amq.foo"))
    assert e.reply_code == 403
    assert e.reply_text.startswith("ACCESS_REFUSED"), e.reply_text


def test_403_declare_amq_prefixed_exchange(ch):
    e = channel_error(ch, lambda: ch.exchange_declare("amq.foo-bar", "direct"))
    assert e.reply_code == 403


def test_406_redeclare_different_durable(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, durable=False)
    e = channel_error(ch, lambda: ch.queue_declare(q, durable=True))
    assert e.reply_code == 406
    assert e.reply_text.startswith("PRECONDITION_FAILED"), e.reply_text
    assert "durable" in e.reply_text


def test_406_redeclare_different_arguments(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, arguments={"x-message-ttl": 60000})
    # identical redeclare is fine
    ch.queue_declare(q, arguments={"x-message-ttl": 60000})
    e = channel_error(ch, lambda: ch.queue_declare(q, arguments={"x-message-ttl": 1000}))
    assert e.reply_code == 406
    assert "x-message-ttl" in e.reply_text


def test_406_redeclare_exchange_different_type(conn, names):
    x = names.exchange()
    ch = conn.channel()
    ch.exchange_declare(x, "direct")
    ch.exchange_declare(x, "direct")  # idempotent
    e = channel_error(ch, lambda: ch.exchange_declare(x, "fanout"))
    assert e.reply_code == 406
    assert e.reply_text.startswith("PRECONDITION_FAILED"), e.reply_text


def test_406_redeclare_exchange_different_durable(conn, names):
    x = names.exchange()
    ch = conn.channel()
    ch.exchange_declare(x, "topic", durable=False)
    e = channel_error(ch, lambda: ch.exchange_declare(x, "topic", durable=True))
    assert e.reply_code == 406


def test_405_exclusive_queue_of_other_connection(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, exclusive=True)
    other = connect()
    try:
        och = other.channel()
        e = channel_error(och, lambda: och.queue_declare(q))
        assert e.reply_code == 405
        assert e.reply_text.startswith("RESOURCE_LOCKED"), e.reply_text
        och = other.channel()
        e = channel_error(och, lambda: och.queue_declare(q, passive=True))
        assert e.reply_code == 405
        och = other.channel()

        def consume():
            och.basic_consume(q, lambda *a: None)
        e = channel_error(och, consume)
        assert e.reply_code == 405
        och = other.channel()
        e = channel_error(och, lambda: och.queue_delete(q))
        assert e.reply_code == 405
        # the owner is unaffected
        assert ch.is_open
        ch.queue_declare(q, passive=True)
    finally:
        other.close()


def test_406_ack_unknown_delivery_tag(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.basic_ack(delivery_tag=999))
    assert e.reply_code == 406
    assert "unknown delivery tag" in e.reply_text
    assert conn.is_open


def test_406_double_ack(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    m, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_ack(m.delivery_tag)

    e = channel_error(ch, lambda: ch.basic_ack(m.delivery_tag))
    assert e.reply_code == 406
    # the message was acked once and is gone
    ch2 = conn.channel()
    assert ch2.queue_declare(q, passive=True).method.message_count == 0


def test_406_ack_on_autoack_get(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    m, _, _ = get_one(ch, q, auto_ack=True)
    e = channel_error(ch, lambda: ch.basic_ack(m.delivery_tag))
    assert e.reply_code == 406


def test_404_publish_to_missing_exchange(conn, names):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.basic_publish(names.exchange(), "rk", b"x"))
    assert e.reply_code == 404
    assert e.reply_text.startswith("NOT_FOUND"), e.reply_text
    assert conn.is_open


def test_404_bind_missing_queue_or_exchange(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.queue_bind(q, names.exchange(), "rk"))
    assert e.reply_code == 404
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.queue_bind(names.queue(), "amq.direct", "rk"))
    assert e.reply_code == 404


def test_404_consume_missing_queue(conn, names):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.basic_consume(names.queue(), lambda *a: None))
    assert e.reply_code == 404


def test_404_get_missing_queue(conn, names):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.basic_get(names.queue()))
    assert e.reply_code == 404


def test_403_delete_default_or_amq_exchange(conn):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.exchange_delete("amq.direct"))
    assert e.reply_code == 403
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.exchange_delete(""))
    assert e.reply_code == 403


def test_403_bind_to_default_exchange(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.queue_bind(q, "", "other-key"))
    assert e.reply_code == 403


def test_503_unknown_exchange_type_closes_connection(names):
    # RabbitMQ treats an unknown exchange type as a connection-level
    # COMMAND_INVALID (503), not a channel error.
    c = connect()
    ch = c.channel()
    with pytest.raises((pika.exceptions.ConnectionClosedByBroker,
                        pika.exceptions.ChannelClosedByBroker,
                        pika.exceptions.StreamLostError)) as ei:
        ch.exchange_declare(names.exchange(), "no-such-type")
        c.process_data_events(time_limit=1)
    e = ei.value
    assert getattr(e, "reply_code", None) == 503, repr(e)
    assert e.reply_text == "COMMAND_INVALID - unknown exchange type 'no-such-type'", e.reply_text
    assert isinstance(e, pika.exceptions.ConnectionClosedByBroker), repr(e)
    assert c.is_closed


def test_channel_close_and_reopen_many_times(conn):
    for _ in range(50):
        c = conn.channel()
        c.close()
    assert conn.is_open
    conn.channel().queue_declare("", exclusive=True)
