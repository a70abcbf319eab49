"""Sender-selected distribution: the CC and BCC headers add routing keys to a publish, and
BCC never reaches a consumer (RabbitMQ's documented extension)."""
import pika

from conftest import channel_error, drain, get_one, wait_for


def _counts(ch, queues):
    return [ch.queue_declare(q, passive=True).method.message_count for q in queues]


def test_cc_and_bcc_route_through_the_default_exchange(ch, names):
    a, b, c = names.queue("a"), names.queue("b"), names.queue("c")
    for q in (a, b, c):
        ch.queue_declare(q)
    headers = {"CC": [b, 7], "BCC": [c, a], "app": "kept"}
    ch.basic_publish("", a, b"hello", pika.BasicProperties(headers=headers))
    # one copy each, even though a is both the routing key and in BCC
    assert wait_for(lambda: _counts(ch, (a, b, c)) == [1, 1, 1]), _counts(ch, (a, b, c))
    for q in (a, b, c):
        m, props, body = get_one(ch, q)
        assert body == b"hello"
        assert m.routing_key == a, "the delivery carries the publish routing key"
        assert props.headers == {"CC": [b, 7], "app": "kept"}, props.headers


def test_bcc_only_leaves_an_empty_header_table(ch, names):
    a, b = names.queue("a"), names.queue("b")
    ch.queue_declare(a)
    ch.queue_declare(b)
    ch.basic_publish("", a, b"x", pika.BasicProperties(headers={"BCC": [b]}))
    for q in (a, b):
        _, props, body = get_one(ch, q)
        assert body == b"x"
        assert props.headers == {}, props.headers


def test_cc_keys_match_direct_and_topic_bindings(ch, names):
    direct, topic = names.exchange("d"), names.exchange("t")
    ch.exchange_declare(direct, "direct")
    ch.exchange_declare(topic, "topic")
    q1, q2, q3 = names.queue("q1"), names.queue("q2"), names.queue("q3")
    for q in (q1, q2, q3):
        ch.queue_declare(q)
    ch.queue_bind(q1, direct, "k1")
    ch.queue_bind(q2, direct, "k2")
    ch.queue_bind(q3, topic, "a.*")
    ch.basic_publish(direct, "k1", b"d", pika.BasicProperties(headers={"CC": ["k2", "k2", "zz"]}))
    ch.basic_publish(topic, "nomatch", b"t", pika.BasicProperties(headers={"CC": ["a.x", "a.y"]}))
    assert wait_for(lambda: _counts(ch, (q1, q2, q3)) == [1, 1, 1]), _counts(ch, (q1, q2, q3))


def test_a_cc_route_counts_for_mandatory(conn, ch, names):
    q = names.queue()
    ch.queue_declare(q)
    returned = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m.routing_key, p.headers)))
    ch.basic_publish("", names.queue("nowhere"), b"1", pika.BasicProperties(headers={"CC": [q]}),
                     mandatory=True)
    ch.basic_publish("", "nowhere-at-all", b"2",
                     pika.BasicProperties(headers={"CC": ["nowhere-2"], "BCC": ["nowhere-3"]}),
                     mandatory=True)
    assert wait_for(lambda: len(returned) == 1, conn=conn)
    conn.process_data_events(time_limit=0.2)
    assert returned == [("nowhere-at-all", {"CC": ["nowhere-2"]})], returned
    assert drain(ch, q, 1) == [b"1"]


def test_cc_that_is_not_an_array_is_406(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.basic_publish("", q, b"x",
                                                   pika.BasicProperties(headers={"CC": q})))
    assert e.reply_code == 406
    assert e.reply_text == ('PRECONDITION_FAILED - invalid message: '
                            '{unacceptable_type_in_header,"CC",longstr}'), e.reply_text
