// Drives the MCP endpoint with the official TypeScript SDK client
// (Client + StreamableHTTPClientTransport, bearer token in requestInit).
//
//   node t/js/sdk_client.mjs URL TOKEN
//
// Prints one JSON object per line: {"check": NAME, "ok": BOOL, "detail": ...}
// followed by {"done": true}.  t/sdk_client.t turns every line into a TAP
// assertion and checks that every expected check was reported.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
    StreamableHTTPClientTransport,
    StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const [url, token] = process.argv.slice(2);
if (!url || !token) {
    console.error('usage: node sdk_client.mjs URL TOKEN');
    process.exit(2);
}

const EXPECTED_TOOLS = [
    'opencode_cancel_run',
    'opencode_get_diff',
    'opencode_get_events',
    'opencode_get_result',
    'opencode_list_runs',
    'opencode_list_sessions',
    'opencode_pick_attempt',
    'opencode_run_task',
    'opencode_send_message',
];

function emit(check, ok, detail) {
    const line = { check, ok: !!ok };
    if (detail !== undefined) line.detail = detail;
    process.stdout.write(JSON.stringify(line) + '\n');
    return !!ok;
}

function errInfo(e) {
    if (!e) return String(e);
    return {
        name: e.constructor?.name ?? e.name,
        code: e.code,
        message: String(e.message ?? e).slice(0, 500),
    };
}

// Runs fn; a throw is reported as a failed check (with the error).
async function check(name, fn) {
    try {
        const r = await fn();
        if (r === true) return emit(name, true);
        if (r && typeof r === 'object' && 'ok' in r) return emit(name, r.ok, r.detail);
        return emit(name, false, { returned: r });
    } catch (e) {
        return emit(name, false, { threw: errInfo(e) });
    }
}

const requestInit = { headers: { Authorization: `Bearer ${token}` } };
const client = new Client(
    { name: 'smcp-sdk-test', version: '1.0.0' },
    { capabilities: {} },
);
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
const transportErrors = [];
transport.onerror = (e) => transportErrors.push(errInfo(e));

// A hard deadline so a hung server cannot hang the test.
const deadline = setTimeout(() => {
    emit('finished within 60 s', false);
    process.exit(3);
}, 60000);

let runId;
let runSession;
let sessionId;

const connected = await check('connect (initialize + initialized)', async () => {
    await client.connect(transport);
    sessionId = transport.sessionId;
    const info = client.getServerVersion();
    const caps = client.getServerCapabilities();
    return {
        ok: /^[0-9a-f]{64}$/.test(sessionId ?? '') && info?.name === 'sandbox-mcp'
            && caps?.tools !== undefined,
        detail: { sessionId, serverInfo: info, capabilities: caps,
                  protocolVersion: transport.protocolVersion },
    };
});

if (connected) {
    await check('negotiated protocol version is the SDK latest', async () => {
        const { LATEST_PROTOCOL_VERSION } = await import('@modelcontextprotocol/sdk/types.js');
        return { ok: transport.protocolVersion === LATEST_PROTOCOL_VERSION,
                 detail: { negotiated: transport.protocolVersion, latest: LATEST_PROTOCOL_VERSION } };
    });

    await check('ping', async () => {
        const r = await client.ping();
        return { ok: r && typeof r === 'object', detail: r };
    });

    await check('listTools returns the 9 tools', async () => {
        const r = await client.listTools();
        const names = r.tools.map((t) => t.name).sort();
        const schemasOk = r.tools.every((t) => t.inputSchema?.type === 'object'
            && typeof t.description === 'string' && t.description.length > 0);
        return {
            ok: JSON.stringify(names) === JSON.stringify(EXPECTED_TOOLS) && schemasOk,
            detail: { names, schemasOk },
        };
    });

    await check('callTool opencode_run_task starts a run', async () => {
        const r = await client.callTool({
            name: 'opencode_run_task',
            arguments: { task: 'SDK client test: say hello', title: 'sdk test' },
        });
        const sc = r.structuredContent ?? {};
        runId = sc.runId;
        runSession = sc.sessionId;
        const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
        return {
            ok: !r.isError && /^run_[0-9a-f]{24}$/.test(runId ?? '')
                && /^ses_[0-9a-f]{24}$/.test(runSession ?? '')
                && sc.status === 'started'
                && typeof sc.watchUrl === 'string'
                && sc.watchUrl.includes(`/ui/runs/${runId}?token=`)
                && text.length > 0,
            detail: r,
        };
    });

    await check('callTool opencode_get_result returns the run', async () => {
        const r = await client.callTool({
            name: 'opencode_get_result',
            arguments: { runId },
        });
        const sc = r.structuredContent ?? {};
        return {
            ok: !r.isError && sc.runId === runId && sc.sessionId === runSession
                && sc.status === 'started' && sc.task === 'SDK client test: say hello'
                && sc.title === 'sdk test',
            detail: r,
        };
    });

    await check('callTool opencode_list_runs lists the run', async () => {
        const r = await client.callTool({ name: 'opencode_list_runs', arguments: {} });
        const runs = r.structuredContent?.runs ?? [];
        const mine = runs.find((x) => x.runId === runId);
        return {
            ok: !r.isError && !!mine && mine.sessionId === runSession
                && mine.status === 'started',
            detail: r,
        };
    });

    await check('callTool without the required argument gives isError', async () => {
        const r = await client.callTool({ name: 'opencode_run_task', arguments: {} });
        const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
        return { ok: r.isError === true && text.length > 0, detail: r };
    });

    await check('callTool with a wrongly typed argument gives isError', async () => {
        const r = await client.callTool({
            name: 'opencode_run_task',
            arguments: { task: 42 },
        });
        const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
        return { ok: r.isError === true && text.length > 0, detail: r };
    });

    await check('callTool for an unknown run gives isError "run not found"', async () => {
        const r = await client.callTool({
            name: 'opencode_get_result',
            arguments: { runId: 'run_000000000000000000000000' },
        });
        const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');
        return { ok: r.isError === true && /run not found/i.test(text), detail: r };
    });

    await check('callTool of an unknown tool is a -32602 protocol error', async () => {
        try {
            const r = await client.callTool({ name: 'no_such_tool', arguments: {} });
            return { ok: false, detail: { resolved: r } };
        } catch (e) {
            return { ok: e instanceof McpError && e.code === -32602, detail: errInfo(e) };
        }
    });

    await check('terminateSession (DELETE) succeeds', async () => {
        await transport.terminateSession();
        return { ok: transport.sessionId === undefined, detail: { sessionId: transport.sessionId } };
    });

    await check('request without a session after termination is refused (400)', async () => {
        try {
            const r = await client.listTools();
            return { ok: false, detail: { resolved: r } };
        } catch (e) {
            return { ok: e instanceof StreamableHTTPError && e.code === 400, detail: errInfo(e) };
        }
    });

    await check('request on the terminated session fails with 404', async () => {
        // A new transport that resumes the old session id: connect() skips
        // initialize when the transport already has a session id.
        const t2 = new StreamableHTTPClientTransport(new URL(url), {
            requestInit, sessionId,
        });
        t2.onerror = () => {};
        const c2 = new Client({ name: 'smcp-sdk-test-2', version: '1.0.0' }, { capabilities: {} });
        await c2.connect(t2);
        try {
            const r = await c2.listTools();
            return { ok: false, detail: { resolved: r } };
        } catch (e) {
            return { ok: e instanceof StreamableHTTPError && e.code === 404, detail: errInfo(e) };
        } finally {
            await c2.close().catch(() => {});
        }
    });

    await check('raw POST on the terminated session: 404 with -32001', async () => {
        const res = await fetch(url, {
            method: 'POST',
            headers: {
                Authorization: `Bearer ${token}`,
                'Content-Type': 'application/json',
                Accept: 'application/json, text/event-stream',
                'Mcp-Session-Id': sessionId,
            },
            body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'ping' }),
        });
        const body = await res.text();
        let j;
        try { j = JSON.parse(body); } catch { j = undefined; }
        return {
            ok: res.status === 404 && j?.error?.code === -32001,
            detail: { status: res.status, body },
        };
    });
}

await client.close().catch(() => {});
clearTimeout(deadline);
process.stdout.write(JSON.stringify({ done: true, transportErrors }) + '\n');
process.exit(0);
