// bench/peer-sdk.mjs: the peer bench/run measures the module against.
//
// What a user would write instead of the module: the official MCP
// TypeScript SDK (@modelcontextprotocol/sdk), Streamable HTTP, stateless,
// JSON responses, the documented pattern (the SDK's
// examples/server/simpleStatelessStreamableHttp: createMcpExpressApp, a
// new McpServer and StreamableHTTPServerTransport per request,
// sessionIdGenerator undefined, here enableJsonResponse true).  It serves
// the same opencode_get_result from the same Redis as the module:
//
//   - the bearer JWT checked as the module does (HS256 with the shared
//     secret, exp, scope "mcp", sub = the tenant);
//   - HGETALL {prefix}run:{runId}, the run visible only to its tenant;
//   - the same run object (contracts.md, opencode_get_result) as
//     structuredContent and as the text content, with a signed watchUrl.
//
// It is the peer's fast path, not a second server: no waitSeconds, no
// outputSchema validation (both would only slow the peer down), ping from
// the SDK itself.  Redis: a minimal pipelined RESP client on one
// connection (no Redis package in node_modules); requests are answered in
// order, as hiredis does for the module.
//
// Environment: PEER_PORT (listen on 127.0.0.1), PEER_REDIS_PORT,
// PEER_SECRET_FILE, PEER_PREFIX ("smcp:"), PEER_PUBLIC_URL (watchUrl base).
// Prints "peer-sdk listening PORT" on stdout once it accepts requests.

import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from
    '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import * as z from 'zod/v4';

const PORT = Number(process.env.PEER_PORT);
const REDIS_PORT = Number(process.env.PEER_REDIS_PORT);
const SECRET = fs.readFileSync(process.env.PEER_SECRET_FILE);
const PREFIX = process.env.PEER_PREFIX ?? 'smcp:';
const PUBLIC_URL = process.env.PEER_PUBLIC_URL ?? `http://127.0.0.1:${PORT}`;
const UI_TTL = 86400;

// --------------------------------------------------------------------------
// Redis: one connection, commands pipelined, replies in order

class Redis {
    constructor(port) {
        this.queue = [];
        this.buf = Buffer.alloc(0);
        this.sock = net.connect(port, '127.0.0.1');
        this.sock.setNoDelay(true);
        this.sock.on('data', (d) => this.onData(d));
        this.sock.on('error', (e) => {
            for (const q of this.queue.splice(0)) q.reject(e);
        });
    }

    cmd(...args) {
        let s = `*${args.length}\r\n`;
        for (const a of args) s += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
        return new Promise((resolve, reject) => {
            this.queue.push({ resolve, reject });
            this.sock.write(s);
        });
    }

    onData(d) {
        this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
        for (;;) {
            const r = this.parse(0);
            if (r === null) break;
            this.buf = this.buf.subarray(r.end);
            const q = this.queue.shift();
            if (r.value instanceof Error) q.reject(r.value);
            else q.resolve(r.value);
        }
    }

    // -> {value, end} or null when incomplete
    parse(off) {
        const nl = this.buf.indexOf('\r\n', off);
        if (nl < 0) return null;
        const t = String.fromCharCode(this.buf[off]);
        const line = this.buf.toString('utf8', off + 1, nl);
        let end = nl + 2;
        if (t === '+') return { value: line, end };
        if (t === '-') return { value: new Error(line), end };
        if (t === ':') return { value: Number(line), end };
        if (t === '$') {
            const n = Number(line);
            if (n < 0) return { value: null, end };
            if (this.buf.length < end + n + 2) return null;
            return { value: this.buf.toString('utf8', end, end + n),
                     end: end + n + 2 };
        }
        if (t === '*') {
            const n = Number(line);
            if (n < 0) return { value: null, end };
            const a = [];
            for (let i = 0; i < n; i++) {
                const r = this.parse(end);
                if (r === null) return null;
                a.push(r.value);
                end = r.end;
            }
            return { value: a, end };
        }
        return { value: new Error(`bad reply type ${t}`), end };
    }
}

const redis = new Redis(REDIS_PORT);

// --------------------------------------------------------------------------
// JWT (HS256), as the module checks and signs them

const b64url = (b) => Buffer.from(b).toString('base64url');

function verifyToken(header) {
    const m = /^Bearer ([A-Za-z0-9_\-.]+)$/.exec(header ?? '');
    if (!m) return null;
    const parts = m[1].split('.');
    if (parts.length !== 3) return null;
    const sig = crypto.createHmac('sha256', SECRET)
        .update(`${parts[0]}.${parts[1]}`).digest();
    const got = Buffer.from(parts[2], 'base64url');
    if (got.length !== sig.length || !crypto.timingSafeEqual(got, sig)) {
        return null;
    }
    let h, c;
    try {
        h = JSON.parse(Buffer.from(parts[0], 'base64url'));
        c = JSON.parse(Buffer.from(parts[1], 'base64url'));
    } catch {
        return null;
    }
    if (h.alg !== 'HS256' || typeof c.sub !== 'string' || c.scope !== 'mcp'
        || typeof c.exp !== 'number' || c.exp <= Date.now() / 1000) {
        return null;
    }
    return c;
}

function signToken(claims) {
    const h = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
    const p = b64url(JSON.stringify(claims));
    const s = crypto.createHmac('sha256', SECRET).update(`${h}.${p}`)
        .digest('base64url');
    return `${h}.${p}.${s}`;
}

// --------------------------------------------------------------------------
// the run object (contracts.md: opencode_get_result)

const text = (v, nullable) => (v === undefined || (nullable && v === '')
                               ? (nullable ? null : '') : v);
const int = (v) => (v ? Math.trunc(Number(v)) || 0 : 0);
const iso = (v) => (v ? new Date(Number(v)).toISOString() : null);

function runObject(tenant, runId, f) {
    let files = [];
    try {
        const a = f.files_changed ? JSON.parse(f.files_changed) : [];
        if (Array.isArray(a)) files = a;
    } catch { /* not an array: [] */ }
    const maxCost = f.max_cost ? Number(f.max_cost) : 0;
    const now = Math.floor(Date.now() / 1000);
    const tok = signToken({ sub: tenant, scope: 'ui', run: runId, iat: now,
                            exp: now + UI_TTL,
                            jti: crypto.randomBytes(16).toString('hex') });
    return {
        runId,
        sessionId: text(f.session, false),
        status: text(f.status, false),
        title: text(f.title, false),
        task: text(f.task, false),
        repository: text(f.repository, true),
        branch: text(f.branch, true),
        model: text(f.model, false),
        createdAt: iso(f.created_at),
        startedAt: iso(f.started_at),
        finishedAt: iso(f.finished_at),
        result: text(f.result, true),
        error: text(f.error, true),
        exitCode: f.exit_code ? int(f.exit_code) : null,
        filesChanged: files,
        diffStat: text(f.diff_stat, true),
        pullRequestUrl: text(f.pr_url, true),
        pullRequestStatus: text(f.pr_status, true),
        tokens: {
            input: int(f.tokens_input), output: int(f.tokens_output),
            reasoning: int(f.tokens_reasoning),
            cacheRead: int(f.tokens_cache_read),
            cacheWrite: int(f.tokens_cache_write),
        },
        cost: f.cost ? Number(f.cost) : 0,
        maxCostUsd: maxCost > 0 ? maxCost : null,
        timeoutSeconds: int(f.timeout),
        cancelRequested: int(f.cancel_requested) !== 0,
        watchUrl: `${PUBLIC_URL}/ui/runs/${runId}?token=${tok}`,
    };
}

const notFound = (runId) => ({
    content: [{ type: 'text', text: `run not found: ${runId}` }],
    isError: true,
});

function getServer(claims) {
    const server = new McpServer({ name: 'peer-sdk', version: '1.0.0' });
    server.registerTool('opencode_get_result', {
        title: "Get a run's status and result",
        description: 'Get the status and outcome of a run.',
        inputSchema: { runId: z.string(), waitSeconds: z.number().min(0).optional() },
        annotations: { readOnlyHint: true, idempotentHint: true,
                       openWorldHint: false },
    }, async ({ runId }) => {
        if (!/^run_[A-Za-z0-9_]{1,64}$/.test(runId)) return notFound(runId);
        const a = await redis.cmd('HGETALL', `${PREFIX}run:${runId}`);
        const f = {};
        for (let i = 0; i + 1 < a.length; i += 2) f[a[i]] = a[i + 1];
        if (f.tenant !== claims.sub) return notFound(runId);
        const run = runObject(claims.sub, runId, f);
        return { content: [{ type: 'text', text: JSON.stringify(run) }],
                 structuredContent: run };
    });
    return server;
}

// --------------------------------------------------------------------------
// the documented stateless pattern

const app = createMcpExpressApp();

app.post('/mcp', async (req, res) => {
    const claims = verifyToken(req.headers.authorization);
    if (!claims) {
        res.status(401).set('WWW-Authenticate', 'Bearer').json({
            jsonrpc: '2.0', error: { code: -32001, message: 'Unauthorized' },
            id: null });
        return;
    }
    const server = getServer(claims);
    try {
        const transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: undefined,
            enableJsonResponse: true,
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, req.body);
        res.on('close', () => {
            transport.close();
            server.close();
        });
    } catch (e) {
        if (!res.headersSent) {
            res.status(500).json({ jsonrpc: '2.0', id: null,
                error: { code: -32603, message: 'Internal server error' } });
        }
    }
});

app.listen(PORT, '127.0.0.1', () => {
    process.stdout.write(`peer-sdk listening ${PORT}\n`);
});
