// The latency sweep, the way OpenMessaging Benchmark measures it, 4.x client (bench/java_peer.py
// runs it; compiled and run beside Load's classes, whose helpers it uses):
//   Sweep NAMESRV TOPIC THREADS BODY_BYTES WARMUP_S STEP_S STEPS
// One producer (THREADS sending threads) and one DefaultMQPushConsumer (group
// bench-latency4, from the first offset) in this JVM; each body starts with the send's
// System.nanoTime() and its step's number, so the consumer's clock is the sender's.
// STEPS, comma-separated, run in order after WARMUP_S s of unmeasured sends:
//   max     unpaced sends for STEP_S s: the sustained rate is the lower of the send rate
//           and the rate received within the window (so the backlog stays bounded);
//           of several max steps the highest counts (a later one runs warmer);
//   fX      a fixed rate of X times that sustained rate (f0.5: half of it);
//   rN      a fixed rate of N msg/s.
// A paced step gives each send a slot (start + k / rate) and waits for it. After each
// step the sweep waits (up to max(10 s, 2 STEP_S)) until every message of the step has
// arrived. Per step it prints
//   {"event":"step","step":"f0.5","offered_msg_s":R,"sent_msg_s":S,"received_msg_s":V,
//    "backlog":B,"undrained":U,"errors":E,"p50_ms":..,"p99_ms":..,"p999_ms":..}
// (latency of the step's messages, received in or after the window; backlog: sent but
// not yet received when the window closed), then {"event":"sweep","sustained_msg_s":R}.
import java.util.*;

public class Sweep {
    final java.util.concurrent.atomic.AtomicLong sent = new java.util.concurrent.atomic.AtomicLong();
    final java.util.concurrent.atomic.AtomicLong received = new java.util.concurrent.atomic.AtomicLong();
    final java.util.concurrent.atomic.AtomicLong slot = new java.util.concurrent.atomic.AtomicLong();
    final java.util.concurrent.atomic.AtomicLong errors = new java.util.concurrent.atomic.AtomicLong();
    final java.util.concurrent.atomic.AtomicInteger inFlight = new java.util.concurrent.atomic.AtomicInteger();
    volatile int step = -1; // the step whose messages are counted; -1: warm-up
    volatile boolean sending, done;
    volatile long epoch, intervalNs; // intervalNs 0: unpaced
    long[] latencies = new long[1 << 16];
    int count;
    final int size;

    Sweep(int size) {
        this.size = size;
    }

    synchronized void record(long nanos) {
        if (count == latencies.length) latencies = Arrays.copyOf(latencies, count * 2);
        latencies[count++] = nanos;
    }

    synchronized long[] takeLatencies() {
        long[] out = Arrays.copyOf(latencies, count);
        count = 0;
        return out;
    }

    void onMessage(byte[] body) {
        long now = System.nanoTime();
        if (body.length < 12) return;
        java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(body);
        long t0 = b.getLong();
        int of = b.getInt();
        if (of != step) return;
        received.incrementAndGet();
        record(now - t0);
    }

    void sendLoop(org.apache.rocketmq.client.producer.DefaultMQProducer producer, String topic) {
        while (!done) {
            if (!sending) {
                java.util.concurrent.locks.LockSupport.parkNanos(200_000);
                continue;
            }
            long interval = intervalNs;
            if (interval > 0) {
                long due = epoch + slot.getAndIncrement() * interval;
                long now;
                while ((now = System.nanoTime()) < due && sending) {
                    java.util.concurrent.locks.LockSupport.parkNanos(due - now);
                }
                if (!sending) continue;
            }
            int of = step;
            byte[] body = new byte[size];
            java.nio.ByteBuffer.wrap(body).putLong(System.nanoTime()).putInt(of);
            inFlight.incrementAndGet();
            try {
                org.apache.rocketmq.client.producer.SendResult r =
                        producer.send(new org.apache.rocketmq.common.message.Message(topic, body));
                if (r.getSendStatus() != org.apache.rocketmq.client.producer.SendStatus.SEND_OK) {
                    throw new IllegalStateException("send status " + r.getSendStatus());
                }
                if (of == step) sent.incrementAndGet();
            } catch (Throwable e) {
                errors.incrementAndGet();
                Load.FIRST_ERROR.compareAndSet("", e.getClass().getSimpleName() + ": " + e.getMessage());
            } finally {
                inFlight.decrementAndGet();
            }
        }
    }

    // One step: returns the rate offered (0: unpaced) and prints its line.
    double run(String name, int index, double rate, double seconds) throws InterruptedException {
        step = index;
        sent.set(0);
        received.set(0);
        errors.set(0);
        takeLatencies();
        slot.set(0);
        intervalNs = rate > 0 ? (long) (1e9 / rate) : 0;
        epoch = System.nanoTime();
        sending = true;
        Thread.sleep((long) (seconds * 1000));
        sending = false;
        double window = (System.nanoTime() - epoch) / 1e9;
        long receivedInWindow = received.get();
        while (inFlight.get() > 0) Thread.sleep(1);
        long sentInStep = sent.get();
        long backlog = sentInStep - receivedInWindow;
        long deadline = System.nanoTime() + (long) (Math.max(10.0, 2 * seconds) * 1e9);
        while (received.get() < sentInStep && System.nanoTime() < deadline) Thread.sleep(5);
        long[] all = takeLatencies();
        Arrays.sort(all);
        double sentRate = sentInStep / window, receivedRate = receivedInWindow / window;
        System.out.println("{\"event\":\"step\",\"step\":" + Load.quote(name) + ",\"offered_msg_s\":"
                + Load.round(rate) + ",\"sent_msg_s\":" + Load.round(sentRate) + ",\"received_msg_s\":"
                + Load.round(receivedRate) + ",\"backlog\":" + Math.max(0, backlog) + ",\"undrained\":"
                + Math.max(0, sentInStep - received.get()) + ",\"errors\":" + errors.get()
                + ",\"p50_ms\":" + Load.round(Load.pct(all, 0.50) / 1e6) + ",\"p99_ms\":"
                + Load.round(Load.pct(all, 0.99) / 1e6) + ",\"p999_ms\":" + Load.round(Load.pct(all, 0.999) / 1e6) + "}");
        System.out.flush();
        return Math.min(sentRate, receivedRate);
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int threads = Integer.parseInt(args[2]), size = Math.max(12, Integer.parseInt(args[3]));
        double warmup = Double.parseDouble(args[4]), seconds = Double.parseDouble(args[5]);
        String[] steps = args[6].split(",");
        Sweep sweep = new Sweep(size);
        org.apache.rocketmq.client.producer.DefaultMQProducer producer;
        org.apache.rocketmq.client.consumer.DefaultMQPushConsumer consumer;
        try {
            producer = Load.producer4(namesrv, "bench-latency4");
            Load.createTopics(producer, new String[] {topic}, Load.QUEUES);
            consumer = new org.apache.rocketmq.client.consumer.DefaultMQPushConsumer("bench-latency4");
            consumer.setNamesrvAddr(namesrv);
            consumer.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener(
                    (org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently) (msgs, ctx) -> {
                        for (org.apache.rocketmq.common.message.MessageExt m : msgs) sweep.onMessage(m.getBody());
                        return org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                    });
            consumer.start();
        } catch (Throwable e) {
            Load.emitError(e);
            System.exit(0);
            return;
        }
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(() -> sweep.sendLoop(producer, topic));
            t.setDaemon(true);
            t.start();
        }
        sweep.run("warmup", 0, 0, warmup);
        double sustained = 0;
        for (int i = 0; i < steps.length; i++) {
            String s = steps[i];
            double rate = s.equals("max") ? 0
                    : s.startsWith("f") ? Double.parseDouble(s.substring(1)) * sustained
                    : Double.parseDouble(s.substring(1));
            if (s.startsWith("f") && rate <= 0) continue; // no max step ran first
            double achieved = sweep.run(s, i + 1, rate, seconds);
            if (s.equals("max")) sustained = Math.max(sustained, achieved);
        }
        sweep.done = true;
        System.out.println("{\"event\":\"sweep\",\"client\":\"4.x\",\"threads\":" + threads
                + ",\"sustained_msg_s\":" + Load.round(sustained) + ",\"first_error\":"
                + Load.quote(Load.FIRST_ERROR.get()) + "}");
        System.out.flush();
        System.exit(0);
    }
}
