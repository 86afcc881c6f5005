// The bench's peer: Graphile Worker draining no-op jobs at the concurrency asked for, in the
// database given. Unbatched by default (each job fetched and completed on its own); with a batch
// size, batched as its performance guide advises: a local queue of that many jobs fetched and
// locked at once, and completions batched (completeJobBatchDelay 0: those of the same tick).
//   node drain.mjs <database url> <jobs to prefill> <concurrency> <warm-up ms> <measured ms> [batch size]
// Prints {"phase": "measure"} when the measured window starts, then, as it ends (before the
// runner stops), {"jobs": <completed in the window>, "seconds": <window>}: the bench reads the
// cluster's CPU at each line.
import pg from "pg";
import { Logger, run, runMigrations } from "graphile-worker";

const [url, prefill, concurrency, warmupMs, measureMs, batch = "0"] = process.argv.slice(2);
const connectionString = url;

await runMigrations({ connectionString, logger: quiet() });
const client = new pg.Client({ connectionString });
await client.connect();
// One add_jobs call for the whole backlog (add_job per row took minutes for 20,000).
await client.query(
  `SELECT graphile_worker.add_jobs(array(
     SELECT json_populate_record(NULL::graphile_worker.job_spec,
                                 json_build_object('identifier', 'noop', 'payload', json_build_object('n', g)))
       FROM generate_series(1, $1::int) g))`,
  [Number(prefill)],
);
await client.query("VACUUM ANALYZE");
await client.query("CHECKPOINT");
await client.end();

let done = 0;
const runner = await run({
  connectionString,
  concurrency: Number(concurrency),
  maxPoolSize: Number(concurrency) + 4,
  noHandleSignals: true,
  pollInterval: 1000,
  logger: quiet(),
  taskList: { noop: async () => {} },
  ...(Number(batch) > 1 && {
    preset: { worker: { localQueue: { size: Number(batch) }, completeJobBatchDelay: 0 } },
  }),
});
runner.events.on("job:success", () => { done++; });

await sleep(Number(warmupMs));
console.log(JSON.stringify({ phase: "measure" }));
const start = done;
const t0 = process.hrtime.bigint();
await sleep(Number(measureMs));
const jobs = done - start;
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({ jobs, seconds }));
await runner.stop();

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Errors only: the bench reads stdout.
function quiet() {
  return new Logger(() => (level, message) => {
    if (level === "error") console.error(message);
  });
}
