// Interoperability tests with github.com/rabbitmq/amqp091-go, a second
// independent AMQP 0-9-1 client. The broker address comes from env AMQP_URL
// (default amqp://guest:guest@127.0.0.1:5672/%2F).
package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func amqpURL() string {
	if u := os.Getenv("AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/%2F"
}

func uname(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "interop.go." + prefix + "." + hex.EncodeToString(b)
}

func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	c, err := amqp.DialConfig(amqpURL(), amqp.Config{
		Heartbeat: 10 * time.Second,
		Dial:      amqp.DefaultDial(5 * time.Second),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", amqpURL(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func channel(t *testing.T, c *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// cleanup deletes queues/exchanges through a fresh connection at test end.
func cleanup(t *testing.T, queues, exchanges *[]string) {
	t.Cleanup(func() {
		c, err := amqp.Dial(amqpURL())
		if err != nil {
			return
		}
		defer c.Close()
		for _, q := range *queues {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		for _, x := range *exchanges {
			if ch, err := c.Channel(); err == nil {
				_ = ch.ExchangeDelete(x, false, false)
				_ = ch.Close()
			}
		}
	})
}

type names struct{ queues, exchanges []string }

func newNames(t *testing.T) *names {
	n := &names{}
	cleanup(t, &n.queues, &n.exchanges)
	return n
}

func (n *names) queue(p string) string { s := uname(p); n.queues = append(n.queues, s); return s }
func (n *names) exchange(p string) string {
	s := uname(p)
	n.exchanges = append(n.exchanges, s)
	return s
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func amqpErr(err error) *amqp.Error {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func TestConnectAndServerProperties(t *testing.T) {
	c := dial(t)
	caps, ok := c.Properties["capabilities"].(amqp.Table)
	if !ok {
		t.Fatalf("no capabilities table in %v", c.Properties)
	}
	for _, k := range []string{"publisher_confirms", "exchange_exchange_bindings", "basic.nack",
		"consumer_cancel_notify", "connection.blocked", "authentication_failure_close",
		"per_consumer_qos", "direct_reply_to"} {
		if v, _ := caps[k].(bool); !v {
			t.Errorf("capability %s not true: %v", k, caps[k])
		}
	}
	if c.Major != 0 || c.Minor != 9 {
		t.Errorf("version %d.%d", c.Major, c.Minor)
	}
	ch := channel(t, c)
	must(t, ch.Close(), "channel close")
	must(t, c.Close(), "connection close")
	if !c.IsClosed() {
		t.Fatal("connection not closed")
	}
}

func TestWrongPasswordAccessRefused(t *testing.T) {
	u := strings.Replace(amqpURL(), "guest:guest@", "guest:wrong-password@", 1)
	if u == amqpURL() {
		t.Skip("AMQP_URL does not use guest:guest")
	}
	_, err := amqp.Dial(u)
	e := amqpErr(err)
	if e == nil || e.Code != amqp.AccessRefused {
		t.Fatalf("want 403 ACCESS_REFUSED, got %v", err)
	}
}

func TestDeclareAndCounts(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("q")
	dq, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	if dq.Name != q || dq.Messages != 0 || dq.Consumers != 0 {
		t.Fatalf("declare-ok %+v", dq)
	}
	for i := 0; i < 3; i++ {
		must(t, ch.Publish("", q, false, false, amqp.Publishing{Body: []byte("x")}), "publish")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		must(t, err, "passive")
		if p.Messages == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("message count %d", p.Messages)
		}
		time.Sleep(20 * time.Millisecond)
	}
	anon, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err, "server-named")
	if !strings.HasPrefix(anon.Name, "amq.gen-") {
		t.Fatalf("server-named queue %q", anon.Name)
	}
}

// consumeN reads exactly n deliveries or fails after timeout.
func consumeN(t *testing.T, deliveries <-chan amqp.Delivery, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	out := make([]amqp.Delivery, 0, n)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("delivery channel closed after %d/%d", len(out), n)
			}
			out = append(out, d)
		case <-timer.C:
			t.Fatalf("timeout: got %d/%d deliveries", len(out), n)
		}
	}
	return out
}

func TestThousandMessagesThroughEachExchangeType(t *testing.T) {
	const N = 1000
	cases := []struct {
		kind, bindKey, pubKey string
		bindArgs, headers     amqp.Table
	}{
		{"direct", "rk", "rk", nil, nil},
		{"fanout", "", "ignored", nil, nil},
		{"topic", "a.*.#", "a.b.c.d", nil, nil},
		{"headers", "", "", amqp.Table{"x-match": "all", "k": "v"}, amqp.Table{"k": "v", "other": int32(1)}},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.kind, func(t *testing.T) {
			n := newNames(t)
			c := dial(t)
			ch := channel(t, c)
			x := n.exchange(tc.kind)
			q := n.queue(tc.kind)
			must(t, ch.ExchangeDeclare(x, tc.kind, false, false, false, false, nil), "exchange declare")
			_, err := ch.QueueDeclare(q, false, false, false, false, nil)
			must(t, err, "queue declare")
			must(t, ch.QueueBind(q, tc.bindKey, x, false, tc.bindArgs), "bind")
			cch := channel(t, c)
			must(t, cch.Qos(100, 0, false), "qos")
			deliveries, err := cch.Consume(q, "", false, false, false, false, nil)
			must(t, err, "consume")
			must(t, ch.Confirm(false), "confirm")
			confirms := ch.NotifyPublish(make(chan amqp.Confirmation, N))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := 0; i < N; i++ {
				must(t, ch.PublishWithContext(ctx, x, tc.pubKey, false, false, amqp.Publishing{
					Headers: tc.headers, Body: []byte(fmt.Sprintf("%d", i)),
				}), "publish")
			}
			for i := 1; i <= N; i++ {
				select {
				case cf := <-confirms:
					if !cf.Ack || cf.DeliveryTag != uint64(i) {
						t.Fatalf("confirm %d: %+v", i, cf)
					}
				case <-ctx.Done():
					t.Fatalf("only %d confirms", i-1)
				}
			}
			timer := time.NewTimer(20 * time.Second)
			defer timer.Stop()
			for i := 0; i < N; i++ {
				var d amqp.Delivery
				select {
				case d = <-deliveries:
				case <-timer.C:
					t.Fatalf("timeout after %d/%d deliveries", i, N)
				}
				if string(d.Body) != fmt.Sprintf("%d", i) {
					t.Fatalf("delivery %d body %q (out of order?)", i, d.Body)
				}
				if d.Exchange != x || d.RoutingKey != tc.pubKey {
					t.Fatalf("delivery %d exchange/key %q/%q", i, d.Exchange, d.RoutingKey)
				}
				must(t, d.Ack(false), "ack") // prefetch 100: acking as we go keeps it flowing
			}
		})
	}
}

func TestDeferredConfirmsAllAcked(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("dc")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	must(t, ch.Confirm(false), "confirm")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var dcs []*amqp.DeferredConfirmation
	for i := 0; i < 200; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")})
		must(t, err, "publish")
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		if err != nil || !ok {
			t.Fatalf("confirm %d: ok=%v err=%v", i, ok, err)
		}
		if dc.DeliveryTag != uint64(i+1) {
			t.Fatalf("confirm %d has tag %d", i, dc.DeliveryTag)
		}
	}
}

func TestMandatoryReturn(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	x := n.exchange("ret")
	must(t, ch.ExchangeDeclare(x, "direct", false, false, false, false, nil), "declare")
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	must(t, ch.Publish(x, "nowhere", true, false, amqp.Publishing{
		MessageId: "m1", Body: []byte("bounce")}), "publish")
	select {
	case r := <-returns:
		if r.ReplyCode != amqp.NoRoute || r.ReplyText != "NO_ROUTE" {
			t.Fatalf("return %d %q", r.ReplyCode, r.ReplyText)
		}
		if r.Exchange != x || r.RoutingKey != "nowhere" || string(r.Body) != "bounce" || r.MessageId != "m1" {
			t.Fatalf("return %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return")
	}
}

func TestChannelError404ClosesOnlyChannel(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	bad := channel(t, c)
	good := channel(t, c)
	closes := bad.NotifyClose(make(chan *amqp.Error, 1))
	_, err := bad.QueueDeclarePassive(n.queue("missing"), false, false, false, false, nil)
	e := amqpErr(err)
	if e == nil || e.Code != amqp.NotFound || e.Server != true {
		t.Fatalf("want server 404, got %#v", err)
	}
	select {
	case ce := <-closes:
		if ce == nil || ce.Code != 404 {
			t.Fatalf("close notification %v", ce)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no channel close notification")
	}
	if c.IsClosed() {
		t.Fatal("connection closed by a channel error")
	}
	q := n.queue("ok")
	_, err = good.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "other channel still works")
	must(t, good.Publish("", q, false, false, amqp.Publishing{Body: []byte("x")}), "publish")
	_, ok, err := good.Get(q, true)
	for i := 0; !ok && err == nil && i < 100; i++ {
		time.Sleep(20 * time.Millisecond)
		_, ok, err = good.Get(q, true)
	}
	if !ok || err != nil {
		t.Fatalf("get on surviving channel: ok=%v err=%v", ok, err)
	}
}

func TestImmediatePublishClosesConnection540(t *testing.T) {
	c := dial(t)
	closes := c.NotifyClose(make(chan *amqp.Error, 1))
	ch := channel(t, c)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err, "declare")
	_ = ch.Publish("", q.Name, false, true, amqp.Publishing{Body: []byte("now!")})
	select {
	case e := <-closes:
		if e == nil || e.Code != amqp.NotImplemented {
			t.Fatalf("want 540 NOT_IMPLEMENTED, got %v", e)
		}
		if !strings.HasPrefix(e.Reason, "NOT_IMPLEMENTED") {
			t.Fatalf("reason %q", e.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after immediate publish")
	}
}

func TestExchangeToExchangeBinding(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	src, dst := n.exchange("src"), n.exchange("dst")
	must(t, ch.ExchangeDeclare(src, "topic", false, false, false, false, nil), "src")
	must(t, ch.ExchangeDeclare(dst, "fanout", false, false, false, false, nil), "dst")
	must(t, ch.ExchangeBind(dst, "k.#", src, false, nil), "e2e bind")
	q := n.queue("e2e")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "queue")
	must(t, ch.QueueBind(q, "", dst, false, nil), "bind")
	must(t, ch.Publish(src, "k.a.b", false, false, amqp.Publishing{Body: []byte("yes")}), "pub")
	must(t, ch.Publish(src, "z", false, false, amqp.Publishing{Body: []byte("no")}), "pub")
	must(t, ch.ExchangeUnbind(dst, "k.#", src, false, nil), "unbind")
	must(t, ch.Publish(src, "k.c", false, false, amqp.Publishing{Body: []byte("no")}), "pub")
	var got []string
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(q, true)
		must(t, err, "get")
		if ok {
			got = append(got, string(d.Body))
			continue
		}
		if len(got) > 0 {
			time.Sleep(100 * time.Millisecond)
			if _, ok, _ := ch.Get(q, true); !ok {
				break
			}
			t.Fatal("unexpected extra message")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != 1 || got[0] != "yes" {
		t.Fatalf("got %v", got)
	}
}

func TestQosPrefetch(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	ch := channel(t, c)
	q := n.queue("qos")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	for i := 0; i < 20; i++ {
		must(t, ch.Publish("", q, false, false, amqp.Publishing{Body: []byte(fmt.Sprint(i))}), "pub")
	}
	cch := channel(t, c)
	must(t, cch.Qos(5, 0, false), "qos")
	deliveries, err := cch.Consume(q, "", false, false, false, false, nil)
	must(t, err, "consume")
	first := consumeN(t, deliveries, 5, 5*time.Second)
	select {
	case d := <-deliveries:
		t.Fatalf("6th delivery %q beyond prefetch 5", d.Body)
	case <-time.After(300 * time.Millisecond):
	}
	must(t, first[4].Ack(true), "ack multiple")
	next := consumeN(t, deliveries, 5, 5*time.Second)
	if string(next[0].Body) != "5" {
		t.Fatalf("next body %q", next[0].Body)
	}
	select {
	case d := <-deliveries:
		t.Fatalf("11th delivery %q beyond prefetch", d.Body)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestDirectReplyToRPC(t *testing.T) {
	n := newNames(t)
	server := channel(t, dial(t))
	rq := n.queue("rpc")
	_, err := server.QueueDeclare(rq, false, false, false, false, nil)
	must(t, err, "declare")
	reqs, err := server.Consume(rq, "", true, false, false, false, nil)
	must(t, err, "server consume")
	go func() {
		for d := range reqs {
			_ = server.Publish("", d.ReplyTo, false, false, amqp.Publishing{
				CorrelationId: d.CorrelationId, Body: []byte(strings.ToUpper(string(d.Body)))})
		}
	}()
	client := channel(t, dial(t))
	replies, err := client.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	must(t, err, "consume reply-to")
	for i := 0; i < 10; i++ {
		corr := fmt.Sprintf("c-%d", i)
		must(t, client.Publish("", rq, false, false, amqp.Publishing{
			ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: corr, Body: []byte(fmt.Sprintf("ping%d", i))}), "request")
		select {
		case r := <-replies:
			if r.CorrelationId != corr || string(r.Body) != fmt.Sprintf("PING%d", i) {
				t.Fatalf("reply %q corr %q", r.Body, r.CorrelationId)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no reply %d", i)
		}
	}
}

func TestConsumerCancelNotifyOnQueueDelete(t *testing.T) {
	n := newNames(t)
	c := dial(t)
	ch := channel(t, c)
	q := n.queue("cancel")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	cancels := ch.NotifyCancel(make(chan string, 1))
	deliveries, err := ch.Consume(q, "my-consumer", false, false, false, false, nil)
	must(t, err, "consume")
	other := channel(t, c)
	_, err = other.QueueDelete(q, false, false, false)
	must(t, err, "delete")
	select {
	case tag := <-cancels:
		if tag != "my-consumer" {
			t.Fatalf("cancelled tag %q", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel from server")
	}
	// the library closes the delivery channel of the cancelled consumer
	select {
	case _, ok := <-deliveries:
		if ok {
			t.Fatal("unexpected delivery")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("deliveries channel not closed")
	}
	// the channel itself stays open
	_, err = ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err, "channel still usable")
}

func TestTransactions(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("tx")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	must(t, ch.Tx(), "tx.select")
	must(t, ch.Publish("", q, false, false, amqp.Publishing{Body: []byte("rolled back")}), "pub")
	must(t, ch.TxRollback(), "rollback")
	must(t, ch.Publish("", q, false, false, amqp.Publishing{Body: []byte("committed")}), "pub")
	must(t, ch.TxCommit(), "commit")
	p, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	must(t, err, "passive")
	if p.Messages != 1 {
		t.Fatalf("messages %d", p.Messages)
	}
	d, ok, err := ch.Get(q, true)
	if err != nil || !ok || string(d.Body) != "committed" {
		t.Fatalf("get: %v %v %q", err, ok, d.Body)
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("props")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	ts := time.Unix(1700000000, 0).UTC()
	pub := amqp.Publishing{
		Headers: amqp.Table{
			"s": "str", "i8": int8(-3), "i16": int16(-300), "i32": int32(70000), "i64": int64(1 << 40),
			"f32": float32(1.5), "f64": float64(2.25), "b": true, "bytes": []byte{0, 1, 2},
			"t": ts, "tbl": amqp.Table{"n": int32(1)}, "arr": []interface{}{"a", int32(2)},
			"dec": amqp.Decimal{Scale: 2, Value: 314}, "nil": nil,
		},
		ContentType: "text/plain", ContentEncoding: "utf-8", DeliveryMode: 2, Priority: 7,
		CorrelationId: "c", ReplyTo: "r", Expiration: "60000", MessageId: "m", Timestamp: ts,
		Type: "t", AppId: "a", Body: []byte("payload"),
	}
	must(t, ch.Publish("", q, false, false, pub), "publish")
	var d amqp.Delivery
	ok := false
	for i := 0; i < 100 && !ok; i++ {
		d, ok, err = ch.Get(q, true)
		must(t, err, "get")
		if !ok {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !ok {
		t.Fatal("message not delivered")
	}
	if d.ContentType != pub.ContentType || d.ContentEncoding != pub.ContentEncoding ||
		d.DeliveryMode != 2 || d.Priority != 7 || d.CorrelationId != "c" || d.ReplyTo != "r" ||
		d.Expiration != "60000" || d.MessageId != "m" || !d.Timestamp.Equal(ts) || d.Type != "t" ||
		d.AppId != "a" || string(d.Body) != "payload" {
		t.Fatalf("properties differ: %+v", d)
	}
	for k, v := range pub.Headers {
		got := fmt.Sprintf("%#v", d.Headers[k])
		want := fmt.Sprintf("%#v", v)
		if k == "t" {
			if tt, ok := d.Headers[k].(time.Time); !ok || !tt.Equal(ts) {
				t.Errorf("header t: %v", d.Headers[k])
			}
			continue
		}
		if got != want {
			t.Errorf("header %s: got %s want %s", k, got, want)
		}
	}
}
