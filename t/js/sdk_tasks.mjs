// The official SDK client's experimental tasks API against a real run
// (started by t/sdk_tasks.t: the real runner, OpenCode in a sandbox, a
// scripted fake model): callToolStream on opencode_run_task to its result,
// then a second one cancelled while it runs.
//
//   node t/js/sdk_tasks.mjs CONFIG.json
//
// CONFIG: {url, token, repository, task, reply, hangTask}.  Prints one
// JSON line per check, {check, ok, detail}, then {done: true} and, on a
// line {tasks: [taskId...]}, the tasks it made.

import fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
    CallToolResultSchema, LoggingMessageNotificationSchema, ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

function emit(check, ok, detail) {
    const line = { check, ok: !!ok };
    if (detail !== undefined) line.detail = detail;
    process.stdout.write(JSON.stringify(line) + '\n');
}

async function check(name, fn) {
    try {
        const r = await fn();
        emit(name, r.ok, r.detail);
    } catch (e) {
        emit(name, false, { threw: String(e?.message ?? e).slice(0, 500) });
    }
}

const client = new Client({ name: 'smcp-sdk-tasks', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(cfg.url), {
    requestInit: { headers: { Authorization: `Bearer ${cfg.token}` } },
});
const made = [];

await client.connect(transport);

await check('the server declares tasks and opencode_run_task supports them', async () => {
    const caps = client.getServerCapabilities();
    const { tools } = await client.listTools();
    const run = tools.find((t) => t.name === 'opencode_run_task');
    return {
        ok: !!caps.tasks?.requests?.tools?.call && !!caps.tasks?.cancel
            && run?.execution?.taskSupport === 'optional',
        detail: { tasks: caps.tasks, execution: run?.execution },
    };
});

// the stream of one task-augmented call, each message kept
async function stream(args, onStatus) {
    const msgs = [];
    for await (const m of client.experimental.tasks.callToolStream(
        { name: 'opencode_run_task', arguments: args }, undefined,
        { timeout: 300000 })) {
        msgs.push(m);
        if (m.type === 'taskCreated') made.push(m.task.taskId);
        if (m.type === 'taskStatus' && onStatus) await onStatus(m.task);
    }
    return msgs;
}

let msgs = [];
await check('callToolStream: taskCreated at once, a working task', async () => {
    const t0 = Date.now();
    let first = 0;
    msgs = await stream({ task: cfg.task, repository: cfg.repository },
                        async () => { if (!first) first = Date.now() - t0; });
    const c = msgs[0];
    return {
        ok: c?.type === 'taskCreated' && /^run_[0-9a-f]{24}$/.test(c.task.taskId)
            && c.task.status === 'working' && c.task.pollInterval > 0,
        detail: { created: c?.task, firstStatusMs: first, messages: msgs.length },
    };
});

await check('taskStatus messages: working, then completed', async () => {
    const st = msgs.filter((m) => m.type === 'taskStatus').map((m) => m.task.status);
    const working = st.filter((s) => s === 'working').length;
    return {
        ok: working >= 1 && st[st.length - 1] === 'completed'
            && st.slice(0, -1).every((s) => s === 'working'),
        detail: { statuses: [...new Set(st)], working },
    };
});

await check('the result is the run\'s final answer, with the related task', async () => {
    const r = msgs[msgs.length - 1];
    const sc = r?.result?.structuredContent;
    const id = msgs[0]?.task?.taskId;
    return {
        ok: r?.type === 'result' && !r.result.isError && sc?.runId === id
            && sc?.status === 'completed' && sc?.result === cfg.reply
            && r.result._meta?.['io.modelcontextprotocol/related-task']?.taskId === id,
        detail: { type: r?.type, status: sc?.status, result: sc?.result,
                  files: sc?.filesChanged?.length, error: String(r?.error ?? '') },
    };
});

await check('tasks/get and tasks/list see the task', async () => {
    const id = msgs[0]?.task?.taskId;
    const g = await client.experimental.tasks.getTask(id);
    const l = await client.experimental.tasks.listTasks();
    return {
        ok: g.status === 'completed' && l.tasks.some((t) => t.taskId === id),
        detail: { status: g.status, listed: l.tasks.length },
    };
});

// issue 25, point 5: a client that set a logging level hears the run's
// lifecycle without asking for progress (the SDK calls tasks/result once
// the task ended: the lifecycle comes on that stream, then the result)
const streamLogs = [];
let streamRun = null;
await check('callToolStream without onprogress, a logging level set: the run\'s lifecycle as log messages', async () => {
    const logs = streamLogs;
    client.setNotificationHandler(LoggingMessageNotificationSchema,
                                  (n) => { logs.push(n.params); });
    await client.setLoggingLevel('info');
    const m = await stream({ task: cfg.task, repository: cfg.repository });
    const id = m[0]?.task?.taskId;
    streamRun = id;
    const mine = logs.filter((l) => l.data?.runId === id && l.data?.event);
    const steps = mine.map((l) => l.data.event?.step ?? l.data.event?.status);
    const r = m[m.length - 1];
    return {
        ok: r?.type === 'result' && !r.result.isError && steps.includes('agent_start')
            && steps.includes('agent_exit') && mine.every((l) => l.level === 'info'),
        detail: { messages: mine.length, steps,
                  task: mine[0]?._meta?.['io.modelcontextprotocol/related-task'] },
    };
});

// ... and the session's GET stream (the SDK's own) carried the status of
// the run this session started, not subscribed to: {runId, status}
await check('the GET stream: the status changes of a run the session started, as log messages', async () => {
    const statuses = () => streamLogs
        .filter((l) => l.data?.runId === streamRun && l.logger === 'run' && l.data?.status)
        .map((l) => l.data.status);
    for (let i = 0; i < 100 && !statuses().includes('completed'); i++) {
        await new Promise((r) => setTimeout(r, 100));
    }
    const seen = statuses();
    return { ok: seen.includes('running') && seen[seen.length - 1] === 'completed',
             detail: { statuses: seen } };
});

// progress: a plain run, then get_result waiting with a progress token;
// its resource subscribed meanwhile (updates on the session's GET stream)
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema,
                              (n) => { updated.push(n.params.uri); });
let progressRun = null;
await check('get_result waiting with onprogress: a notifications/progress per agent step while the run runs, then the result', async () => {
    const started = await client.callTool({ name: 'opencode_run_task',
        arguments: { task: cfg.progressTask, repository: cfg.repository } });
    const runId = started.structuredContent.runId;
    progressRun = runId;
    made.push(runId);
    await client.subscribeResource({ uri: `opencode://runs/${runId}` });
    const prog = [];
    const logs = [];
    let during = null;
    client.setNotificationHandler(LoggingMessageNotificationSchema,
                                  (n) => { logs.push(n.params); });
    await client.setLoggingLevel('info');
    let res;
    for (let i = 0; i < 5; i++) {
        res = await client.callTool(
            { name: 'opencode_get_result', arguments: { runId, waitSeconds: 60 } },
            CallToolResultSchema,
            { timeout: 120000, resetTimeoutOnProgress: true,
              onprogress: (p) => {
                  prog.push(p);
                  if (!during) {
                      // the run, as the first progress arrives
                      during = client.experimental.tasks.getTask(runId)
                          .then((t) => t.status, (e) => String(e));
                  }
              } });
        if (/^(completed|failed|cancelled)$/.test(res.structuredContent?.status)) break;
    }
    const steps = prog.map((p) => p.progress);
    const lifecycle = logs.filter((l) => l.data?.runId === runId)
        .map((l) => l.data.event?.step ?? l.data.event?.status);
    const first = await during;
    return {
        ok: res.structuredContent?.status === 'completed'
            && prog.length >= 3 && steps.every((n, i) => i === 0 || n > steps[i - 1])
            && prog.some((p) => p.message === `ran \`${cfg.progressCommand}\``)
            && prog.some((p) => /^write \/workspace\/repo\//.test(p.message))
            && first === 'working' && lifecycle.includes('agent_exit'),
        detail: { messages: prog.map((p) => `${p.progress} ${p.message}`),
                  statusAtFirstProgress: first, lifecycle,
                  status: res.structuredContent?.status },
    };
});

await check('the subscribed run\'s updates arrive on the GET stream: running, completed', async () => {
    const uri = `opencode://runs/${progressRun}`;
    for (let i = 0; i < 300 && updated.filter((u) => u === uri).length < 2; i++) {
        await new Promise((r) => setTimeout(r, 100));
    }
    const n = updated.filter((u) => u === uri).length;
    const read = await client.readResource({ uri });
    const run = JSON.parse(read.contents[0].text);
    await client.unsubscribeResource({ uri });
    return { ok: n >= 2 && run.status === 'completed', detail: { updates: n, status: run.status } };
});

// a run that hangs in its model call: cancelled once it is running
let cancelled = null;
await check('callToolStream of a long run, cancelled while it runs: the stream ends "cancelled"', async () => {
    const m = await stream({ task: cfg.hangTask, repository: cfg.repository },
        async (task) => {
            if (!cancelled && task.statusMessage === 'running') {
                cancelled = await client.experimental.tasks.cancelTask(task.taskId);
            }
        });
    const last = m[m.length - 1];
    return {
        ok: cancelled?.status === 'cancelled' && last?.type === 'error'
            && /cancelled/.test(String(last.error?.message)),
        detail: { cancel: cancelled, last: last?.type, error: String(last?.error?.message ?? '') },
    };
});

await check('tasks/result of the cancelled task: the run, cancelled, isError', async () => {
    const id = cancelled?.taskId;
    const r = await client.experimental.tasks.getTaskResult(id, CallToolResultSchema,
                                                            { timeout: 120000 });
    return {
        ok: r.isError === true && r.structuredContent?.status === 'cancelled',
        detail: { status: r.structuredContent?.status, isError: r.isError },
    };
});

await client.close();
process.stdout.write(JSON.stringify({ tasks: made }) + '\n');
process.stdout.write(JSON.stringify({ done: true }) + '\n');
