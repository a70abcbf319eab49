// Just enough AMQP 0-9-1 to hold a connection open for the console test: the handshake
// (PLAIN), a channel with a prefetch and a consumer on a queue of its own (for the channel's
// page), then waiting for the broker's connection.close (e.g. after "Close" in the console).

import net from "node:net";

const FRAME_METHOD = 1;
const FRAME_END = 0xce;

function shortStr(text) {
  const bytes = Buffer.from(text, "utf8");
  return Buffer.concat([Buffer.from([bytes.length]), bytes]);
}

function longStr(bytes) {
  const size = Buffer.alloc(4);
  size.writeUInt32BE(bytes.length);
  return Buffer.concat([size, bytes]);
}

/** A field table of string values. */
function table(entries) {
  const body = Buffer.concat(
    Object.entries(entries).map(([key, value]) => Buffer.concat([shortStr(key), Buffer.from("S"), longStr(Buffer.from(value, "utf8"))])),
  );
  return longStr(body);
}

function short(n) {
  const bytes = Buffer.alloc(2);
  bytes.writeUInt16BE(n);
  return bytes;
}

function method(classId, methodId, args, channel = 0) {
  const payload = Buffer.concat([Buffer.from([classId >> 8, classId & 255, methodId >> 8, methodId & 255]), args]);
  const header = Buffer.alloc(7);
  header.writeUInt8(FRAME_METHOD, 0);
  header.writeUInt16BE(channel, 1);
  header.writeUInt32BE(payload.length, 3);
  return Buffer.concat([header, payload, Buffer.from([FRAME_END])]);
}

/**
 * Opens channel `number` on `socket` with basic.qos `prefetch`, declares the exclusive queue
 * `queue` and consumes from it with manual acks as `tag`. Nothing is awaited: the broker
 * handles a channel's methods in order.
 */
function consumeOn(socket, number, { prefetch, queue, tag }) {
  socket.write(method(20, 10, shortStr(""), number));
  const qos = Buffer.alloc(7);
  qos.writeUInt16BE(prefetch, 4);
  socket.write(method(60, 10, qos, number));
  // queue.declare: exclusive and auto-delete (bits passive, durable, exclusive, auto-delete).
  socket.write(method(50, 10, Buffer.concat([short(0), shortStr(queue), Buffer.from([0b1100]), table({})]), number));
  socket.write(method(60, 20, Buffer.concat([short(0), shortStr(queue), shortStr(tag), Buffer.from([0]), table({})]), number));
}

/**
 * Opens a connection to `url` (amqp://user:pass@host:port/vhost). Resolves once open, to
 * {localPort, closed: Promise<{code, text}> (the broker's connection.close), end(),
 * consume(channelNumber, {prefetch, queue, tag})}.
 */
export function connect(url, clientProperties = {}) {
  const parsed = new URL(url);
  const user = decodeURIComponent(parsed.username || "guest");
  const password = decodeURIComponent(parsed.password || "guest");
  const vhost = parsed.pathname.length > 1 ? decodeURIComponent(parsed.pathname.slice(1)) : "/";
  const socket = net.connect(Number(parsed.port || 5672), parsed.hostname);
  let buffered = Buffer.alloc(0);
  let opened;
  let failed;
  let closedBy;
  const open = new Promise((resolve, reject) => {
    opened = resolve;
    failed = reject;
  });
  const closed = new Promise((resolve) => {
    closedBy = resolve;
  });
  socket.on("error", (error) => failed(error));
  socket.on("close", () => failed(new Error("connection closed during the handshake")));
  socket.on("connect", () => socket.write(Buffer.from([65, 77, 81, 80, 0, 0, 9, 1])));
  socket.on("data", (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 8) {
      const size = buffered.readUInt32BE(3);
      if (buffered.length < size + 8) break;
      const type = buffered.readUInt8(0);
      const payload = buffered.subarray(7, 7 + size);
      buffered = buffered.subarray(size + 8);
      if (type !== FRAME_METHOD) continue;
      const classId = payload.readUInt16BE(0);
      const methodId = payload.readUInt16BE(2);
      const args = payload.subarray(4);
      if (classId !== 10) continue;
      if (methodId === 10) {
        // connection.start → start-ok with PLAIN
        const response = Buffer.from(`\u0000${user}\u0000${password}`, "utf8");
        socket.write(method(10, 11, Buffer.concat([table(clientProperties), shortStr("PLAIN"), longStr(response), shortStr("en_US")])));
      } else if (methodId === 30) {
        // connection.tune → tune-ok (no heartbeats), then open
        const tuneOk = Buffer.alloc(8);
        tuneOk.writeUInt16BE(args.readUInt16BE(0), 0);
        tuneOk.writeUInt32BE(args.readUInt32BE(2), 2);
        tuneOk.writeUInt16BE(0, 6);
        socket.write(method(10, 31, tuneOk));
        socket.write(method(10, 40, Buffer.concat([shortStr(vhost), shortStr(""), Buffer.from([0])])));
      } else if (methodId === 41) {
        opened({
          localPort: socket.localPort,
          closed,
          end: () => socket.destroy(),
          consume: (number, options) => consumeOn(socket, number, options),
        });
      } else if (methodId === 50) {
        const code = args.readUInt16BE(0);
        const text = args.subarray(3, 3 + args.readUInt8(2)).toString("utf8");
        socket.write(method(10, 51, Buffer.alloc(0)));
        closedBy({ code, text });
        failed(new Error(`connection.close ${code} ${text}`));
        socket.end();
      }
    }
  });
  return open;
}
