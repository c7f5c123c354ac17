// A Java send load against a RocketMQ-compatible broker (bench/java_load.py runs it):
//   java -cp CLASSES:CLIENT_JARS Load 4|5 ENDPOINT TOPIC THREADS BODY_BYTES WARMUP_S DURATION_S
//   4: rocketmq-client (the 4.x API, remoting); ENDPOINT is the NameServer (host:port)
//   5: rocketmq-client-java (5.x, gRPC);        ENDPOINT is the gRPC endpoint (host:port)
// THREADS threads share one producer and each sends single messages of BODY_BYTES bytes,
// synchronously, one after the other: first WARMUP_S seconds unmeasured (JIT, connections,
// routes), then DURATION_S seconds measured. A send counts when it started in the measured
// window; its latency is from the call to the answer. Prints one line:
//   {"event":"load","client":"4.x","threads":16,"body_bytes":128,"sent":N,"errors":E,
//    "seconds":S,"msg_s":R,"p50_ms":A,"p99_ms":B,"first_error":"..."}
// or {"event":"error",...} when the producer cannot start. Only the client named by the mode
// is loaded, so the run's class path needs that client's jars only.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicReference;

public class Load {
    interface Sender {
        void send(byte[] body) throws Exception; // throws when the broker did not store it

        void close() throws Exception;
    }

    static final int WARM = 0, MEASURE = 1, STOP = 2;
    static volatile int phase = WARM;
    static final AtomicReference<String> FIRST_ERROR = new AtomicReference<>("");

    public static void main(String[] args) throws Exception {
        String mode = args[0], endpoint = args[1], topic = args[2];
        int threads = Integer.parseInt(args[3]), size = Integer.parseInt(args[4]);
        double warmup = Double.parseDouble(args[5]), duration = Double.parseDouble(args[6]);
        String client = mode.equals("4") ? "4.x" : "5.x";
        Sender sender;
        try {
            sender = mode.equals("4") ? new V4(endpoint, topic) : new V5(endpoint, topic);
        } catch (Throwable e) {
            emitError(e);
            System.exit(0);
            return;
        }
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        Worker[] workers = new Worker[threads];
        for (int i = 0; i < threads; i++) {
            workers[i] = new Worker(sender, body);
            workers[i].start();
        }
        Thread.sleep((long) (warmup * 1000));
        long start = System.nanoTime();
        phase = MEASURE;
        Thread.sleep((long) (duration * 1000));
        phase = STOP;
        long end = System.nanoTime();
        for (Worker w : workers) w.join(60_000);
        report(client, threads, size, workers, (end - start) / 1e9);
        try {
            sender.close();
        } catch (Throwable ignored) {
            // the figures are out; a slow shutdown must not hide them
        }
        System.out.flush();
        System.exit(0);
    }

    static void report(String client, int threads, int size, Worker[] workers, double seconds) {
        long sent = 0, errors = 0;
        int n = 0;
        for (Worker w : workers) {
            sent += w.sent;
            errors += w.errors;
            n += w.count;
        }
        long[] all = new long[n];
        int at = 0;
        for (Worker w : workers) {
            System.arraycopy(w.latencies, 0, all, at, w.count);
            at += w.count;
        }
        Arrays.sort(all);
        System.out.println("{\"event\":\"load\",\"client\":\"" + client + "\",\"threads\":" + threads
                + ",\"body_bytes\":" + size + ",\"sent\":" + sent + ",\"errors\":" + errors
                + ",\"seconds\":" + round(seconds) + ",\"msg_s\":" + round(sent / seconds)
                + ",\"p50_ms\":" + round(pct(all, 0.50) / 1e6) + ",\"p99_ms\":"
                + round(pct(all, 0.99) / 1e6) + ",\"first_error\":" + quote(FIRST_ERROR.get()) + "}");
    }

    static double pct(long[] sorted, double p) {
        if (sorted.length == 0) return 0;
        return sorted[Math.min(sorted.length - 1, (int) Math.ceil(p * sorted.length) - 1)];
    }

    static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }

    static void emitError(Throwable e) {
        System.out.println("{\"event\":\"error\",\"type\":" + quote(e.getClass().getSimpleName())
                + ",\"message\":" + quote(String.valueOf(e.getMessage())) + "}");
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

    static final class Worker extends Thread {
        final Sender sender;
        final byte[] body;
        long[] latencies = new long[1 << 14];
        int count;
        long sent, errors;

        Worker(Sender sender, byte[] body) {
            this.sender = sender;
            this.body = body;
            setDaemon(true);
        }

        @Override
        public void run() {
            while (phase != STOP) {
                boolean measured = phase == MEASURE;
                long t0 = System.nanoTime();
                try {
                    sender.send(body);
                } catch (Throwable e) {
                    if (measured) errors++;
                    FIRST_ERROR.compareAndSet("", e.getClass().getSimpleName() + ": " + e.getMessage());
                    continue;
                }
                if (!measured) continue;
                sent++;
                if (count == latencies.length) latencies = Arrays.copyOf(latencies, count * 2);
                latencies[count++] = System.nanoTime() - t0;
            }
        }
    }

    // The 4.x API: DefaultMQProducer over remoting, routes from the NameServer.
    static final class V4 implements Sender {
        final org.apache.rocketmq.client.producer.DefaultMQProducer producer;
        final String topic;

        V4(String namesrv, String topic) throws Exception {
            this.topic = topic;
            producer = new org.apache.rocketmq.client.producer.DefaultMQProducer("bench-load4");
            producer.setNamesrvAddr(namesrv);
            producer.setSendMsgTimeout(10_000);
            producer.start();
        }

        public void send(byte[] body) throws Exception {
            org.apache.rocketmq.client.producer.SendResult r =
                    producer.send(new org.apache.rocketmq.common.message.Message(topic, body));
            if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                throw new IllegalStateException("send status " + r.getSendStatus());
            }
        }

        public void close() {
            producer.shutdown();
        }
    }

    // The 5.x client: Producer over gRPC.
    static final class V5 implements Sender {
        final org.apache.rocketmq.client.apis.ClientServiceProvider provider =
                org.apache.rocketmq.client.apis.ClientServiceProvider.loadService();
        final org.apache.rocketmq.client.apis.producer.Producer producer;
        final String topic;

        V5(String endpoint, String topic) throws Exception {
            this.topic = topic;
            org.apache.rocketmq.client.apis.ClientConfiguration config =
                    org.apache.rocketmq.client.apis.ClientConfiguration.newBuilder()
                            .setEndpoints(endpoint).enableSsl(false)
                            .setRequestTimeout(Duration.ofSeconds(10)).build();
            producer = provider.newProducerBuilder().setClientConfiguration(config)
                    .setTopics(topic).build();
        }

        public void send(byte[] body) throws Exception {
            producer.send(provider.newMessageBuilder().setTopic(topic).setBody(body).build());
        }

        public void close() throws Exception {
            producer.close();
        }
    }
}
