// RabbitMQ semantics seen through amqp091-go: names with CR/LF, sender-selected
// distribution (CC/BCC), the exchange auto-delete cascade and the last-declared queue.
package interop

import (
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func getOne(t *testing.T, ch *amqp.Channel, q string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(q, true)
		must(t, err, "get "+q)
		if ok {
			return d
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no message in %s", q)
	return amqp.Delivery{}
}

func TestQueueAndExchangeNamesLoseCRLF(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q, x := n.queue("crlf"), n.exchange("crlf")
	ok, err := ch.QueueDeclare(q+"\r\n", false, false, false, false, nil)
	must(t, err, "declare")
	if ok.Name != q {
		t.Fatalf("declare-ok names %q, want %q", ok.Name, q)
	}
	must(t, ch.ExchangeDeclare("\n"+x, "direct", false, false, false, false, nil), "exchange declare")
	must(t, ch.ExchangeDeclarePassive(x, "direct", false, false, false, false, nil), "passive")
	must(t, ch.QueueBind(q+"\r", "k", x+"\n", false, nil), "bind")
	must(t, ch.Publish(x, "k", false, false, amqp.Publishing{Body: []byte("crlf")}), "publish")
	if d := getOne(t, ch, q); string(d.Body) != "crlf" {
		t.Fatalf("got %q", d.Body)
	}
	must(t, ch.ExchangeDelete(x+"\r\n", false, false), "exchange delete")
	err = ch.ExchangeDeclarePassive(x, "direct", false, false, false, false, nil)
	if e := amqpErr(err); e == nil || e.Code != amqp.NotFound {
		t.Fatalf("exchange %s should be deleted: %v", x, err)
	}
}

func TestCCAndBCCHeadersAddRoutingKeys(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	a, b, c := n.queue("a"), n.queue("b"), n.queue("c")
	for _, q := range []string{a, b, c} {
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		must(t, err, "declare "+q)
	}
	must(t, ch.Publish("", a, false, false, amqp.Publishing{
		Headers: amqp.Table{"CC": []interface{}{b}, "BCC": []interface{}{c}, "app": "kept"},
		Body:    []byte("fan"),
	}), "publish")
	for _, q := range []string{a, b, c} {
		d := getOne(t, ch, q)
		if string(d.Body) != "fan" || d.RoutingKey != a {
			t.Fatalf("%s: body %q routing key %q", q, d.Body, d.RoutingKey)
		}
		want := amqp.Table{"CC": []interface{}{b}, "app": "kept"}
		if !reflect.DeepEqual(d.Headers, want) {
			t.Fatalf("%s: headers %v, want %v (BCC removed)", q, d.Headers, want)
		}
	}
}

func TestAutoDeleteCascadeAcrossExchangeBindings(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	a, b, c := n.exchange("a"), n.exchange("b"), n.exchange("c")
	must(t, ch.ExchangeDeclare(a, "fanout", false, true, false, false, nil), "declare a")
	must(t, ch.ExchangeDeclare(b, "fanout", false, true, false, false, nil), "declare b")
	must(t, ch.ExchangeDeclare(c, "fanout", false, false, false, false, nil), "declare c")
	must(t, ch.ExchangeBind(b, "", a, false, nil), "bind a->b")
	must(t, ch.ExchangeBind(c, "", b, false, nil), "bind b->c")
	must(t, ch.ExchangeDelete(c, false, false), "delete c")
	for _, x := range []string{a, b} {
		pch := channel(t, dial(t))
		err := pch.ExchangeDeclarePassive(x, "fanout", false, true, false, false, nil)
		if e := amqpErr(err); e == nil || e.Code != amqp.NotFound {
			t.Fatalf("%s should be gone with its last binding: %v", x, err)
		}
	}
}

func TestEmptyQueueNameMeansLastDeclared(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("last")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	// empty queue and routing key: bound with the queue's name as the key
	must(t, ch.QueueBind("", "", "amq.direct", false, nil), "bind")
	must(t, ch.Publish("amq.direct", q, false, false, amqp.Publishing{Body: []byte("x")}), "publish")
	if d := getOne(t, ch, ""); string(d.Body) != "x" || d.RoutingKey != q {
		t.Fatalf("got %q via %q", d.Body, d.RoutingKey)
	}
	count, err := ch.QueueDelete("", false, false, false)
	must(t, err, "delete")
	if count != 0 {
		t.Fatalf("deleted %d messages", count)
	}
	pch := channel(t, dial(t))
	if _, err := pch.QueueDeclarePassive(q, false, false, false, false, nil); amqpErr(err) == nil {
		t.Fatalf("queue %s still exists", q)
	}
}
