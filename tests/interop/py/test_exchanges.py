"""Exchange types and routing semantics."""
import pika
import pytest

from conftest import channel_error, drain, exchange_exists, get_one


def _bound_queue(ch, names, exchange, key="", arguments=None):
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, exchange, key, arguments=arguments)
    return q


def _count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def _routes(ch, exchange, key, queue, headers=None):
    """Publish with a unique body and report whether `queue` got it."""
    import uuid
    body = uuid.uuid4().bytes
    ch.basic_publish(exchange, key, body,
                     pika.BasicProperties(headers=headers) if headers is not None else None)
    m, _, got = get_one(ch, queue, timeout=0.3)
    if m is None:
        return False
    assert got == body
    return True


def test_default_exchange_routes_by_queue_name(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"via default")
    assert drain(ch, q, 1) == [b"via default"]
    # the default exchange is a direct exchange: no partial match
    assert not _routes(ch, "", q + ".x", q)


def test_default_exchange_declare_is_403(ch):
    # RabbitMQ 3.x refuses any exchange.declare (even passive) on the default
    # exchange "" with 403 ACCESS_REFUSED.
    e = channel_error(ch, lambda: ch.exchange_declare("", passive=True))
    assert e.reply_code == 403


@pytest.mark.parametrize("name", ["amq.direct", "amq.fanout", "amq.topic",
                                  "amq.headers", "amq.match", "amq.rabbitmq.trace"])
def test_predeclared_exchanges_exist(ch, name):
    ch.exchange_declare(name, passive=True)


def test_predeclared_exchange_redeclare_same_type_ok(ch):
    # Redeclaring amq.* with matching properties is allowed ...
    ch.exchange_declare("amq.direct", "direct", durable=True)


def test_declare_and_delete(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    ch.exchange_declare(x, passive=True)
    ch.exchange_delete(x)
    assert not exchange_exists(x)
    # deleting a missing exchange is fine in RabbitMQ 3.x
    ch.exchange_delete(x)


def test_passive_declare_missing_exchange_404(ch, names):
    e = channel_error(ch, lambda: ch.exchange_declare(names.exchange(), passive=True))
    assert e.reply_code == 404


def test_delete_if_unused_with_bindings_406(conn, names):
    ch = conn.channel()
    x = names.exchange()
    ch.exchange_declare(x, "fanout")
    _bound_queue(ch, names, x)
    e = channel_error(ch, lambda: ch.exchange_delete(x, if_unused=True))
    assert e.reply_code == 406
    ch = conn.channel()
    ch.exchange_declare(x, passive=True)
    ch.exchange_delete(x, if_unused=False)
    assert not exchange_exists(x)


def test_delete_if_unused_without_bindings_ok(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "fanout")
    ch.exchange_delete(x, if_unused=True)
    assert not exchange_exists(x)


def test_exchange_to_exchange_binding(ch, names):
    src = names.exchange("src")
    dst = names.exchange("dst")
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "direct")
    q = _bound_queue(ch, names, dst, "k.a")
    ch.exchange_bind(destination=dst, source=src, routing_key="k.*")
    assert _routes(ch, src, "k.a", q)
    assert not _routes(ch, src, "k.b", q)  # matched the e2e binding but not dst's queue binding
    assert not _routes(ch, src, "z.a", q)
    ch.exchange_unbind(destination=dst, source=src, routing_key="k.*")
    assert not _routes(ch, src, "k.a", q)


def test_exchange_to_exchange_fanout_chain_and_cycle(ch, names):
    a, b, c = names.exchange("a"), names.exchange("b"), names.exchange("c")
    for x in (a, b, c):
        ch.exchange_declare(x, "fanout")
    ch.exchange_bind(b, a)
    ch.exchange_bind(c, b)
    ch.exchange_bind(a, c)  # cycle: must not loop or duplicate
    q = _bound_queue(ch, names, c)
    ch.basic_publish(a, "", b"m")
    assert drain(ch, q, 1) == [b"m"]
    conn = ch.connection
    conn.process_data_events(time_limit=0.2)
    assert _count(ch, q) == 0


def test_queue_bound_twice_via_two_paths_gets_one_copy(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, x, "a")
    ch.queue_bind(q, x, "a")  # duplicate binding is idempotent
    ch.queue_bind(q, "amq.fanout")
    y = names.exchange()
    ch.exchange_declare(y, "topic")
    ch.queue_bind(q, y, "#")
    ch.queue_bind(q, y, "a")
    ch.basic_publish(y, "a", b"once")
    assert drain(ch, q, 1) == [b"once"]
    ch.connection.process_data_events(time_limit=0.2)
    assert _count(ch, q) == 0
    ch.queue_unbind(q, "amq.fanout")


def test_alternate_exchange(ch, names):
    ae = names.exchange("ae")
    x = names.exchange()
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
    q_ae = _bound_queue(ch, names, ae)
    q_main = _bound_queue(ch, names, x, "known")
    ch.basic_publish(x, "known", b"routed")
    ch.basic_publish(x, "unknown", b"unroutable")
    assert drain(ch, q_main, 1) == [b"routed"]
    assert drain(ch, q_ae, 1) == [b"unroutable"]


def test_alternate_exchange_mandatory_no_return(conn, names):
    # A message routed via the alternate exchange is "routed": no basic.return.
    ch = conn.channel()
    ch.confirm_delivery()
    ae = names.exchange("ae")
    x = names.exchange()
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(x, "direct", arguments={"alternate-exchange": ae})
    q_ae = _bound_queue(ch, names, ae)
    ch.basic_publish(x, "nowhere", b"m", mandatory=True)  # no UnroutableError
    assert drain(ch, q_ae, 1) == [b"m"]


def test_internal_exchange_publish_403(conn, names):
    ch = conn.channel()
    x = names.exchange()
    ch.exchange_declare(x, "fanout", internal=True)
    e = channel_error(ch, lambda: ch.basic_publish(x, "", b"x"))
    assert e.reply_code == 403
    assert e.reply_text.startswith("ACCESS_REFUSED"), e.reply_text


def test_internal_exchange_reachable_via_e2e(ch, names):
    src = names.exchange("src")
    internal = names.exchange("int")
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(internal, "fanout", internal=True)
    ch.exchange_bind(internal, src)
    q = _bound_queue(ch, names, internal)
    ch.basic_publish(src, "", b"through")
    assert drain(ch, q, 1) == [b"through"]


def test_direct_exchange(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    qa = _bound_queue(ch, names, x, "a")
    qb = _bound_queue(ch, names, x, "b")
    ch.queue_bind(qb, x, "a")  # qb bound with two keys
    ch.basic_publish(x, "a", b"to-a")
    ch.basic_publish(x, "b", b"to-b")
    ch.basic_publish(x, "c", b"to-nobody")
    ch.basic_publish(x, "A", b"case-sensitive")
    assert drain(ch, qa, 1) == [b"to-a"]
    assert drain(ch, qb, 2) == [b"to-a", b"to-b"]
    ch.connection.process_data_events(time_limit=0.1)
    assert _count(ch, qa) == 0 and _count(ch, qb) == 0


def test_direct_exchange_empty_key(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    q = _bound_queue(ch, names, x, "")
    assert _routes(ch, x, "", q)
    assert not _routes(ch, x, "a", q)


def test_fanout_exchange_ignores_key(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "fanout")
    qs = [_bound_queue(ch, names, x, k) for k in ("", "a", "whatever")]
    ch.basic_publish(x, "zzz", b"all")
    for q in qs:
        assert drain(ch, q, 1) == [b"all"]


TOPIC_CASES = [
    # (binding, routing key, matches)
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.*.c", "a.b.b.c", False),
    ("*", "a", True),
    ("*", "", False),    # RabbitMQ: an empty routing key has zero words ...
    ("*", "a.b", False),
    ("*.*", "a.", True),  # ... but empty words between/after dots do count
    ("*.*", ".", True),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("a.#", "ab", False),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#.c", "a.b.cc", False),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.b.b.c", True),
    ("a.#.c", "a.b.b.d", False),
    ("#", "", True),
    ("#", "anything.at.all", True),
    ("#.#", "", True),
    ("#.#.#", "a.b", True),
    ("#.*", "", False),
    ("#.*", "a.b", True),
    ("*.#.*", "a", False),
    ("*.#.*", "a.b", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("", "", True),
    ("", "a", False),
    ("a..c", "a..c", True),
    ("a.*.c", "a..c", True),
    ("*.b.*", "..", False),
]


def test_topic_exchange_patterns(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "topic")
    bindings = sorted({b for b, _, _ in TOPIC_CASES})
    queues = {b: _bound_queue(ch, names, x, b) for b in bindings}
    failures = []
    for i, (binding, key, expected) in enumerate(TOPIC_CASES):
        body = ("case-%d" % i).encode()
        ch.basic_publish(x, key, body)
    # confirm publishes are processed: a sync round-trip on the same channel
    ch.queue_declare(queues[bindings[0]], passive=True)
    got = {b: set() for b in bindings}
    for b, q in queues.items():
        while True:
            m, _, body = ch.basic_get(q, auto_ack=True)
            if m is None:
                break
            got[b].add(body)
    for i, (binding, key, expected) in enumerate(TOPIC_CASES):
        body = ("case-%d" % i).encode()
        if (body in got[binding]) != expected:
            failures.append((binding, key, expected))
    assert not failures, "topic mismatches (binding, key, expected): %r" % failures


def test_topic_exchange_fast_path_multiple_bindings_same_queue(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "topic")
    q = _bound_queue(ch, names, x, "a.*")
    ch.queue_bind(q, x, "*.b")
    ch.queue_bind(q, x, "#")
    ch.basic_publish(x, "a.b", b"one")
    assert drain(ch, q, 1) == [b"one"]
    ch.connection.process_data_events(time_limit=0.1)
    assert _count(ch, q) == 0
    ch.queue_unbind(q, x, "#")
    ch.queue_unbind(q, x, "*.b")
    assert not _routes(ch, x, "c.b", q)
    assert _routes(ch, x, "a.z", q)


HEADERS_CASES = [
    # (binding args, message headers, matches)
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 2, "b": "x"}, False),
    ({"x-match": "any", "a": 1, "b": "x"}, {"a": 1}, True),
    ({"x-match": "any", "a": 1, "b": "x"}, {"b": "x", "z": 0}, True),
    ({"x-match": "any", "a": 1, "b": "x"}, {"a": 2, "b": "y"}, False),
    ({"x-match": "any", "a": 1, "b": "x"}, {}, False),
    ({"a": 1}, {"a": 1}, True),              # default x-match is all
    ({"a": 1, "b": 2}, {"a": 1}, False),
    ({"x-match": "all"}, {}, True),          # no conditions: all matches everything
    ({"x-match": "all"}, {"q": 1}, True),
    ({"x-match": "any"}, {"q": 1}, False),   # ... and any matches nothing
    # a void (None) value in the binding matches on presence only
    ({"x-match": "all", "p": None}, {"p": "anything"}, True),
    ({"x-match": "all", "p": None}, {"other": 1}, False),
    # x- prefixed headers are ignored by all/any ...
    ({"x-match": "all", "x-foo": "bar"}, {}, True),
    ({"x-match": "any", "x-foo": "bar", "a": 1}, {"x-foo": "bar"}, False),
    # ... but considered by all-with-x / any-with-x (RabbitMQ >= 3.10)
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"}, True),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {}, False),
    ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar"}, True),
    ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "baz"}, False),
]


@pytest.mark.parametrize("exchange_name", ["custom", "amq.match", "amq.headers"])
def test_headers_exchange(ch, names, exchange_name):
    if exchange_name == "custom":
        x = names.exchange()
        ch.exchange_declare(x, "headers")
    else:
        x = exchange_name
    queues = []
    for args, _, _ in HEADERS_CASES:
        q = _bound_queue(ch, names, x, "ignored-key", arguments=args)
        queues.append(q)
    failures = []
    for i, ((args, headers, expected), q) in enumerate(zip(HEADERS_CASES, queues)):
        body = ("h-%d" % i).encode()
        # A unique header keeps other cases' queues from also matching on empty conditions.
        ch.basic_publish(x, "any-key", body, pika.BasicProperties(headers=headers))
    ch.queue_declare(queues[0], passive=True)  # round-trip
    for i, ((args, headers, expected), q) in enumerate(zip(HEADERS_CASES, queues)):
        body = ("h-%d" % i).encode()
        got = set()
        while True:
            m, _, b = ch.basic_get(q, auto_ack=True)
            if m is None:
                break
            got.add(b)
        if (body in got) != expected:
            failures.append((args, headers, expected))
    assert not failures, "headers mismatches: %r" % failures


def test_headers_exchange_invalid_x_match_406(conn, names):
    ch = conn.channel()
    x = names.exchange()
    ch.exchange_declare(x, "headers")
    q = names.queue()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.queue_bind(q, x, "", arguments={"x-match": "some"}))
    assert e.reply_code == 406


def test_headers_unbind_with_same_arguments(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "headers")
    q = names.queue()
    ch.queue_declare(q)
    args = {"x-match": "any", "k": "v"}
    ch.queue_bind(q, x, "", arguments=args)
    assert _routes(ch, x, "", q, headers={"k": "v"})
    ch.queue_unbind(q, x, "", arguments=args)
    assert not _routes(ch, x, "", q, headers={"k": "v"})


def test_unbind_missing_binding_is_ok(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_unbind(q, "amq.direct", "never-bound")


def test_auto_delete_exchange_removed_after_last_binding(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct", auto_delete=True)
    assert exchange_exists(x)  # never bound: stays
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, x, "a")
    ch.queue_bind(q, x, "b")
    ch.queue_unbind(q, x, "a")
    assert exchange_exists(x)
    ch.queue_unbind(q, x, "b")
    assert not exchange_exists(x)
