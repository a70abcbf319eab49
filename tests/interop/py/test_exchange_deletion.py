"""Deleting exchanges and bindings as RabbitMQ does: bindings to a deleted exchange go with
it, an auto-delete exchange goes when it loses its last binding as a source (cascading), and
unbinding what does not exist is fine."""
import pika

from conftest import channel_error, drain, exchange_exists, wait_for


def test_auto_delete_source_goes_with_its_last_exchange_binding(ch, names):
    src, dst = names.exchange("src"), names.exchange("dst")
    ch.exchange_declare(src, "fanout", auto_delete=True)
    ch.exchange_declare(dst, "fanout", auto_delete=True)
    ch.exchange_bind(destination=dst, source=src)
    ch.exchange_unbind(destination=dst, source=src)
    assert not exchange_exists(src), "the source lost its last binding"
    assert exchange_exists(dst), "being a destination does not keep an exchange, nor delete it"


def test_deleting_a_destination_cascades_through_auto_delete_sources(ch, names):
    a, b, c = names.exchange("a"), names.exchange("b"), names.exchange("c")
    keeper = names.exchange("keeper")
    ch.exchange_declare(a, "fanout", auto_delete=True)
    ch.exchange_declare(b, "fanout", auto_delete=True)
    ch.exchange_declare(c, "fanout")
    ch.exchange_declare(keeper, "fanout", auto_delete=True)
    ch.exchange_bind(destination=b, source=a)  # a -> b -> c
    ch.exchange_bind(destination=c, source=b)
    ch.exchange_bind(destination=c, source=keeper)  # keeper -> c and keeper -> q
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, keeper)
    ch.exchange_delete(c)
    assert not exchange_exists(b), "b lost its only binding (to c)"
    assert not exchange_exists(a), "then a lost its only binding (to b)"
    assert exchange_exists(keeper), "keeper still has a binding"
    ch.basic_publish(keeper, "", b"still routed")
    assert drain(ch, q, 1) == [b"still routed"]


def test_deleting_a_queue_cascades_to_auto_delete_exchanges(ch, names):
    x1, x2 = names.exchange("x1"), names.exchange("x2")
    ch.exchange_declare(x1, "fanout", auto_delete=True)
    ch.exchange_declare(x2, "fanout", auto_delete=True)
    q = names.queue()
    ch.queue_declare(q)
    ch.exchange_bind(destination=x2, source=x1)
    ch.queue_bind(q, x2)
    ch.queue_delete(q)
    assert not exchange_exists(x2)
    assert not exchange_exists(x1)


def test_bindings_to_a_deleted_exchange_go_with_it(ch, names):
    src, dst = names.exchange("src"), names.exchange("dst")
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(destination=dst, source=src)
    ch.exchange_delete(dst)
    # a new exchange of the same name is not reached through the old binding
    ch.exchange_declare(dst, "fanout")
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, dst)
    ch.basic_publish(src, "", b"must not arrive")
    ch.basic_publish(dst, "", b"direct")
    assert drain(ch, q, 2, timeout=1.0) == [b"direct"]
    # and src is unused now: if-unused deletion succeeds
    ch.exchange_delete(src, if_unused=True)
    assert not exchange_exists(src)


def test_if_unused_looks_only_at_bindings_from_the_exchange(conn, names):
    src, dst = names.exchange("src"), names.exchange("dst")
    ch = conn.channel()
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(dst, "fanout")
    ch.exchange_bind(destination=dst, source=src)
    e = channel_error(ch, lambda: ch.exchange_delete(src, if_unused=True))
    assert e.reply_code == 406
    assert e.reply_text == "PRECONDITION_FAILED - exchange '%s' in vhost '/' in use" % src
    ch = conn.channel()
    ch.exchange_delete(dst, if_unused=True)  # only a destination: not in use
    assert not exchange_exists(dst)


def test_unbinding_what_does_not_exist_is_ok(ch, names):
    q, x = names.queue(), names.exchange()
    ch.queue_declare(q)
    ch.exchange_declare(x, "direct")
    assert isinstance(ch.queue_unbind(q, x, "never-bound").method, pika.spec.Queue.UnbindOk)
    assert isinstance(ch.queue_unbind(names.queue("missing"), x, "k").method,
                      pika.spec.Queue.UnbindOk)
    assert isinstance(ch.queue_unbind(q, names.exchange("missing"), "k").method,
                      pika.spec.Queue.UnbindOk)
    assert isinstance(ch.exchange_unbind(names.exchange("d"), x, "k").method,
                      pika.spec.Exchange.UnbindOk)
    assert isinstance(ch.exchange_unbind(x, names.exchange("s"), "k").method,
                      pika.spec.Exchange.UnbindOk)
    assert ch.is_open


def test_unbinding_nothing_keeps_an_auto_delete_exchange(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "fanout", auto_delete=True)
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_unbind(q, x)
    ch.exchange_unbind(destination="amq.fanout", source=x)
    assert exchange_exists(x), "no binding was removed, so nothing was auto-deleted"


def test_unbind_from_the_default_exchange_is_403(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    e = channel_error(ch, lambda: ch.queue_unbind(q, "", q))
    assert e.reply_code == 403
    assert e.reply_text == "ACCESS_REFUSED - operation not permitted on the default exchange"


def test_auto_delete_exchange_goes_when_its_last_queue_binding_goes(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct", auto_delete=True)
    q1, q2 = names.queue(), names.queue()
    ch.queue_declare(q1)
    ch.queue_declare(q2)
    ch.queue_bind(q1, x, "k")
    ch.queue_bind(q2, x, "k")
    ch.queue_unbind(q1, x, "k")
    assert exchange_exists(x)
    ch.queue_unbind(q2, x, "k")
    assert wait_for(lambda: not exchange_exists(x))


def test_system_and_default_exchanges_cannot_be_deleted(conn):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.exchange_delete("amq.direct"))
    assert e.reply_code == 403
    assert e.reply_text == ("ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost"
                            " '/' not allowed")
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.exchange_delete(""))
    assert e.reply_code == 403
    assert e.reply_text == "ACCESS_REFUSED - operation not permitted on the default exchange"
