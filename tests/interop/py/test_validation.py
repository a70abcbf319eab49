"""RabbitMQ's checks on declares, consumes and publishes, with its reply codes and texts:
exclusive queues (405 before anything else), queue and consumer arguments, redeclare
equivalence, the expiration property and the alternate-exchange argument."""
import pika
import pytest

from conftest import channel_error, connect, drain

LOCKED = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '%s' in vhost '/'."
          " It could be originally declared on another connection or the exclusive property"
          " value does not match that of the original declaration.")


def test_exclusive_queue_is_locked_before_any_equivalence_check(conn, names):
    q = names.queue()
    owner = conn.channel()
    owner.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 1000})
    other = connect()
    try:
        for declare in (
                lambda ch: ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 1000}),
                lambda ch: ch.queue_declare(q, durable=True, arguments={"x-message-ttl": 5}),
                lambda ch: ch.queue_declare(q, arguments={"x-expires": -1}),
                lambda ch: ch.queue_declare(q, passive=True)):
            och = other.channel()
            e = channel_error(och, lambda: declare(och))
            assert e.reply_code == 405, e
            assert e.reply_text == LOCKED % q
    finally:
        other.close()
    # the owner: a durable flag means nothing on an exclusive queue...
    owner.queue_declare(q, exclusive=True, durable=True, arguments={"x-message-ttl": 1000})
    # ...but dropping the exclusive flag is the same 405
    e = channel_error(owner, lambda: owner.queue_declare(q, arguments={"x-message-ttl": 1000}))
    assert e.reply_code == 405
    assert e.reply_text == LOCKED % q


def test_exclusive_redeclare_of_a_shared_queue_is_405(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.queue_declare(q, exclusive=True))
    assert e.reply_code == 405
    assert e.reply_text == LOCKED % q


def test_server_named_queue_can_only_be_redeclared_passively(ch):
    q = ch.queue_declare("", exclusive=True).method.queue
    assert ch.queue_declare(q, passive=True).method.queue == q
    e = channel_error(ch, lambda: ch.queue_declare(q, exclusive=True))
    assert e.reply_code == 403
    assert e.reply_text == "ACCESS_REFUSED - queue name '%s' contains reserved prefix 'amq.*'" % q


INVALID_QUEUE_ARGS = [
    ({"x-message-ttl": -1}, "{value_negative,-1}"),
    ({"x-message-ttl": "abc"}, '"expected integer, got longstr"'),
    ({"x-message-ttl": 400000000000}, "{value_too_large,400000000000}"),
    ({"x-expires": 0}, "{value_zero,0}"),
    ({"x-max-length": -1}, "{value_negative,-1}"),
    ({"x-max-length-bytes": "x"}, '"expected integer, got longstr"'),
    ({"x-max-priority": 256}, "{max_value_exceeded,256}"),
    ({"x-overflow": "foo"}, "invalid_overflow"),
    ({"x-overflow": 5}, "{unacceptable_type,signedint}"),
    ({"x-queue-mode": "foo"}, "\"unsupported queue mode 'foo'\""),
    ({"x-queue-type": "foo"}, "\"unsupported queue type 'foo'\""),
    ({"x-queue-version": 3}, "\"unsupported queue version '3'\""),
    ({"x-single-active-consumer": "yes"}, "{unacceptable_type,longstr}"),
    ({"x-dead-letter-routing-key": "rk"}, "routing_key_but_no_dlx_defined"),
    ({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": 5},
     "{unacceptable_type,signedint}"),
]


@pytest.mark.parametrize("args,why", INVALID_QUEUE_ARGS, ids=[str(a) for a, _ in INVALID_QUEUE_ARGS])
def test_invalid_queue_argument_is_406(conn, names, args, why):
    q = names.queue()
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.queue_declare(q, arguments=args))
    assert e.reply_code == 406
    key = [k for k in args if k != "x-dead-letter-exchange"][0]
    assert e.reply_text == ("PRECONDITION_FAILED - invalid arg '%s' for queue '%s' in vhost '/': %s"
                            % (key, q, why))


def test_dead_letter_exchange_must_be_a_string(conn, names):
    q = names.queue()
    for value, type_name in ((5, "signedint"), (True, "bool")):
        ch = conn.channel()
        e = channel_error(ch, lambda: ch.queue_declare(q, arguments={
            "x-dead-letter-exchange": value, "x-message-ttl": -1}))
        assert e.reply_code == 406
        assert e.reply_text == ("PRECONDITION_FAILED - invalid type '%s' for arg "
                                "'x-dead-letter-exchange' in queue '%s' in vhost '/'"
                                % (type_name, q))


def test_argument_of_another_queue_type_is_406(conn, names):
    q = names.queue()
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.queue_declare(q, arguments={"x-delivery-limit": 5}))
    assert e.reply_code == 406
    assert e.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-delivery-limit' for queue '%s'"
                            " in vhost '/' of queue type rabbit_classic_queue" % q)


def test_redeclare_inequivalent_argument_texts(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, arguments={"x-message-ttl": 1000, "x-queue-type": "classic"})
    ch.queue_declare(q, arguments={"x-message-ttl": 1000, "x-unknown": "ignored"})
    prefix = "PRECONDITION_FAILED - inequivalent arg '%s' for queue '" + q + "' in vhost '/': "
    cases = [
        ({}, "x-message-ttl", "received none but current is the value '1000' of type 'signedint'"),
        ({"x-message-ttl": "1000"}, "x-message-ttl", "received '1000' but current is '1000'"),
        ({"x-message-ttl": 1000, "x-max-length": 3}, "x-max-length",
         "received the value '3' of type 'signedint' but current is none"),
    ]
    for args, key, text in cases:
        ch = conn.channel()
        e = channel_error(ch, lambda: ch.queue_declare(q, arguments=args))
        assert e.reply_code == 406
        assert e.reply_text == prefix % key + text


@pytest.mark.parametrize("value,type_name", [("high", "longstr"), (True, "bool")])
def test_consumer_priority_must_be_an_integer(conn, names, value, type_name):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.basic_consume(q, lambda *a: None,
                                                   arguments={"x-priority": value}))
    assert e.reply_code == 406
    assert e.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-priority' for queue '%s' in "
                            "vhost '/': \"expected integer, got %s\"" % (q, type_name))
    ch = conn.channel()
    ch.basic_consume(q, lambda *a: None, arguments={"x-priority": -3})  # any integer will do


@pytest.mark.parametrize("expiration,why", [
    ("foobar", "no_integer"),
    ("-10", "{value_negative,-10}"),
    ("10abc", '{leftover_string,"abc"}'),
    ("", "no_integer"),
    ("400000000000", "{value_too_large,400000000000}"),
])
def test_invalid_expiration_is_406(conn, names, expiration, why):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.basic_publish(
        "", q, b"x", pika.BasicProperties(expiration=expiration)))
    assert e.reply_code == 406
    assert e.reply_text == "PRECONDITION_FAILED - invalid expiration '%s': %s" % (expiration, why)
    assert ch.connection.channel().queue_declare(q, passive=True).method.message_count == 0


def test_valid_expirations_are_accepted(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.confirm_delivery()
    for expiration in ("60000", "+60000", "0060000"):
        ch.basic_publish("", q, expiration.encode(), pika.BasicProperties(expiration=expiration))
    assert drain(ch, q, 3) == [b"60000", b"+60000", b"0060000"]


def test_alternate_exchange_must_be_a_string(conn, names):
    x = names.exchange()
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.exchange_declare(x, "direct",
                                                      arguments={"alternate-exchange": 5}))
    assert e.reply_code == 406
    assert e.reply_text == ("PRECONDITION_FAILED - invalid type 'signedint' for arg "
                            "'alternate-exchange' in exchange '%s' in vhost '/'" % x)
