// What the runner writes into Redis for a run, done by a test: its events
// (XADD + HINCRBY event_bytes + PUBLISH, as runner/store.c pipelines them)
// and its status changes by the runner's own scripts (running.lua,
// finish.lua from ngx_sandbox_mcp_module/common/scripts), so a page sees a
// live run without Docker.
//
//   const fr = new FakeRunner(redis, { prefix: 'smcp:', scripts: DIR });
//   await fr.running(runId);
//   await fr.event(runId, 'agent', { type: 'text', part: { text: 'hi' } });
//   await fr.finish(runId, 'completed', { result: 'done' }, diff);

import fs from 'node:fs';

const MAXLEN = '100000';         // SMCP_EVENTS_MAXLEN

export class FakeRunner {
    constructor(redis, { prefix = 'smcp:', scripts }) {
        this.r = redis;
        this.p = prefix;
        this.lua = (name) => fs.readFileSync(`${scripts}/${name}.lua`, 'utf8');
    }

    async hash(runId) {
        const a = await this.r.cmd('HGETALL', `${this.p}run:${runId}`);
        const h = {};
        for (let i = 0; i + 1 < a.length; i += 2) h[a[i]] = a[i + 1];
        return h;
    }

    async keys(runId) {
        const h = await this.hash(runId), p = this.p;
        const t = h.tenant || '', s = h.session || '';
        return {
            h,
            run: `${p}run:${runId}`,
            events: `${p}run:${runId}:events`,
            chan: `${p}run:${runId}`,
            diff: `${p}run:${runId}:diff`,
            active: s ? `${p}session:${s}:active` : '',
            started: t ? `${p}tenant:${t}:started` : '',
            claimed: t ? `${p}tenant:${t}:claimed` : '',
            session: s ? `${p}session:${s}` : '',
            sessions: `${p}sessions`,
            tenantSessions: t ? `${p}tenant:${t}:sessions` : '',
            tenantChan: t ? `${p}tenant:${t}` : '',
        };
    }

    // running.lua: `running` unless the run ended meanwhile
    async running(runId) {
        const k = await this.keys(runId), now = Date.now();
        return this.r.cmd('EVAL', this.lua('running'), 7, k.run, k.events,
                          k.chan, k.active, k.started, k.claimed, k.tenantChan,
                          now, 'c'.repeat(64), MAXLEN, now + 3600000, runId);
    }

    // one event, as runner_store_event stores it
    async event(runId, type, data) {
        const p = this.p, text = typeof data === 'string' ? data : JSON.stringify(data);
        const id = await this.r.cmd('XADD', `${p}run:${runId}:events`, 'MAXLEN', '~',
                                    MAXLEN, '*', 'type', type, 'data', text,
                                    'ts', Date.now());
        await this.r.cmd('HINCRBY', `${p}run:${runId}`, 'event_bytes',
                         Buffer.byteLength(text));
        await this.r.cmd('PUBLISH', `${p}run:${runId}`, 'event');
        return id;
    }

    // finish.lua: the outcome once (fields: run hash field -> value)
    async finish(runId, status, fields = {}, diff = null) {
        const k = await this.keys(runId), fv = [];
        for (const [f, v] of Object.entries(fields)) fv.push(f, String(v));
        const args = [status, Date.now(), MAXLEN, runId, k.h.session || '', ...fv];
        if (diff !== null) args.push(diff);
        return this.r.cmd('EVAL', this.lua('finish'), 11, k.run, k.events, k.chan,
                          diff !== null ? k.diff : '', k.active, k.started,
                          k.claimed, k.session, k.sessions, k.tenantSessions,
                          k.tenantChan, ...args);
    }
}
