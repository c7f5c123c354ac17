// The RocketMQ 5.x Java client (gRPC) as an external client, one scenario per run:
//   java -cp '.peers/rocketmq/client5/*' peers/java/Client5.java ENDPOINT COMMAND ARGS...
// Commands (each prints one JSON object per line: what a user of the client observes):
//   send TOPIC COUNT [normal|fifo:GROUP|delay:MILLIS|tag:TAG]   {"event":"sent","body":..}
//   txn TOPIC commit|rollback|check-commit|check-rollback         sends one half message
//   simple TOPIC GROUP COUNT WAIT_S [TAG_EXPR [SEND_MODE]]        receive+ack until COUNT;
//          with SEND_MODE: one receive first (the consumer has its position), then send
//          COUNT messages of that mode (as `send`), then receive
//   push TOPIC GROUP COUNT WAIT_S [fail]                          PushConsumer until COUNT
// A last line {"event":"done",...} closes every run; an error is {"event":"error",...}.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.apis.*;
import org.apache.rocketmq.client.apis.consumer.*;
import org.apache.rocketmq.client.apis.message.*;
import org.apache.rocketmq.client.apis.producer.*;

public class Client5 {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    static ClientConfiguration config;

    public static void main(String[] args) throws Exception {
        config = ClientConfiguration.newBuilder().setEndpoints(args[0]).enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(10)).build();
        String[] rest = Arrays.copyOfRange(args, 2, args.length);
        try {
            switch (args[1]) {
                case "send": send(rest); break;
                case "txn": txn(rest); break;
                case "simple": simple(rest); break;
                case "push": push(rest); break;
                default: throw new IllegalArgumentException("unknown command " + args[1]);
            }
            emit("done");
        } catch (Throwable e) {
            emit("error", "type", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()));
        }
        System.out.flush();
        System.exit(0);
    }

    static synchronized void emit(String event, Object... kv) {
        StringBuilder sb = new StringBuilder("{\"event\":").append(quote(event));
        for (int i = 0; i + 1 < kv.length; i += 2) {
            sb.append(',').append(quote(String.valueOf(kv[i]))).append(':');
            Object v = kv[i + 1];
            sb.append(v instanceof Number || v instanceof Boolean ? v.toString() : quote(String.valueOf(v)));
        }
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }

    static Message message(String topic, String body, String mode) {
        MessageBuilder b = PROVIDER.newMessageBuilder().setTopic(topic).setKeys("k-" + body)
                .setTag("TagA").setBody(body.getBytes(StandardCharsets.UTF_8));
        if (mode.startsWith("fifo:")) b.setMessageGroup(mode.substring(5));
        if (mode.startsWith("delay:"))
            b.setDeliveryTimestamp(System.currentTimeMillis() + Long.parseLong(mode.substring(6)));
        if (mode.startsWith("tag:")) b.setTag(mode.substring(4));
        return b.build();
    }

    static void send(String[] a) throws Exception {
        String topic = a[0], mode = a.length > 2 ? a[2] : "normal";
        int count = Integer.parseInt(a[1]);
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build()) {
            for (int i = 0; i < count; i++) {
                String body = "m-" + i;
                SendReceipt r = p.send(message(topic, body, mode));
                emit("sent", "body", body, "id_len", r.getMessageId().toString().length());
            }
        }
    }

    static void txn(String[] a) throws Exception {
        String topic = a[0], decision = a[1];
        CountDownLatch checked = new CountDownLatch(1);
        TransactionChecker checker = view -> {
            emit("checked", "body", new String(bytes(view), StandardCharsets.UTF_8));
            checked.countDown();
            return decision.endsWith("commit") ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
        };
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
                .setTransactionChecker(checker).build()) {
            Transaction tx = p.beginTransaction();
            p.send(message(topic, "txn-" + decision, "normal"), tx);
            emit("half_sent");
            if (decision.equals("commit")) tx.commit();
            else if (decision.equals("rollback")) tx.rollback();
            else emit("check_seen", "value", checked.await(90, TimeUnit.SECONDS));
        }
    }

    static byte[] bytes(MessageView v) {
        byte[] out = new byte[v.getBody().remaining()];
        v.getBody().duplicate().get(out);
        return out;
    }

    static void received(MessageView v) {
        emit("received", "body", new String(bytes(v), StandardCharsets.UTF_8), "tag", v.getTag().orElse(""),
                "attempt", v.getDeliveryAttempt(), "group", v.getMessageGroup().orElse(""),
                "keys", String.join(",", v.getKeys()));
    }

    static void simple(String[] a) throws Exception {
        String topic = a[0], group = a[1], tags = a.length > 4 ? a[4] : "*";
        int count = Integer.parseInt(a[2]);
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a[3]);
        FilterExpression filter = new FilterExpression(tags, FilterExpressionType.TAG);
        try (SimpleConsumer c = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config)
                .setConsumerGroup(group).setSubscriptionExpressions(Map.of(topic, filter))
                .setAwaitDuration(Duration.ofSeconds(2)).build()) {
            int got = 0;
            if (a.length > 5) {
                for (MessageView v : c.receive(16, Duration.ofSeconds(15))) {
                    received(v);
                    c.ack(v);
                    got++;
                }
                send(new String[] {topic, String.valueOf(count), a[5]});
            }
            while (got < count && System.currentTimeMillis() < deadline) {
                for (MessageView v : c.receive(16, Duration.ofSeconds(15))) {
                    received(v);
                    c.ack(v);
                    got++;
                }
            }
        }
    }

    static void push(String[] a) throws Exception {
        String topic = a[0], group = a[1];
        int count = Integer.parseInt(a[2]);
        boolean fail = a.length > 4 && a[4].equals("fail");
        CountDownLatch latch = new CountDownLatch(count);
        FilterExpression filter = new FilterExpression("*", FilterExpressionType.TAG);
        try (PushConsumer c = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config)
                .setConsumerGroup(group).setSubscriptionExpressions(Map.of(topic, filter))
                .setMessageListener(v -> {
                    received(v);
                    latch.countDown();
                    return fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
                }).build()) {
            emit("started");
            latch.await(Long.parseLong(a[3]), TimeUnit.SECONDS);
        }
    }
}
