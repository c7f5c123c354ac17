// Our interop script: the official Node.js gRPC client (rocketmq-client-nodejs) against
// our broker. Usage: node interop.js ENDPOINT SCENARIO TOPIC [GROUP] [COUNT]
//   produce  send COUNT messages (tags a/b alternating, a key each) -> {"sent": [ids]}
//            (with env PRIORITY=p each message also gets that priority)
//   (env AWAIT_MS: the consumers' long-polling time, default 2000)
//   consume  SimpleConsumer: receive + ack until COUNT arrived -> {"got": [{id, body, tag, keys}]}
//   fifo     send COUNT messages in 3 message groups, then receive them in a FIFO group
//            one at a time, acking each -> {"sent": [...], "got": [{body, group}]}
//   priority send priorities 1..COUNT to a PRIORITY topic, then receive them one at a
//            time -> {"sent": [...], "got": [{body, priority}]}
//   lite     LitePushConsumer bound to TOPIC (a LITE topic) subscribes lite topics
//            lt-0..COUNT-1; a producer sends one message to each and one to lt-other
//            -> {"sent": [...], "got": [{body, liteTopic}]}
// Prints one JSON line on stdout; exits 1 with the error on stderr.
'use strict';
const {
  ConsumeResult, LitePushConsumerImpl, Producer, SimpleConsumer,
} = require('rocketmq-client-nodejs');

const [endpoint, scenario, topic, group = 'node-group', countText = '10'] = process.argv.slice(2);
const count = Number(countText);
const deadlineMs = Date.now() + 20000;

// The client's shutdown logs after closing its own log file and then throws
// "log stream had been closed" (rocketmq-client-nodejs 1.0.8); only that is ignored.
function debug(text) {
  if (process.env.INTEROP_DEBUG) process.stderr.write(`${new Date().toISOString()} ${text}\n`);
}

async function quietShutdown(client) {
  try {
    await client.shutdown();
  } catch (error) {
    if (!String(error && error.message).includes('log stream had been closed')) throw error;
  }
}

async function produce(messages) {
  const producer = new Producer({ endpoints: endpoint, namespace: '' });
  await producer.startup();
  const ids = [];
  try {
    for (const options of messages) {
      const receipt = await producer.send(options);
      ids.push(receipt.messageId);
    }
  } finally {
    await quietShutdown(producer);
  }
  return ids;
}

async function receive(want, batch, view) {
  const consumer = new SimpleConsumer({
    endpoints: endpoint, namespace: '', consumerGroup: group,
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: Number(process.env.AWAIT_MS || 2000),  // RocketMQ's proxy wants >= 5000
  });
  await consumer.startup();
  const got = [];
  try {
    while (got.length < want && Date.now() < deadlineMs) {
      const messages = await consumer.receive(batch, 15000);
      debug(`received ${messages.length}`);
      for (const m of messages) {
        got.push(view(m));
        await consumer.ack(m);
      }
    }
  } finally {
    await quietShutdown(consumer);
  }
  return got;
}

async function lite() {
  const got = [];
  let enough;
  const arrived = new Promise(resolve => { enough = resolve; });
  const consumer = new LitePushConsumerImpl({
    endpoints: endpoint, namespace: '', consumerGroup: group, bindTopic: topic,
    subscriptions: new Map(),
    messageListener: {
      consume(m) {
        got.push({ body: m.body.toString(), liteTopic: m.liteTopic });
        if (got.length >= count) enough();
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  try {
    for (let i = 0; i < count; i++) await consumer.subscribeLite(`lt-${i}`);
    // The client's startup fires a COMPLETE_ADD of its (empty) set without awaiting it, so
    // it can reach the broker after the first PARTIAL_ADD and replace it; its next
    // COMPLETE_ADD comes 30 s later. Send the full set now, as that timer would.
    await consumer.liteSubscriptionManager.syncAllLiteSubscription();
    const messages = [];
    for (let i = 0; i < count; i++) {
      messages.push({ topic, liteTopic: `lt-${i}`, body: Buffer.from(`lite-${i}`) });
    }
    messages.push({ topic, liteTopic: 'lt-other', body: Buffer.from('not-subscribed') });
    const sent = await produce(messages);
    debug('lite: sent');
    await Promise.race([arrived, new Promise(resolve => setTimeout(resolve, deadlineMs - Date.now()))]);
    debug(`lite: got ${got.length}`);
    await new Promise(resolve => setTimeout(resolve, 500));  // nothing else may arrive
    return { sent, got };
  } finally {
    await quietShutdown(consumer);
    debug('lite: closed');
  }
}

async function main() {
  if (scenario === 'produce') {
    const messages = [];
    for (let i = 0; i < count; i++) {
      const options = { topic, tag: i % 2 ? 'b' : 'a', keys: [`k${i}`], body: Buffer.from(`node-${i}`) };
      if (process.env.PRIORITY !== undefined) options.priority = Number(process.env.PRIORITY);
      messages.push(options);
    }
    return { sent: await produce(messages) };
  }
  if (scenario === 'consume') {
    const got = await receive(count, 16, m => ({
      id: m.messageId, body: m.body.toString(), tag: m.tag, keys: m.keys,
    }));
    return { got };
  }
  if (scenario === 'fifo') {
    const messages = [];
    for (let i = 0; i < count; i++) {
      messages.push({ topic, messageGroup: `g${i % 3}`, body: Buffer.from(`g${i % 3}-${i}`) });
    }
    const sent = await produce(messages);
    const got = await receive(count, 1, m => ({ body: m.body.toString(), group: m.messageGroup }));
    return { sent, got };
  }
  if (scenario === 'priority') {
    const messages = [];
    for (let i = 0; i < count; i++) {
      // from 1: the client declares priority 0 as a NORMAL message (its `!priority`
      // check) and then refuses it itself for a PRIORITY topic (accepts only PRIORITY)
      messages.push({ topic, priority: i + 1, body: Buffer.from(`priority-${i + 1}`) });
    }
    const sent = await produce(messages);
    const got = await receive(count, 1, m => ({ body: m.body.toString(), priority: m.priority }));
    return { sent, got };
  }
  if (scenario === 'lite') {
    return lite();
  }
  throw new Error(`unknown scenario ${scenario}`);
}

main().then(
  result => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0); },
  error => { process.stderr.write(`${error && error.stack || error}\n`); process.exit(1); },
);
