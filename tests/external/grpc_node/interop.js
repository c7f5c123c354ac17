// Our interop script: the official Node.js gRPC client (rocketmq-client-nodejs) against
// our broker. Usage: node interop.js ENDPOINT SCENARIO TOPIC [GROUP] [COUNT]
//   produce  send COUNT messages (tags a/b alternating, a key each) -> {"sent": [ids]}
//   consume  SimpleConsumer: receive + ack until COUNT arrived -> {"got": [{id, body, tag, keys}]}
//   fifo     send COUNT messages in 3 message groups, then receive them in a FIFO group
//            one at a time, acking each -> {"sent": [...], "got": [{body, group}]}
// Prints one JSON line on stdout; exits 1 with the error on stderr.
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const [endpoint, scenario, topic, group = 'node-group', countText = '10'] = process.argv.slice(2);
const count = Number(countText);
const deadlineMs = Date.now() + 20000;

// The client's shutdown logs after closing its own log file and then throws
// "log stream had been closed" (rocketmq-client-nodejs 1.0.8); only that is ignored.
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
    subscriptions: new Map().set(topic, '*'), awaitDuration: 2000,
  });
  await consumer.startup();
  const got = [];
  try {
    while (got.length < want && Date.now() < deadlineMs) {
      const messages = await consumer.receive(batch, 15000);
      if (process.env.INTEROP_DEBUG) process.stderr.write(`received ${messages.length}\n`);
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

async function main() {
  if (scenario === 'produce') {
    const messages = [];
    for (let i = 0; i < count; i++) {
      messages.push({ topic, tag: i % 2 ? 'b' : 'a', keys: [`k${i}`], body: Buffer.from(`node-${i}`) });
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
  throw new Error(`unknown scenario ${scenario}`);
}

main().then(
  result => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0); },
  error => { process.stderr.write(`${error && error.stack || error}\n`); process.exit(1); },
);
