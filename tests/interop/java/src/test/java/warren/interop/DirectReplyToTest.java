package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;
import org.junit.jupiter.api.Test;

/**
 * Direct reply-to: a passive declare of a live amq.rabbitmq.reply-to.&lt;token&gt; (the
 * reply-to a requester's publish was given) succeeds with one consumer; an unknown or no
 * longer live one is 404. Same in RabbitMQ 3.10 and 3.13.
 */
class DirectReplyToTest extends BrokerTest {

  /** Starts a requester on {@code requester} and returns the reply-to the responder sees. */
  private String liveReplyTo(Channel requester) throws Exception {
    String requests = declareQueue();
    requester.basicConsume("amq.rabbitmq.reply-to", true, (tag, d) -> {}, tag -> {});
    requester.basicPublish("", requests,
        new AMQP.BasicProperties.Builder().replyTo("amq.rabbitmq.reply-to").build(),
        Amqp.utf8("request"));
    Amqp.awaitMessageCount(conn, requests, 1);
    GetResponse request = ch.basicGet(requests, true);
    assertNotNull(request);
    String replyTo = request.getProps().getReplyTo();
    assertTrue(replyTo.startsWith("amq.rabbitmq.reply-to."), replyTo);
    return replyTo;
  }

  @Test
  void passiveDeclareOfALiveReplyToSucceeds() throws Exception {
    Channel requester = conn.createChannel();
    String replyTo = liveReplyTo(requester);

    Connection responder = Amqp.connect();
    try {
      AMQP.Queue.DeclareOk ok = responder.createChannel().queueDeclarePassive(replyTo);
      assertEquals(replyTo, ok.getQueue());
      assertEquals(0, ok.getMessageCount());
      assertEquals(1, ok.getConsumerCount());
    } finally {
      Amqp.closeQuietly(responder);
    }
  }

  @Test
  void passiveDeclareAfterTheRequesterLeftIs404() throws Exception {
    Channel requester = conn.createChannel();
    String replyTo = liveReplyTo(requester);
    requester.close();

    Amqp.assertClose(404, "NOT_FOUND - no queue '" + replyTo + "' in vhost '/'",
        Amqp.channelError(() -> ch.queueDeclarePassive(replyTo)));
  }

  @Test
  void passiveDeclareOfAnUnknownTokenIs404() {
    String replyTo = "amq.rabbitmq.reply-to.g1h2AA5yZXBseUAxMjM0NTY3OAAAAAAAAAAAAAAAAAAAAAAA";
    Amqp.assertClose(404, "NOT_FOUND - no queue '" + replyTo + "' in vhost '/'",
        Amqp.channelError(() -> ch.queueDeclarePassive(replyTo)));
  }
}
