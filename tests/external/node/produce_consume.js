'use strict';
// ali-ons (a pure JavaScript RocketMQ remoting client) through our NameServer and broker:
//   node produce_consume.js NAMESRV TOPIC GROUP COUNT
// Sends COUNT messages (body "js-i", tag TagA/TagB), then consumes the topic with a
// clustering consumer until all COUNT arrived or 60 s passed. Prints JSON lines:
// {"sent": i, "msgId": ...} per send, {"got": body, "tags": ..., "q": ...} per delivery,
// and finally {"done": true, "received": n}. Exits 0 when every message arrived.
const { Producer, Consumer, Message } = require('ali-ons');

const [nameSrv, topic, group, countText] = process.argv.slice(2);
const count = Number(countText);
// nameSrv is given, so the HTTP address lookup (httpclient) is never used.
const httpclient = { request() { throw new Error('no HTTP name-server lookup here'); } };
const common = { nameSrv, httpclient, accessKeyId: 'ak', accessKeySecret: 'sk' };

async function main() {
  const producer = new Producer({ ...common, producerGroup: `${group}-producer` });
  await producer.ready();
  for (let i = 0; i < count; i++) {
    const msg = new Message(topic, i % 2 ? 'TagB' : 'TagA', `js-${i}`);
    msg.keys = [ `key-${i}` ];
    const result = await producer.send(msg);
    console.log(JSON.stringify({ sent: i, msgId: result.msgId, status: result.sendStatus }));
  }
  const seen = new Set();
  const consumer = new Consumer({ ...common, consumerGroup: group, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  let finish;
  const allIn = new Promise(resolve => { finish = resolve; });
  consumer.subscribe(topic, '*', async msg => {
    const body = msg.body.toString();
    console.log(JSON.stringify({ got: body, tags: msg.tags, q: msg.queueId }));
    seen.add(body);
    if (seen.size >= count) finish();
  });
  consumer.on('error', err => console.error('consumer error', err.message));
  await consumer.ready();
  const timer = setTimeout(finish, 60000);
  await allIn;
  clearTimeout(timer);
  console.log(JSON.stringify({ done: true, received: seen.size }));
  await consumer.close();
  await producer.close();
  process.exit(seen.size >= count ? 0 : 1);
}

main().catch(err => { console.error(err); process.exit(2); });
