// The RocketMQ 4.x-API Java client (remoting, rocketmq-client) as an external client:
//   java -cp '.peers/rocketmq/server/*' peers/java/Client4.java NAMESRV COMMAND ARGS...
// Commands (one JSON object per line; a last {"event":"done"} or {"event":"error",...}):
//   send TOPIC COUNT MODE [trace]    MODE: sync|async|oneway|batch|orderly|tag:TAG|prop:K=V
//   txn TOPIC commit|rollback|check-commit|check-rollback
//   push TOPIC GROUP COUNT WAIT_S MODEL [trace]
//        MODEL: clustering|broadcasting|orderly|first|retry:N|tag:EXPR|sql:EXPR
//   lite TOPIC GROUP COUNT WAIT_S     assign all queues, seek to 0, poll, commit
//   traced TOPIC GROUP WAIT_S         producer and push consumer both with message trace on
//        (enableMsgTrace): one sync send, consumed from the first offset; each stays up until
//        its trace data (Pub; SubBefore and SubAfter) is found in RMQ_SYS_TRACE_TOPIC
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.MQAdmin;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;

public class Client4 {
    static String namesrv;

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        String[] rest = Arrays.copyOfRange(args, 2, args.length);
        try {
            switch (args[1]) {
                case "send": send(rest); break;
                case "txn": txn(rest); break;
                case "push": push(rest); break;
                case "lite": lite(rest); break;
                case "traced": traced(rest); break;
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
        String tag = mode.startsWith("tag:") ? mode.substring(4) : "TagA";
        Message m = new Message(topic, tag, "k-" + body, body.getBytes(StandardCharsets.UTF_8));
        if (mode.startsWith("prop:")) {
            String[] kv = mode.substring(5).split("=", 2);
            m.putUserProperty(kv[0], kv[1]);
        }
        return m;
    }

    static void send(String[] a) throws Exception {
        String topic = a[0], mode = a[2];
        int count = Integer.parseInt(a[1]);
        boolean trace = a.length > 3 && a[3].equals("trace");
        DefaultMQProducer p = new DefaultMQProducer("PID_" + topic, trace, null);
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(15000); // a loaded test machine answers slowly
        p.start();
        try {
            if (mode.equals("batch")) {
                List<Message> batch = new ArrayList<>();
                for (int i = 0; i < count; i++) batch.add(message(topic, "m-" + i, mode));
                emit("sent_batch", "status", p.send(batch).getSendStatus().name(), "count", count);
                return;
            }
            CountDownLatch acked = new CountDownLatch(count);
            for (int i = 0; i < count; i++) sendOne(p, message(topic, "m-" + i, mode), mode, i, acked);
            if (mode.equals("async")) emit("async_acked", "value", acked.await(30, TimeUnit.SECONDS));
        } finally {
            p.shutdown();
        }
    }

    static void sendOne(DefaultMQProducer p, Message m, String mode, int i, CountDownLatch acked)
            throws Exception {
        String body = new String(m.getBody(), StandardCharsets.UTF_8);
        switch (mode) {
            case "oneway":
                p.sendOneway(m);
                emit("sent", "body", body);
                return;
            case "async":
                p.send(m, new SendCallback() {
                    public void onSuccess(SendResult r) { emit("sent", "body", body, "status", r.getSendStatus().name()); acked.countDown(); }
                    public void onException(Throwable e) { emit("send_failed", "body", body, "message", e.getMessage()); }
                });
                return;
            case "orderly":
                MessageQueueSelector byKey = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());
                SendResult r = p.send(m, byKey, i % 2);
                emit("sent", "body", body, "status", r.getSendStatus().name(), "queue_key", i % 2,
                        "queue", r.getMessageQueue().getQueueId());
                return;
            default:
                SendResult s = p.send(m);
                emit("sent", "body", body, "status", s.getSendStatus().name(), "msg_id", s.getMsgId(),
                        "offset_msg_id", s.getOffsetMsgId(), "queue_offset", s.getQueueOffset());
        }
    }

    static void txn(String[] a) throws Exception {
        String topic = a[0], decision = a[1];
        CountDownLatch checked = new CountDownLatch(1);
        TransactionMQProducer p = new TransactionMQProducer("TXN_" + topic);
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(15000);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                if (decision.equals("commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (decision.equals("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                emit("checked", "body", new String(msg.getBody(), StandardCharsets.UTF_8));
                checked.countDown();
                return decision.endsWith("commit") ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        try {
            TransactionSendResult r = p.sendMessageInTransaction(message(topic, "txn-" + decision, "sync"), null);
            emit("half_sent", "state", r.getLocalTransactionState().name(), "status", r.getSendStatus().name());
            if (decision.startsWith("check")) emit("check_seen", "value", checked.await(90, TimeUnit.SECONDS));
        } finally {
            p.shutdown();
        }
    }

    static void received(MessageExt m) {
        emit("received", "body", new String(m.getBody(), StandardCharsets.UTF_8), "tag", String.valueOf(m.getTags()),
                "queue", m.getQueueId(), "reconsume", m.getReconsumeTimes(), "topic", m.getTopic());
    }

    static void push(String[] a) throws Exception {
        String topic = a[0], group = a[1], model = a[4];
        int count = Integer.parseInt(a[2]);
        boolean trace = a.length > 5 && a[5].equals("trace");
        CountDownLatch latch = new CountDownLatch(count);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, trace, null);
        c.setNamesrvAddr(namesrv);
        if (model.startsWith("sql:")) c.subscribe(topic, MessageSelector.bySql(model.substring(4)));
        else c.subscribe(topic, model.startsWith("tag:") ? model.substring(4) : "*");
        if (model.equals("broadcasting")) c.setMessageModel(MessageModel.BROADCASTING);
        if (model.equals("first")) c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        int failures = model.startsWith("retry:") ? Integer.parseInt(model.substring(6)) : -1;
        if (failures >= 0) c.setMaxReconsumeTimes(failures);
        if (model.equals("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                msgs.forEach(m -> { received(m); latch.countDown(); });
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                msgs.forEach(m -> { received(m); latch.countDown(); });
                if (failures < 0) return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                ctx.setDelayLevelWhenNextConsume(1);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            });
        }
        c.start();
        emit("started");
        try {
            latch.await(Long.parseLong(a[3]), TimeUnit.SECONDS);
            if (failures >= 0) Thread.sleep(3000); // let the last send-back reach the DLQ
        } finally {
            c.shutdown();
        }
    }

    static void lite(String[] a) throws Exception {
        String topic = a[0], group = a[1];
        int count = Integer.parseInt(a[2]);
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a[3]);
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setAutoCommit(false);
        c.start();
        try {
            Collection<MessageQueue> queues = c.fetchMessageQueues(topic);
            c.assign(queues);
            for (MessageQueue q : queues) c.seek(q, 0);
            int got = 0;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (MessageExt m : c.poll(2000)) { received(m); got++; }
            }
            c.commitSync();
            long committed = 0;
            for (MessageQueue q : queues) committed += Math.max(0, c.committed(q));
            emit("committed", "total", committed);
        } finally {
            c.shutdown();
        }
    }

    static void traced(String[] a) throws Exception {
        String topic = a[0], group = a[1];
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a[2]);
        CountDownLatch latch = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, true, null);
        c.setNamesrvAddr(namesrv);
        c.setTraceMsgBatchNum(1); // send each trace record at once, not every 5 s
        c.subscribe(topic, "*");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received(m);
                if ("traced-0".equals(new String(m.getBody(), StandardCharsets.UTF_8))) latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        DefaultMQProducer p = new DefaultMQProducer("PID_" + topic, true, null);
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(15000);
        p.setTraceMsgBatchNum(1);
        try {
            c.start(); // first, so its rebalance overlaps the producer's start
            p.start();
            SendResult s = p.send(message(topic, "traced-0", "sync"));
            String msgId = s.getMsgId();
            emit("sent", "body", "traced-0", "status", s.getSendStatus().name(), "msg_id", msgId,
                    "queue", s.getMessageQueue().getQueueId(), "queue_offset", s.getQueueOffset());
            emit("consumed", "value", latch.await(deadline - System.currentTimeMillis(), TimeUnit.MILLISECONDS));
            emit("trace_stored", "type", "Pub", "value", awaitTrace(p, msgId, "Pub", deadline));
            emit("trace_stored", "type", "SubAfter", "value", awaitTrace(c, msgId, "SubAfter", deadline));
        } finally {
            p.shutdown();
            c.shutdown();
        }
    }

    // Whether a trace record of TYPE for msgId is in RMQ_SYS_TRACE_TOPIC (queried by that key,
    // as queryMsgTraceById does) before the deadline: the client sends its trace data
    // asynchronously, so it stays up until the broker has stored it.
    static boolean awaitTrace(MQAdmin who, String msgId, String type, long deadline) throws InterruptedException {
        while (System.currentTimeMillis() < deadline) {
            try {
                for (MessageExt m : who.queryMessage("RMQ_SYS_TRACE_TOPIC", msgId, 64, 0, Long.MAX_VALUE).getMessageList()) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    if (body.startsWith(type + "\u0001") || body.contains("\u0002" + type + "\u0001")) return true;
                }
            } catch (MQClientException e) {
                // not indexed yet (QUERY_NOT_FOUND)
            }
            Thread.sleep(200);
        }
        return false;
    }
}
