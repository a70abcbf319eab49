package warren.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.rabbitmq.client.AMQP;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Queue and consumer arguments and message properties that RabbitMQ validates, with its reply
 * codes and texts (rabbit_amqqueue:declare_args/consume_args, rabbit_channel's DLX and AE type
 * checks, rabbit_basic:parse_expiration). The Java client sends Integer as 'signedint' and
 * String as 'longstr'.
 */
class ArgumentValidationTest extends BrokerTest {

  private static Map<String, Object> args(Object... keyValues) {
    Map<String, Object> m = new HashMap<>();
    for (int i = 0; i < keyValues.length; i += 2) m.put((String) keyValues[i], keyValues[i + 1]);
    return m;
  }

  /** Invalid classic-queue arguments and the detail RabbitMQ puts after the queue name. */
  static Stream<Arguments> invalidQueueArguments() {
    return Stream.of(
        Arguments.of("x-dead-letter-routing-key", args("x-dead-letter-routing-key", "rk"),
            "routing_key_but_no_dlx_defined"),
        Arguments.of("x-dead-letter-routing-key",
            args("x-dead-letter-exchange", "", "x-dead-letter-routing-key", 7),
            "{unacceptable_type,signedint}"),
        Arguments.of("x-expires", args("x-expires", 0), "{value_zero,0}"),
        Arguments.of("x-expires", args("x-expires", -1), "{value_negative,-1}"),
        Arguments.of("x-expires", args("x-expires", "1000"), "\"expected integer, got longstr\""),
        Arguments.of("x-message-ttl", args("x-message-ttl", -1), "{value_negative,-1}"),
        Arguments.of("x-message-ttl", args("x-message-ttl", "1000"),
            "\"expected integer, got longstr\""),
        Arguments.of("x-max-length", args("x-max-length", -1), "{value_negative,-1}"),
        Arguments.of("x-max-length", args("x-max-length", "10"),
            "\"expected integer, got longstr\""),
        Arguments.of("x-max-length-bytes", args("x-max-length-bytes", -1), "{value_negative,-1}"),
        Arguments.of("x-max-priority", args("x-max-priority", 256), "{max_value_exceeded,256}"),
        Arguments.of("x-max-priority", args("x-max-priority", -1), "{value_negative,-1}"),
        Arguments.of("x-overflow", args("x-overflow", "drop-tail"), "invalid_overflow"),
        Arguments.of("x-overflow", args("x-overflow", 1), "{unacceptable_type,signedint}"),
        Arguments.of("x-queue-mode", args("x-queue-mode", "eager"),
            "\"unsupported queue mode 'eager'\""),
        Arguments.of("x-single-active-consumer", args("x-single-active-consumer", "yes"),
            "{unacceptable_type,longstr}"));
  }

  @ParameterizedTest(name = "{0} = {1}")
  @MethodSource("invalidQueueArguments")
  void invalidQueueArgumentIs406(String key, Map<String, Object> arguments, String detail) {
    String q = names.queue();
    Amqp.assertClose(406,
        "PRECONDITION_FAILED - invalid arg '" + key + "' for queue '" + q + "' in vhost '/': "
            + detail,
        Amqp.channelError(() -> ch.queueDeclare(q, false, false, false, arguments)));
  }

  @Test
  void deadLetterExchangeThatIsNotAStringIs406() {
    String q = names.queue();
    Amqp.assertClose(406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in"
            + " queue '" + q + "' in vhost '/'",
        Amqp.channelError(
            () -> ch.queueDeclare(q, false, false, false, args("x-dead-letter-exchange", 42))));
  }

  @Test
  void alternateExchangeThatIsNotAStringIs406() {
    String x = names.exchange();
    Amqp.assertClose(406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in"
            + " exchange '" + x + "' in vhost '/'",
        Amqp.channelError(
            () -> ch.exchangeDeclare(x, "direct", false, false, args("alternate-exchange", 42))));
  }

  @Test
  void consumerPriorityThatIsNotAnIntegerIs406() throws Exception {
    String q = declareQueue();
    Amqp.assertClose(406,
        "PRECONDITION_FAILED - invalid arg 'x-priority' for queue '" + q + "' in vhost '/':"
            + " \"expected integer, got longstr\"",
        Amqp.channelError(
            () -> Deliveries.consume(ch, q, false, args("x-priority", "high"))));
  }

  @Test
  void anIntegerConsumerPriorityIsAccepted() throws Exception {
    String q = declareQueue();
    Deliveries.consume(ch, q, false, args("x-priority", -3));
    Deliveries.consume(ch, q, false, args("x-priority", 7L));
  }

  static Stream<Arguments> invalidExpirations() {
    return Stream.of(
        Arguments.of("foobar", "no_integer"),
        Arguments.of("-10", "{value_negative,-10}"),
        Arguments.of("10ms", "{leftover_string,\"ms\"}"));
  }

  @ParameterizedTest(name = "expiration \"{0}\"")
  @MethodSource("invalidExpirations")
  void perMessageExpirationThatIsNotANonNegativeIntegerIs406(String expiration, String detail)
      throws Exception {
    String q = declareQueue();

    ch.basicPublish("", q, new AMQP.BasicProperties.Builder().expiration(expiration).build(),
        Amqp.utf8("m"));

    Amqp.assertClose(406,
        "PRECONDITION_FAILED - invalid expiration '" + expiration + "': " + detail,
        Amqp.awaitChannelClose(ch));
    assertEquals(0, Amqp.messageCount(conn, q),
        "the refused message is not enqueued");
  }
}
