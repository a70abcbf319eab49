package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.rabbitmq.client.amqp.AmqpException;
import com.rabbitmq.client.amqp.Connection;
import com.rabbitmq.client.amqp.Consumer;
import com.rabbitmq.client.amqp.Environment;
import com.rabbitmq.client.amqp.Management;
import com.rabbitmq.client.amqp.Message;
import com.rabbitmq.client.amqp.Publisher;
import com.rabbitmq.client.amqp.Requester;
import com.rabbitmq.client.amqp.Responder;
import com.rabbitmq.client.amqp.impl.AmqpEnvironmentBuilder;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * RabbitMQ's Java AMQP 1.0 client (com.rabbitmq.client:amqp-client, the client RabbitMQ 4
 * documents) as its examples use it: topology through the management node, a publisher
 * waiting for each outcome, a consumer settling what it gets, and request/response.
 */
class Amqp10ClientTest {
  private Environment environment;
  private Connection connection;
  private Management management;
  private final List<Runnable> cleanup = new CopyOnWriteArrayList<>();

  @BeforeEach
  void connect() {
    environment =
        new AmqpEnvironmentBuilder()
            .connectionSettings()
            .uri(Amqp.URL)
            .environmentBuilder()
            .build();
    connection = environment.connectionBuilder().build();
    management = connection.management();
  }

  @AfterEach
  void close() {
    for (Runnable r : cleanup) {
      try {
        r.run();
      } catch (RuntimeException ignored) {
        // Already gone.
      }
    }
    environment.close();
  }

  private String queue(String topic) {
    String name = Amqp.unique(topic);
    cleanup.add(() -> management.queueDelete(name));
    return name;
  }

  private String exchange(String topic) {
    String name = Amqp.unique(topic);
    cleanup.add(() -> management.exchangeDelete(name));
    return name;
  }

  /** Publishes and waits for each outcome, as the client's publisher example does. */
  private void publish(Publisher publisher, String... bodies) throws Exception {
    CountDownLatch settled = new CountDownLatch(bodies.length);
    List<Publisher.Status> statuses = new CopyOnWriteArrayList<>();
    for (String body : bodies) {
      publisher.publish(
          publisher.message(Amqp.utf8(body)),
          context -> {
            statuses.add(context.status());
            settled.countDown();
          });
    }
    assertTrue(settled.await(10, TimeUnit.SECONDS), "outcomes");
    for (Publisher.Status s : statuses) assertEquals(Publisher.Status.ACCEPTED, s);
  }

  @Test
  void topologyDeclaredThroughTheManagementNodeRoutesMessages() throws Exception {
    String x = exchange("topic");
    String q = queue("orders");
    management.exchange().name(x).type(Management.ExchangeType.TOPIC).declare();
    Management.QueueInfo declared =
        management.queue().name(q).type(Management.QueueType.CLASSIC).maxLength(100).declare();
    assertEquals(q, declared.name());
    assertEquals(Management.QueueType.CLASSIC, declared.type());
    assertEquals(100L, ((Number) declared.arguments().get("x-max-length")).longValue());
    management.binding().sourceExchange(x).destinationQueue(q).key("orders.#").bind();

    try (Publisher publisher = connection.publisherBuilder().exchange(x).key("orders.new").build()) {
      publish(publisher, "one", "two", "three");
    }
    assertEquals(3, management.queueInfo(q).messageCount());

    List<String> received = new CopyOnWriteArrayList<>();
    CountDownLatch three = new CountDownLatch(3);
    try (Consumer consumer =
        connection
            .consumerBuilder()
            .queue(q)
            .messageHandler(
                (context, message) -> {
                  received.add(Amqp.text(message.body()));
                  context.accept();
                  three.countDown();
                })
            .build()) {
      assertTrue(three.await(10, TimeUnit.SECONDS), "deliveries");
    }
    assertEquals(List.of("one", "two", "three"), received);
    assertEquals(0, management.queueInfo(q).messageCount());

    management.unbind().sourceExchange(x).destinationQueue(q).key("orders.#").unbind();
    try (Publisher publisher = connection.publisherBuilder().exchange(x).key("orders.new").build()) {
      CountDownLatch done = new CountDownLatch(1);
      publisher.publish(publisher.message(Amqp.utf8("nowhere")), c -> done.countDown());
      assertTrue(done.await(10, TimeUnit.SECONDS));
    }
    assertEquals(0, management.queueInfo(q).messageCount());
  }

  @Test
  void exchangeToExchangeBindingsAndPurge() throws Exception {
    String fanout = exchange("fanout");
    String direct = exchange("direct");
    String q = queue("e2e");
    management.exchange().name(fanout).type(Management.ExchangeType.FANOUT).declare();
    management.exchange().name(direct).type(Management.ExchangeType.DIRECT).declare();
    management.queue().name(q).declare();
    management.binding().sourceExchange(direct).destinationQueue(q).key("k").bind();
    management.binding().sourceExchange(fanout).destinationExchange(direct).key("").bind();
    try (Publisher publisher = connection.publisherBuilder().exchange(fanout).key("k").build()) {
      publish(publisher, "a", "b");
    }
    assertEquals(2, management.queuePurge(q).messageCount());
    assertEquals(0, management.queueInfo(q).messageCount());
  }

  @Test
  void aQuorumQueueNamesItsLeaderAmongItsMembers() {
    String q = queue("quorum");
    Management.QueueInfo info = management.queue().name(q).quorum().queue().declare();
    assertEquals(Management.QueueType.QUORUM, info.type());
    assertTrue(info.durable());
    assertTrue(info.members().contains(info.leader()), info.members() + " " + info.leader());
  }

  @Test
  void aDeclarationThatDiffersIsRefusedAndTheConnectionGoesOn() {
    String q = queue("differs");
    management.queue().name(q).maxLength(10).declare();
    AmqpException refused =
        assertThrows(AmqpException.class, () -> management.queue().name(q).maxLength(20).declare());
    assertTrue(refused.getMessage().contains("409") || refused.getMessage().contains("inequivalent"),
        refused.getMessage());
    assertThrows(AmqpException.class, () -> management.queueInfo(Amqp.unique("missing")));
    assertEquals(q, management.queueInfo(q).name());
  }

  @Test
  void requestAndResponse() throws Exception {
    String q = queue("rpc");
    management.queue().name(q).exclusive(true).autoDelete(false).declare();
    try (Responder responder =
            connection
                .responderBuilder()
                .requestQueue(q)
                .handler(
                    (context, request) ->
                        context.message(Amqp.utf8("re: " + Amqp.text(request.body()))))
                .build();
        Requester requester =
            connection.requesterBuilder().requestAddress().queue(q).requester().build()) {
      Message reply =
          requester.publish(requester.message(Amqp.utf8("ping"))).get(10, TimeUnit.SECONDS);
      assertEquals("re: ping", Amqp.text(reply.body()));
    }
  }
}
