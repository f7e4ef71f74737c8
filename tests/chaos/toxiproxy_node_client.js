// Drives refwire chaos's control API with the npm toxiproxy-node-client, unchanged:
//   node toxiproxy_node_client.js CONTROL_URL UPSTREAM_HOST:PORT LATENCY_MS
// Creates a proxy to the upstream (an echo server) and a latency toxic on it, times
// an echo through the proxy with the toxic and after removing it, exercises the rest
// of the client (version, getAll, get, update, populate, reset, remove), and prints
// one JSON line for the Python test to check.  NODE_PATH points at tests/interop/node/node_modules.
"use strict";
const net = require("net");
const { Toxiproxy } = require("toxiproxy-node-client");

const [controlUrl, upstream, latencyArg] = process.argv.slice(2);
const latency = Number(latencyArg);

function echoTime(listen) {
  const [host, port] = [listen.slice(0, listen.lastIndexOf(":")), Number(listen.slice(listen.lastIndexOf(":") + 1))];
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, host, () => {
      const start = process.hrtime.bigint();
      sock.write("ping");
      sock.once("data", () => {
        const ms = Number(process.hrtime.bigint() - start) / 1e6;
        sock.destroy();
        resolve(ms);
      });
    });
    sock.on("error", reject);
    setTimeout(() => reject(new Error("echo timed out")), 5000).unref();
  });
}

async function main() {
  const toxiproxy = new Toxiproxy(controlUrl);
  const out = {};
  out.version = JSON.parse(await toxiproxy.getVersion()).version;
  const proxy = await toxiproxy.createProxy({ name: "node-echo", listen: "127.0.0.1:0", upstream });
  out.listen = proxy.listen;
  const toxic = await proxy.addToxic({
    name: "slow-replies",
    type: "latency",
    stream: "downstream",
    toxicity: 1,
    attributes: { latency, jitter: 0 },
  });
  out.toxic = toxic.toJson();
  out.withLatencyMs = await echoTime(proxy.listen);
  const updated = await toxic.update({ attributes: { jitter: 5 } });
  out.updatedAttributes = updated.attributes;
  const fetched = await proxy.getToxic("slow-replies");
  out.fetchedName = fetched.name;
  await toxic.remove();
  // the fastest of five: with the toxic still on every echo takes >= its latency, whatever the load
  const without = [];
  for (let i = 0; i < 5; i++) without.push(await echoTime(proxy.listen));
  out.withoutLatencyMs = Math.min(...without);
  out.names = Object.keys(await toxiproxy.getAll());
  const again = await toxiproxy.get("node-echo");
  const disabled = await again.update({ enabled: false });
  out.disabledEnabled = disabled.enabled;
  await toxiproxy.reset();
  out.afterReset = (await toxiproxy.get("node-echo")).enabled;
  const populated = await toxiproxy.populate([{ name: "node-pop", listen: "127.0.0.1:0", upstream, enabled: true }]);
  out.populated = Object.keys(populated);
  try {
    await toxiproxy.createProxy({ name: "node-echo", listen: "127.0.0.1:0", upstream });
    out.duplicate = "accepted";
  } catch (e) {
    out.duplicate = e.message;
  }
  await (await toxiproxy.get("node-pop")).remove();
  await proxy.remove();
  out.left = Object.keys(await toxiproxy.getAll());
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
