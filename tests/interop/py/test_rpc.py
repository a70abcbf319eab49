"""RPC patterns: direct reply-to and private reply queues."""
import uuid

import pika
import pika.exceptions
import pytest

from conftest import channel_error, connect, get_one, queue_exists, wait_for

REPLY_TO = "amq.rabbitmq.reply-to"


def _server(conn, names):
    """A tiny RPC server on its own channel: upper-cases the body and replies
    via the default exchange to whatever reply_to it received."""
    sch = conn.channel()
    rq = names.queue("rpc")
    sch.queue_declare(rq)
    seen = []

    def on_request(ch, method, props, body):
        seen.append(props.reply_to)
        ch.basic_publish("", props.reply_to, body.upper(),
                         pika.BasicProperties(correlation_id=props.correlation_id))
        ch.basic_ack(method.delivery_tag)

    sch.basic_consume(rq, on_request)
    return rq, seen


def test_direct_reply_to_round_trip(names):
    server_conn = connect()
    client_conn = connect()
    try:
        rq, seen = _server(server_conn, names)
        cch = client_conn.channel()
        replies = []
        cch.basic_consume(REPLY_TO, lambda c, m, p, b: replies.append((p, b)), auto_ack=True)
        corr = str(uuid.uuid4())
        cch.basic_publish("", rq, b"ping",
                          pika.BasicProperties(reply_to=REPLY_TO, correlation_id=corr))

        def done():
            server_conn.process_data_events(time_limit=0.02)
            client_conn.process_data_events(time_limit=0.02)
            return bool(replies)
        assert wait_for(done, timeout=5)
        props, body = replies[0]
        assert body == b"PING"
        assert props.correlation_id == corr
        # the broker rewrote reply_to into a routable pseudo-queue name
        assert seen[0].startswith(REPLY_TO + "."), seen[0]
    finally:
        server_conn.close()
        client_conn.close()


def test_direct_reply_to_many_requests(names):
    server_conn = connect()
    client_conn = connect()
    try:
        rq, _ = _server(server_conn, names)
        cch = client_conn.channel()
        replies = {}
        cch.basic_consume(REPLY_TO,
                          lambda c, m, p, b: replies.__setitem__(p.correlation_id, b),
                          auto_ack=True)
        for i in range(50):
            cch.basic_publish("", rq, b"req%d" % i,
                              pika.BasicProperties(reply_to=REPLY_TO, correlation_id=str(i)))

        def done():
            server_conn.process_data_events(time_limit=0.02)
            client_conn.process_data_events(time_limit=0.02)
            return len(replies) == 50
        assert wait_for(done, timeout=10)
        assert replies == {str(i): b"REQ%d" % i for i in range(50)}
    finally:
        server_conn.close()
        client_conn.close()


def test_direct_reply_to_requires_no_ack(conn):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False))
    assert e.reply_code == 406


def test_direct_reply_to_publish_without_consumer_406(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.basic_publish(
        "", q, b"x", pika.BasicProperties(reply_to=REPLY_TO)))
    assert e.reply_code == 406


def test_direct_reply_to_passive_declare_ok(ch):
    ok = ch.queue_declare(REPLY_TO, passive=True).method
    assert ok.queue == REPLY_TO
    assert ok.message_count == 0


def test_reply_to_to_unknown_pseudo_queue_is_dropped(conn):
    ch = conn.channel()
    ch.basic_publish("", REPLY_TO + ".garbage", b"x")
    conn.process_data_events(time_limit=0.2)
    assert ch.is_open


def test_private_reply_queue_with_x_expires(names):
    server_conn = connect()
    client_conn = connect()
    try:
        rq, _ = _server(server_conn, names)
        cch = client_conn.channel()
        reply_q = names.queue("reply")
        cch.queue_declare(reply_q, exclusive=True, auto_delete=True,
                          arguments={"x-expires": 60000})
        replies = []
        cch.basic_consume(reply_q, lambda c, m, p, b: replies.append(b), auto_ack=True)
        cch.basic_publish("", rq, b"hi", pika.BasicProperties(reply_to=reply_q,
                                                              correlation_id="1"))

        def done():
            server_conn.process_data_events(time_limit=0.02)
            client_conn.process_data_events(time_limit=0.02)
            return bool(replies)
        assert wait_for(done, timeout=5)
        assert replies == [b"HI"]
    finally:
        server_conn.close()
        client_conn.close()


def test_passive_declare_of_a_live_reply_address(names):
    """A server may check a request's reply_to exists: the address of a live direct reply-to
    consumer answers a passive declare (one consumer, no messages); once the consumer is
    gone it is 404."""
    client_conn = connect()
    server_conn = connect()
    try:
        cch = client_conn.channel()
        tag = cch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
        q = names.queue()
        cch.queue_declare(q)
        cch.basic_publish("", q, b"req", pika.BasicProperties(reply_to=REPLY_TO))
        _, props, _ = get_one(cch, q)
        address = props.reply_to
        assert address.startswith(REPLY_TO + "."), address

        sch = server_conn.channel()
        ok = sch.queue_declare(address, passive=True).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (address, 0, 1)
        e = channel_error(sch, lambda: sch.queue_declare(address + "x", passive=True))
        assert e.reply_code == 404
        assert e.reply_text == "NOT_FOUND - no queue '%sx' in vhost '/'" % address

        cch.basic_cancel(tag)
        sch = server_conn.channel()
        e = channel_error(sch, lambda: sch.queue_declare(address, passive=True))
        assert e.reply_code == 404
    finally:
        client_conn.close()
        server_conn.close()
