// The report of the tests' node clients: one JSON line per check,
// {"check": NAME, "ok": BOOL, "detail": ...}, then {"done": true};
// t/lib/SMCP/JS.pm turns each line into a TAP assertion.

export function emit(check, ok, detail) {
    const line = { check, ok: !!ok };
    if (detail !== undefined) line.detail = detail;
    process.stdout.write(JSON.stringify(line) + '\n');
    return !!ok;
}

export function errInfo(e) {
    if (!e) return String(e);
    return {
        name: e.constructor?.name ?? e.name,
        code: e.code,
        message: String(e.message ?? e).slice(0, 500),
    };
}

// Runs fn; a throw is reported as a failed check (with the error).  fn
// returns true, or {ok, detail}.
export async function check(name, fn) {
    try {
        const r = await fn();
        if (r === true) return emit(name, true);
        if (r && typeof r === 'object' && 'ok' in r) return emit(name, r.ok, r.detail);
        return emit(name, false, { returned: r });
    } catch (e) {
        return emit(name, false, { threw: errInfo(e) });
    }
}

export function done(extra = {}) {
    process.stdout.write(JSON.stringify({ done: true, ...extra }) + '\n');
}
