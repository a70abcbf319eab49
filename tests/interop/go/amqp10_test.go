// AMQP 1.0 interoperability with github.com/Azure/go-amqp, a second independent AMQP 1.0
// client (the first is python-qpid-proton in py/test_amqp10.py): the same port as 0-9-1,
// RabbitMQ 4's v2 addresses, manual credit and drain, outcomes, and a message crossing
// from 0-9-1 (amqp091-go) to 1.0 and back.
package interop

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	amqp10 "github.com/Azure/go-amqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// dial10 opens an AMQP 1.0 connection (SASL PLAIN) to the broker of AMQP_URL, and a session.
func dial10(t *testing.T) *amqp10.Session {
	t.Helper()
	u, err := url.Parse(amqpURL())
	must(t, err, "AMQP_URL")
	pass, _ := u.User.Password()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := amqp10.Dial(ctx, "amqp://"+u.Host, &amqp10.ConnOptions{
		SASLType: amqp10.SASLTypePlain(u.User.Username(), pass),
	})
	must(t, err, "AMQP 1.0 dial")
	t.Cleanup(func() { _ = conn.Close() })
	session, err := conn.NewSession(ctx, nil)
	must(t, err, "begin")
	return session
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func readyCount(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	info, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	must(t, err, "passive declare")
	return info.Messages
}

func waitReady10(t *testing.T, ch *amqp.Channel, q string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for readyCount(t, ch, q) != want {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %d ready, want %d", q, readyCount(t, ch, q), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAMQP10SendReceiveAndCrossProtocol(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("amqp10")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	s := dial10(t)
	ctx := ctx10(t)

	sender, err := s.NewSender(ctx, "/queues/"+url.PathEscape(q), nil)
	must(t, err, "attach sender")
	msg := amqp10.NewMessage([]byte("from go-amqp"))
	msg.ApplicationProperties = map[string]any{"color": "green"}
	ct := "text/plain"
	msg.Properties = &amqp10.MessageProperties{ContentType: &ct}
	must(t, sender.Send(ctx, msg, nil), "send (waits for accepted)")

	// 1.0 → 0-9-1: the body and the application property as a header.
	d, ok, err := ch.Get(q, true)
	must(t, err, "get")
	if !ok || string(d.Body) != "from go-amqp" || d.Headers["color"] != "green" || d.ContentType != "text/plain" {
		t.Fatalf("0-9-1 side got ok=%v body=%q headers=%v content-type=%q", ok, d.Body, d.Headers, d.ContentType)
	}

	// 0-9-1 → 1.0.
	must(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{
		Body: []byte("from amqp091-go"), CorrelationId: "c-1", Headers: amqp.Table{"n": int32(5)},
	}), "publish")
	receiver, err := s.NewReceiver(ctx, "/queues/"+url.PathEscape(q), nil)
	must(t, err, "attach receiver")
	got, err := receiver.Receive(ctx, nil)
	must(t, err, "receive")
	if string(got.GetData()) != "from amqp091-go" || got.ApplicationProperties["n"] != int32(5) {
		t.Fatalf("1.0 side got %q %v", got.GetData(), got.ApplicationProperties)
	}
	if got.Properties == nil || got.Properties.CorrelationID != "c-1" {
		t.Fatalf("correlation id not mapped: %+v", got.Properties)
	}
	must(t, receiver.AcceptMessage(ctx, got), "accept")
	waitReady10(t, ch, q, 0)
}

func TestAMQP10ManualCreditAndDrain(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("amqp10credit")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	ctx := ctx10(t)
	for i := 0; i < 5; i++ {
		must(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte{byte('0' + i)}}), "publish")
	}
	waitReady10(t, ch, q, 5)
	s := dial10(t)
	receiver, err := s.NewReceiver(ctx, "/queues/"+url.PathEscape(q), &amqp10.ReceiverOptions{Credit: -1})
	must(t, err, "attach receiver")
	must(t, receiver.IssueCredit(2), "credit 2")
	var bodies []string
	for i := 0; i < 2; i++ {
		m, err := receiver.Receive(ctx, nil)
		must(t, err, "receive")
		bodies = append(bodies, string(m.GetData()))
		must(t, receiver.AcceptMessage(ctx, m), "accept")
	}
	waitReady10(t, ch, q, 3) // exactly the credit was sent
	must(t, receiver.IssueCredit(10), "credit 10")
	for i := 0; i < 3; i++ {
		m, err := receiver.Receive(ctx, nil)
		must(t, err, "receive")
		bodies = append(bodies, string(m.GetData()))
		must(t, receiver.AcceptMessage(ctx, m), "accept")
	}
	if len(bodies) != 5 || bodies[0] != "0" || bodies[4] != "4" {
		t.Fatalf("bodies %v", bodies)
	}
	waitReady10(t, ch, q, 0)
	// Drain: the queue is empty, so the broker gives the remaining 7 credits back at once.
	must(t, receiver.DrainCredit(ctx, nil), "drain")
	must(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte("late")}), "publish")
	time.Sleep(300 * time.Millisecond)
	waitReady10(t, ch, q, 1) // no credit left: it stays queued
	if m := receiver.Prefetched(); m != nil {
		t.Fatalf("received %q after the drain", m.GetData())
	}
}

func TestAMQP10OutcomesAndRefusals(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	dlq, q := n.queue("dlq"), n.queue("amqp10out")
	_, err := ch.QueueDeclare(dlq, false, false, false, false, nil)
	must(t, err, "declare dlq")
	_, err = ch.QueueDeclare(q, false, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	must(t, err, "declare")
	ctx := ctx10(t)
	must(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte("x")}), "publish")
	s := dial10(t)
	receiver, err := s.NewReceiver(ctx, "/queues/"+url.PathEscape(q), nil)
	must(t, err, "attach receiver")

	m, err := receiver.Receive(ctx, nil)
	must(t, err, "receive")
	must(t, receiver.ReleaseMessage(ctx, m), "release") // requeued
	m, err = receiver.Receive(ctx, nil)
	must(t, err, "receive again")
	if m.Header == nil || m.Header.FirstAcquirer {
		t.Fatalf("a requeued message is not first-acquirer: %+v", m.Header)
	}
	must(t, receiver.ModifyMessage(ctx, m, &amqp10.ModifyMessageOptions{DeliveryFailed: true}), "modify")
	m, err = receiver.Receive(ctx, nil)
	must(t, err, "receive a third time")
	must(t, receiver.RejectMessage(ctx, m, nil), "reject") // dead-lettered
	waitReady10(t, ch, dlq, 1)
	waitReady10(t, ch, q, 0)

	// Bad addresses: not-found for a missing queue, a v1 address refused.
	_, err = s.NewReceiver(ctx, "/queues/no-such-queue-"+uname("x"), nil)
	if e := amqpErr10(err); e == nil || e.Condition != amqp10.ErrCondNotFound {
		t.Fatalf("missing queue: %v", err)
	}
	_, err = s.NewSender(ctx, "/exchanges/no-such-exchange-"+uname("x")+"/k", nil)
	if e := amqpErr10(err); e == nil || e.Condition != amqp10.ErrCondNotFound {
		t.Fatalf("missing exchange: %v", err)
	}
}

func amqpErr10(err error) *amqp10.Error {
	var e *amqp10.Error
	if err != nil && errors.As(err, &e) {
		return e
	}
	return nil
}

// A message published and consumed over AMQP 1.0 comes back as published: properties no
// 0-9-1 field holds, message annotations that are not x-*, an amqp-value body and the footer.
func TestAMQP10MessageKeepsItsSectionsAcrossTheBroker(t *testing.T) {
	n := newNames(t)
	ch := channel(t, dial(t))
	q := n.queue("amqp10-kept")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err, "declare")
	s := dial10(t)
	ctx := ctx10(t)
	sender, err := s.NewSender(ctx, "/queues/"+url.PathEscape(q), nil)
	must(t, err, "attach sender")
	to, subject, replyGroup := "/queues/elsewhere", "the subject", "rg-7"
	sequence := uint32(9)
	expiry := time.UnixMilli(1_900_000_000_000).UTC()
	msg := &amqp10.Message{
		Annotations: amqp10.Annotations{"custom": "kept"},
		Properties: &amqp10.MessageProperties{
			To: &to, Subject: &subject, ReplyToGroupID: &replyGroup,
			GroupSequence: &sequence, AbsoluteExpiryTime: &expiry,
		},
		Value:  map[string]any{"k": int64(42)},
		Footer: amqp10.Annotations{"sig": "abc"},
	}
	must(t, sender.Send(ctx, msg, nil), "send")
	receiver, err := s.NewReceiver(ctx, "/queues/"+url.PathEscape(q), nil)
	must(t, err, "attach receiver")
	got, err := receiver.Receive(ctx, nil)
	must(t, err, "receive")
	must(t, receiver.AcceptMessage(ctx, got), "accept")
	p := got.Properties
	if p == nil || p.To == nil || *p.To != to || p.Subject == nil || *p.Subject != subject ||
		p.ReplyToGroupID == nil || *p.ReplyToGroupID != replyGroup ||
		p.GroupSequence == nil || *p.GroupSequence != sequence ||
		p.AbsoluteExpiryTime == nil || !p.AbsoluteExpiryTime.Equal(expiry) {
		t.Fatalf("properties not kept: %+v", p)
	}
	if got.Annotations["custom"] != "kept" || got.Annotations["x-routing-key"] != q {
		t.Fatalf("annotations: %v", got.Annotations)
	}
	if got.Footer["sig"] != "abc" {
		t.Fatalf("footer: %v", got.Footer)
	}
	value, ok := got.Value.(map[string]any)
	if !ok || value["k"] != int64(42) {
		t.Fatalf("amqp-value body: %#v", got.Value)
	}
}
