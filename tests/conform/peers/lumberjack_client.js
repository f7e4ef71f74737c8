'use strict'
/*
 * The npm lumberjack-client@1.0.3 as a `refwire conform --client --exec` testee:
 *
 *   NODE_PATH=tests/interop/node/node_modules node lumberjack_client.js HOST PORT EVENTS [TLS_CA]
 *
 * It logs EVENTS events (queued while connecting: one window) and exits 0
 * one second after the connection is up -- the library never reads acks and
 * offers no way to learn whether they came (specs/lumberjack/README.md §7),
 * so "written" is all an application can believe.
 */
const fs = require('fs')
const LumberjackClient = require('lumberjack-client')

const [host, portText, countText, ca] = process.argv.slice(2)
const config = { host, port: Number(portText) }
if (ca) config.ca = [fs.readFileSync(ca)]
const client = new LumberjackClient(config, Boolean(ca))
for (let i = 0; i < Number(countText); i++) client.log({ message: `conform event ${i}`, n: i })
client.socket.once(ca ? 'secureConnect' : 'connect', () => setTimeout(() => process.exit(0), 1000))
setTimeout(() => process.exit(1), 10000) // never connected
