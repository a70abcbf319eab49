// Consume-side semantics RabbitMQ clients rely on, driven by amqp091-go: consumer priorities,
// a global prefetch shared fairly between queues, acks inside a transaction, length limits
// when messages are requeued, and the dead-letter cycle rule.
package interop

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func declare(t *testing.T, ch *amqp.Channel, q string, args amqp.Table) {
	t.Helper()
	_, err := ch.QueueDeclare(q, false, false, false, false, args)
	must(t, err, "declare "+q)
}

func publishN(t *testing.T, ch *amqp.Channel, q string, n int, prefix string) {
	t.Helper()
	for i := 1; i <= n; i++ {
		must(t, ch.Publish("", q, false, false, amqp.Publishing{Body: []byte(fmt.Sprintf("%s%d", prefix, i))}), "publish")
	}
}

func ready(t *testing.T, c *amqp.Connection, q string) int {
	t.Helper()
	ch := channel(t, c)
	defer ch.Close()
	p, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	must(t, err, "passive declare")
	return p.Messages
}

func waitReady(t *testing.T, c *amqp.Connection, q string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ready(t, c, q) != want {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %d ready, want %d", q, ready(t, c, q), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func bodies(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

func TestConsumerPriorities(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	q := n.queue("prio")
	declare(t, channel(t, c), q, nil)
	consume := func(priority int32, prefetch int) <-chan amqp.Delivery {
		ch := channel(t, c)
		must(t, ch.Qos(prefetch, 0, false), "qos")
		ds, err := ch.Consume(q, "", false, false, false, false, amqp.Table{"x-priority": priority})
		must(t, err, "consume")
		return ds
	}
	low := consume(-1, 0)
	high := consume(10, 3)
	publishN(t, channel(t, c), q, 8, "m")
	got := consumeN(t, high, 3, 5*time.Second)
	if fmt.Sprint(bodies(got)) != "[m1 m2 m3]" {
		t.Fatalf("high priority got %v", bodies(got))
	}
	rest := consumeN(t, low, 5, 5*time.Second)
	if fmt.Sprint(bodies(rest)) != "[m4 m5 m6 m7 m8]" {
		t.Fatalf("low priority got %v", bodies(rest))
	}
}

func TestGlobalPrefetchSharedFairlyBetweenQueues(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	ch := channel(t, c)
	q1, q2 := n.queue("g1"), n.queue("g2")
	declare(t, ch, q1, nil)
	declare(t, ch, q2, nil)
	publishN(t, ch, q1, 30, "a")
	publishN(t, ch, q2, 30, "b")
	must(t, ch.Qos(1, 0, true), "global qos")
	d1, err := ch.Consume(q1, "c1", false, false, false, false, nil)
	must(t, err, "consume q1")
	d2, err := ch.Consume(q2, "c2", false, false, false, false, nil)
	must(t, err, "consume q2")
	count := map[string]int{}
	for i := 0; i < 20; i++ {
		select {
		case d := <-d1:
			count["q1"]++
			must(t, d.Ack(false), "ack")
		case d := <-d2:
			count["q2"]++
			must(t, d.Ack(false), "ack")
		case <-time.After(5 * time.Second):
			t.Fatalf("stalled after %v", count)
		}
	}
	if count["q1"] < 5 || count["q2"] < 5 {
		t.Fatalf("one queue starved the other: %v", count)
	}
}

func TestTxAckOfSettledTagFailsAtOnce(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	ch := channel(t, c)
	q := n.queue("txack")
	declare(t, ch, q, nil)
	publishN(t, ch, q, 1, "m")
	must(t, ch.Tx(), "tx.select")
	waitReady(t, c, q, 1)
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	must(t, d.Ack(false), "ack")
	must(t, d.Ack(false), "second ack is sent; the broker answers with channel.close")
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 || e.Reason != fmt.Sprintf("PRECONDITION_FAILED - unknown delivery tag %d", d.DeliveryTag) {
			t.Fatalf("close %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no 406 before commit")
	}
	waitReady(t, c, q, 1) // the uncommitted ack went with the channel
}

func TestRequeueOverMaxLengthDropsFromHead(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	ch := channel(t, c)
	q := n.queue("maxlen")
	declare(t, ch, q, amqp.Table{"x-max-length": int32(2)})
	publishN(t, ch, q, 2, "old")
	waitReady(t, c, q, 2)
	var last amqp.Delivery
	for i := 0; i < 2; i++ {
		d, ok, err := ch.Get(q, false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		last = d
	}
	publishN(t, ch, q, 2, "new")
	waitReady(t, c, q, 2)
	must(t, last.Nack(true, true), "nack requeue")
	waitReady(t, c, q, 2)
	var got []string
	for i := 0; i < 2; i++ {
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		got = append(got, string(d.Body))
	}
	if fmt.Sprint(got) != "[new1 new2]" {
		t.Fatalf("after requeue: %v", got)
	}
}

func TestDeadLetterBackIntoOwnQueueIsDropped(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	ch := channel(t, c)
	dlx := n.exchange("dlx")
	must(t, ch.ExchangeDeclare(dlx, "fanout", false, false, false, false, nil), "dlx")
	q, observer := n.queue("cycle"), n.queue("observer")
	declare(t, ch, q, amqp.Table{"x-dead-letter-exchange": dlx, "x-message-ttl": int32(300)})
	declare(t, ch, observer, nil)
	must(t, ch.QueueBind(q, "", dlx, false, nil), "bind q")
	must(t, ch.QueueBind(observer, "", dlx, false, nil), "bind observer")
	publishN(t, ch, q, 1, "loop")
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, ok, err := ch.Get(observer, true)
		must(t, err, "get")
		if ok {
			deaths, _ := d.Headers["x-death"].([]interface{})
			if len(deaths) != 1 {
				t.Fatalf("x-death %v", d.Headers["x-death"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing dead-lettered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := ready(t, c, q); r != 0 {
		t.Fatalf("the copy routed back into its own queue was kept (%d ready)", r)
	}
}
