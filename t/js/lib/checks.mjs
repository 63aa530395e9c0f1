// Checks reported as JSON lines, one per check, then {"done": true}:
// SMCP::Test's js_checks (or js_report, for a report written to a file)
// turns each into an assertion.
//
//   await check('the page says hello', async () => { assert(...); return 'detail'; });
//   done();
//
// or, the body's exceptions reported and the cleanup done whatever happens:
//
//   await script(async () => { await check(...); ... }, async () => { ... });

import { appendFileSync } from 'node:fs';

// SMCP_CHECKS_FILE: the lines go to that file (a script that something
// other than the test starts, whose output nobody reads), else stdout
function emit(line) {
    if (process.env.SMCP_CHECKS_FILE) appendFileSync(process.env.SMCP_CHECKS_FILE, line + '\n');
    else process.stdout.write(line + '\n');
}

export function report(check, ok, detail = '') {
    emit(JSON.stringify({ check, ok: !!ok, detail: String(detail) }));
}

// check(name, async () => detail-or-throw): one reported check
export async function check(name, fn) {
    try {
        const detail = await fn();
        report(name, true, detail ?? '');
        return true;
    } catch (e) {
        report(name, false, e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e);
        return false;
    }
}

export function assert(cond, msg) {
    if (!cond) throw new Error(msg);
}

// the last line: the script ran to its end
export function done() {
    emit(JSON.stringify({ done: true }));
}

// a script's whole run: body's checks; an exception out of it is one more
// check, failed ('unexpected error'); then cleanup(threw) however body
// ended, the done line, exit 0 (the checks say what failed)
export async function script(body, cleanup = async () => {}) {
    let threw = false;
    try {
        await body();
    } catch (e) {
        threw = true;
        report('unexpected error', false, e && e.stack ? e.stack : e);
    } finally {
        await cleanup(threw);
    }
    done();
    process.exit(0);
}

