// Starts the fauxqs SQS emulator for Berth's integration tests.
//
// Usage: node server.mjs <fauxqs install dir>
//
// It differs from the package's own CLI (dist/cli.js, which is
// `startFauxqs({ logger: true })`) in three ways:
//   - request logging is off: the CLI forces it on, and the test suite sends
//     hundreds of thousands of requests;
//   - FAUXQS_PORT=0 (the default here) lets the OS pick a free port, so two
//     runs never race for one; the chosen port is written to FAUXQS_PORT_FILE;
//   - with FAUXQS_PARENT_PID set it exits when that process is gone, so a
//     killed test script does not leave the emulator behind.
// FAUXQS_HOST is deliberately left unset. It only changes the host part of
// the queue URLs fauxqs hands out, which is always "sqs.<region>.<host>:<port>"
// (default http://sqs.us-east-1.localhost:<port>/000000000000/<name>; with
// FAUXQS_HOST=127.0.0.1 it would be sqs.us-east-1.127.0.0.1, no better).
// Clients send every request to the endpoint, not to the queue URL's host,
// and must pass back the queue URL exactly as returned: fauxqs looks queues
// up by the whole URL.
import { rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node server.mjs <fauxqs install dir>");
  process.exit(2);
}
const { startFauxqs } = await import(
  pathToFileURL(join(dir, "node_modules", "fauxqs", "dist", "app.js")).href
);

const port = parseInt(process.env.FAUXQS_PORT ?? "0", 10);
const server = await startFauxqs({ port, logger: false });
console.log(`fauxqs listening on port ${server.port}`);

const portFile = process.env.FAUXQS_PORT_FILE;
if (portFile) {
  await writeFile(`${portFile}.tmp`, `${server.port}\n`);
  await rename(`${portFile}.tmp`, portFile);
}

let stopping = false;
async function stop(code) {
  if (stopping) return;
  stopping = true;
  try {
    await server.stop();
  } finally {
    process.exit(code);
  }
}
process.on("SIGTERM", () => stop(0));
process.on("SIGINT", () => stop(0));

const parent = parseInt(process.env.FAUXQS_PARENT_PID ?? "", 10);
if (parent > 0) {
  setInterval(() => {
    try {
      process.kill(parent, 0);
    } catch {
      console.error(`fauxqs: parent process ${parent} is gone, stopping`);
      stop(0);
    }
  }, 2000).unref();
}
