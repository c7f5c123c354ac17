// A Java load against a RocketMQ-compatible broker (bench/java_load.py and
// bench/java_latency.py run it). Modes:
//   Load 4|5 ENDPOINT TOPIC THREADS BODY_BYTES WARMUP_S DURATION_S
//     single sends. 4: rocketmq-client (the 4.x API, remoting), ENDPOINT the NameServer;
//     5: rocketmq-client-java (5.x, gRPC), ENDPOINT the gRPC endpoint (host:port).
//   Load batch NAMESRV TOPIC TOPICS THREADS BODY_BYTES BATCH WARMUP_S DURATION_S
//     4.x batch sends of BATCH messages; TOPICS > 1 spreads them over TOPIC-0..TOPIC-(n-1),
//     each thread taking the next topic for each batch.
//   Load drain NAMESRV TOPIC THREADS BODY_BYTES COUNT
//     fills TOPIC with COUNT messages (4.x batch sends of 256, untimed), then reads them all
//     back with DefaultMQPullConsumer, THREADS threads sharing the queues, from offset 0.
// (the latency sweep is Sweep.java, which uses this file's helpers)
// THREADS threads share one producer and each sends one call after the other: first
// WARMUP_S seconds unmeasured (JIT, connections, routes), then DURATION_S seconds measured.
// A call counts when its answer came in the measured window (a loaded broker whose calls
// outlast the window still shows what it completed); its latency is from the call to the
// answer. Prints one line:
//   {"event":"load","client":"4.x","threads":16,"body_bytes":128,"sent":N,"errors":E,
//    "seconds":S,"msg_s":R,"p50_ms":A,"p99_ms":B,"first_error":"..."}
// (drain: {"event":"drain","read":N,"seconds":S,"msg_s":R,"fill_msg_s":F,...})
// or {"event":"error",...} when the client cannot start. Only the client named by the mode
// is loaded, so the run's class path needs that client's jars only.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicReference;

public class Load {
    interface Sender {
        int send(byte[] body) throws Exception; // messages stored; throws when not stored

        void close() throws Exception;
    }

    static final int WARM = 0, MEASURE = 1, STOP = 2;
    static final int QUEUES = 8; // the queues of each topic batch/drain/latency create
    static volatile int phase = WARM;
    static final AtomicReference<String> FIRST_ERROR = new AtomicReference<>("");

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        if (mode.equals("drain")) {
            drain(args);
            return;
        }
        boolean batch = mode.equals("batch");
        String[] rest = batch ? Arrays.copyOfRange(args, 4, args.length) : Arrays.copyOfRange(args, 3, args.length);
        String endpoint = args[1], topic = args[2];
        int threads = Integer.parseInt(rest[0]), size = Integer.parseInt(rest[1]);
        int batchSize = batch ? Integer.parseInt(rest[2]) : 1;
        double warmup = Double.parseDouble(rest[batch ? 3 : 2]), duration = Double.parseDouble(rest[batch ? 4 : 3]);
        String client = mode.equals("5") ? "5.x" : "4.x";
        Sender sender;
        try {
            if (batch) sender = new V4Batch(endpoint, topic, Integer.parseInt(args[3]), batchSize);
            else sender = mode.equals("4") ? new V4(endpoint, topic) : new V5(endpoint, topic);
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
                int stored;
                long t0 = System.nanoTime();
                try {
                    stored = sender.send(body);
                } catch (Throwable e) {
                    if (phase == MEASURE) errors++;
                    FIRST_ERROR.compareAndSet("", e.getClass().getSimpleName() + ": " + e.getMessage());
                    continue;
                }
                if (phase != MEASURE) continue; // answered outside the window
                sent += stored;
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

        public int send(byte[] body) throws Exception {
            org.apache.rocketmq.client.producer.SendResult r =
                    producer.send(new org.apache.rocketmq.common.message.Message(topic, body));
            if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                throw new IllegalStateException("send status " + r.getSendStatus());
            }
            return 1;
        }

        public void close() {
            producer.shutdown();
        }
    }

    static org.apache.rocketmq.client.producer.DefaultMQProducer producer4(String namesrv, String group)
            throws Exception {
        org.apache.rocketmq.client.producer.DefaultMQProducer producer =
                new org.apache.rocketmq.client.producer.DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(10_000);
        producer.setMaxMessageSize(16 << 20);
        producer.start();
        return producer;
    }

    // Creates each topic (QUEUES read and write queues) on every broker the NameServer lists,
    // as mqadmin updateTopic does (UPDATE_AND_CREATE_TOPIC), one JVM for them all.
    static void createTopics(org.apache.rocketmq.client.producer.DefaultMQProducer producer,
            String[] topics, int queues) throws Exception {
        org.apache.rocketmq.client.impl.MQClientAPIImpl api =
                producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        org.apache.rocketmq.remoting.protocol.body.ClusterInfo info = api.getBrokerClusterInfo(10_000);
        for (org.apache.rocketmq.remoting.protocol.route.BrokerData broker : info.getBrokerAddrTable().values()) {
            String addr = broker.selectBrokerAddr();
            for (String topic : topics) {
                api.createTopic(addr, "TBW102", new org.apache.rocketmq.common.TopicConfig(topic, queues, queues), 10_000);
            }
        }
        for (String topic : topics) { // until the NameServer routes every one
            for (int i = 0; i < 200; i++) {
                try {
                    api.getTopicRouteInfoFromNameServer(topic, 3_000);
                    break;
                } catch (Exception e) {
                    Thread.sleep(50);
                }
            }
        }
    }

    // The 4.x API's batch send: one call stores BATCH messages of one topic.
    static final class V4Batch implements Sender {
        final org.apache.rocketmq.client.producer.DefaultMQProducer producer;
        final String[] topics;
        final int batch;
        final java.util.concurrent.atomic.AtomicLong next = new java.util.concurrent.atomic.AtomicLong();

        V4Batch(String namesrv, String topic, int topicCount, int batch) throws Exception {
            topics = new String[topicCount];
            for (int i = 0; i < topicCount; i++) topics[i] = topicCount == 1 ? topic : topic + "-" + i;
            this.batch = batch;
            producer = producer4(namesrv, "bench-batch4");
            createTopics(producer, topics, QUEUES);
        }

        public int send(byte[] body) throws Exception {
            String topic = topics[(int) (next.getAndIncrement() % topics.length)];
            List<org.apache.rocketmq.common.message.Message> messages = new ArrayList<>(batch);
            for (int i = 0; i < batch; i++) messages.add(new org.apache.rocketmq.common.message.Message(topic, body));
            org.apache.rocketmq.client.producer.SendResult r = producer.send(messages);
            if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                throw new IllegalStateException("send status " + r.getSendStatus());
            }
            return batch;
        }

        public void close() {
            producer.shutdown();
        }
    }

    // drain: fill COUNT messages (untimed), then pull them all back from offset 0.
    static void drain(String[] args) throws Exception {
        String namesrv = args[1], topic = args[2];
        int threads = Integer.parseInt(args[3]), size = Integer.parseInt(args[4]);
        long count = Long.parseLong(args[5]);
        org.apache.rocketmq.client.consumer.DefaultMQPullConsumer consumer;
        V4Batch filler;
        try {
            filler = new V4Batch(namesrv, topic, 1, 256);
            consumer = new org.apache.rocketmq.client.consumer.DefaultMQPullConsumer("bench-drain4");
            consumer.setNamesrvAddr(namesrv);
            consumer.start();
        } catch (Throwable e) {
            emitError(e);
            System.exit(0);
            return;
        }
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        long fillStart = System.nanoTime();
        long filled = 0;
        try {
            while (filled < count) filled += filler.send(body);
        } catch (Throwable e) {
            emitError(e);
            System.exit(0);
        }
        double fillSeconds = (System.nanoTime() - fillStart) / 1e9;
        filler.close();
        List<org.apache.rocketmq.common.message.MessageQueue> queues =
                new ArrayList<>(consumer.fetchSubscribeMessageQueues(topic));
        // the broker may still be indexing the fill (consume queues lag the log; RocketMQ's
        // reput can run far behind after the batch cases): wait up to 300 s until
        // the queues hold every message sent, else a drain would read a part and call it done
        long held = 0, heldFirst = -1, waitStart = System.nanoTime();
        while (System.nanoTime() - waitStart < 300_000_000_000L) {
            held = 0;
            for (org.apache.rocketmq.common.message.MessageQueue q : queues) {
                held += consumer.maxOffset(q) - consumer.minOffset(q);
            }
            if (heldFirst < 0) heldFirst = held;
            if (held >= filled) break;
            Thread.sleep(100);
        }
        double dispatchWait = (System.nanoTime() - waitStart) / 1e9;
        if (held < filled) {
            FIRST_ERROR.compareAndSet("", "the queues hold " + held + " of " + filled + " sent after 300 s");
        }
        java.util.concurrent.atomic.AtomicLong read = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong bad = new java.util.concurrent.atomic.AtomicLong();
        Thread[] workers = new Thread[Math.min(threads, queues.size())];
        long start = System.nanoTime();
        for (int t = 0; t < workers.length; t++) {
            final int first = t;
            workers[t] = new Thread(() -> {
                for (int q = first; q < queues.size(); q += workers.length) {
                    try {
                        pullQueue(consumer, queues.get(q), size, read, bad);
                    } catch (Throwable e) {
                        FIRST_ERROR.compareAndSet("", e.getClass().getSimpleName() + ": " + e.getMessage());
                    }
                }
            });
            workers[t].start();
        }
        for (Thread w : workers) w.join();
        double seconds = (System.nanoTime() - start) / 1e9;
        consumer.shutdown();
        if (read.get() != filled) {
            FIRST_ERROR.compareAndSet("", "read " + read.get() + " of " + filled + " sent");
        }
        System.out.println("{\"event\":\"drain\",\"client\":\"4.x\",\"threads\":" + workers.length
                + ",\"queues\":" + queues.size() + ",\"filled\":" + filled + ",\"read\":" + read.get()
                + ",\"bad\":" + bad.get() + ",\"seconds\":" + round(seconds) + ",\"msg_s\":"
                + round(read.get() / seconds) + ",\"fill_msg_s\":" + round(filled / fillSeconds)
                + ",\"dispatch_wait_s\":" + round(dispatchWait) + ",\"held_at_first_look\":" + heldFirst
                + ",\"first_error\":" + quote(FIRST_ERROR.get()) + "}");
        System.out.flush();
        System.exit(0);
    }

    static void pullQueue(org.apache.rocketmq.client.consumer.DefaultMQPullConsumer consumer,
            org.apache.rocketmq.common.message.MessageQueue queue, int size,
            java.util.concurrent.atomic.AtomicLong read, java.util.concurrent.atomic.AtomicLong bad)
            throws Exception {
        long end = consumer.maxOffset(queue), offset = consumer.minOffset(queue);
        while (offset < end) {
            org.apache.rocketmq.client.consumer.PullResult r = consumer.pull(queue, "*", offset, 1024);
            if (r.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.FOUND) {
                throw new IllegalStateException("pull " + queue + " at " + offset + ": " + r.getPullStatus());
            }
            for (org.apache.rocketmq.common.message.MessageExt m : r.getMsgFoundList()) {
                if (m.getBody().length != size) bad.incrementAndGet();
            }
            read.addAndGet(r.getMsgFoundList().size());
            offset = r.getNextBeginOffset();
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

        public int send(byte[] body) throws Exception {
            producer.send(provider.newMessageBuilder().setTopic(topic).setBody(body).build());
            return 1;
        }

        public void close() throws Exception {
            producer.close();
        }
    }
}
