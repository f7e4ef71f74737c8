'use strict'
/*
 * Send N events to a Lumberjack v2 server with the npm package
 * lumberjack-client@1.0.3, and verify the server's ACKs by tapping the socket.
 *
 *   NODE_PATH=tests/interop/node/node_modules \
 *   node lumberjack_client_send.js HOST PORT N [--mode one-window|per-event] [--tls-ca PEM] [--timeout S]
 *
 * Event i is {"n": i, "message": "lumberjack-client event i", "peer": "lumberjack-client"}.
 * Exit 0 only once the final ACK of every window arrived (ACK == the window's
 * last sequence number == its size, since the client numbers 1..n per window);
 * prints one JSON summary line on stdout.  Exit 1 on a wrong ACK, a closed
 * connection, or the timeout; 3 if lumberjack-client cannot be loaded.
 *
 * lumberjack-client quirks (read in node_modules/lumberjack-client/index.js; research §8):
 *  - it connects in its constructor; log() while connecting queues the event,
 *    and the queue is flushed on connect as ONE window; once connected every
 *    log() call is its own window ('2W 1' + '2C'), written back-to-back without
 *    waiting for any ACK (pipelined windows).  There is no way to choose a
 *    window size; hence the two modes: --mode one-window (all N logged before
 *    the connection is up: one window of N) and --mode per-event (N windows of 1);
 *  - every window is '2W n' + one '2C' (pako deflate, default level 6) holding
 *    '2J' frames numbered 1..n;
 *  - it NEVER reads the socket (no 'data' listener, so ACKs just pile up) and
 *    never resends: the ACKs are checked here by adding a 'data' listener to
 *    its socket (client.socket);
 *  - log() while neither connected nor connecting silently drops the event;
 *    on 'close' it reconnects by itself and it has no close()/end() API, so
 *    this script ends with process.exit();
 *  - TLS: new LumberjackClient({host, port, ca: [...]}, true) -> tls.connect
 *    with Node's default verification (chain + IP/hostname check).
 */

const fs = require('fs')

let LumberjackClient
try {
  LumberjackClient = require('lumberjack-client')
} catch (err) {
  console.error(`lumberjack-client is not installed (set NODE_PATH?): ${err.message}`)
  process.exit(3)
}

function usage (msg) {
  console.error(`${msg}\nusage: node lumberjack_client_send.js HOST PORT N [--mode one-window|per-event] [--tls-ca PEM] [--timeout S]`)
  process.exit(2)
}

const argv = process.argv.slice(2)
const positional = []
const opts = { mode: 'one-window', tlsCa: null, timeout: 20 }
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  if (a === '--mode') opts.mode = argv[++i]
  else if (a === '--tls-ca') opts.tlsCa = argv[++i]
  else if (a === '--timeout') opts.timeout = Number(argv[++i])
  else if (a.startsWith('--')) usage(`unknown option ${a}`)
  else positional.push(a)
}
if (positional.length !== 3) usage('HOST PORT N are required')
const [host, portText, countText] = positional
const port = Number(portText)
const count = Number(countText)
if (!Number.isInteger(port) || !Number.isInteger(count) || count < 1) usage('PORT and N must be integers, N >= 1')
if (opts.mode !== 'one-window' && opts.mode !== 'per-event') usage(`bad --mode ${opts.mode}`)

// The ACK expected for each window, in order.
const expected = opts.mode === 'one-window' ? [count] : new Array(count).fill(1)
const started = Date.now()
let acks = 0
let keepalives = 0
let finished = false

function finish (code, summary) {
  if (finished) return
  finished = true
  console.log(JSON.stringify({ ok: code === 0, mode: opts.mode, events: count, windows: expected.length, acks, keepalives, ms: Date.now() - started, ...summary }))
  process.exit(code)
}

const timer = setTimeout(() => finish(1, { error: `timeout after ${opts.timeout}s: ${acks} of ${expected.length} windows acked` }), opts.timeout * 1000)
timer.unref()

const config = { host, port }
const useTls = opts.tlsCa !== null
if (useTls) config.ca = [fs.readFileSync(opts.tlsCa)]
const client = new LumberjackClient(config, useTls) // connects now (connecting = true)
const socket = client.socket

let buf = Buffer.alloc(0)
socket.on('data', (chunk) => {
  buf = Buffer.concat([buf, chunk])
  while (buf.length >= 6) {
    const version = buf[0]
    const type = buf[1]
    const seq = buf.readUInt32BE(2)
    buf = buf.subarray(6)
    if (version !== 0x32 || type !== 0x41) {
      return finish(1, { error: `not a '2A' frame: ${version.toString(16)} ${type.toString(16)} ${seq}` })
    }
    if (seq === 0) { keepalives++; continue } // keepalive while a window waits
    if (acks >= expected.length || seq !== expected[acks]) {
      return finish(1, { error: `ACK ${seq} for window ${acks}, expected ${expected[acks]}` })
    }
    acks++
    if (acks === expected.length) return finish(0, {})
  }
})
socket.on('error', (err) => finish(1, { error: `socket error: ${err.message}` }))
socket.on('close', () => finish(1, { error: `connection closed after ${acks} of ${expected.length} windows acked` }))

function event (i) {
  return { n: i, message: `lumberjack-client event ${i}`, peer: 'lumberjack-client' }
}

if (opts.mode === 'one-window') {
  for (let i = 0; i < count; i++) client.log(event(i)) // queued while connecting
  if (client.queue.length !== count) finish(1, { error: `only ${client.queue.length} of ${count} events queued` })
} else {
  // The library's own connect callback was registered first, so it is connected here.
  socket.once(useTls ? 'secureConnect' : 'connect', () => {
    if (!client.connected) return finish(1, { error: 'lumberjack-client is not connected after connect' })
    for (let i = 0; i < count; i++) client.log(event(i))
  })
}
