// A minimal Redis client for the browser tests (RESP2 over TCP, no
// dependencies): commands in order, each answered by a promise, and a
// second connection for SUBSCRIBE.
//
//   const r = await Redis.connect(port);
//   await r.cmd('XADD', key, '*', 'type', 'agent', 'data', json);
//   const sub = await Redis.connect(port);
//   await sub.subscribe('smcp:cancel', (channel, message) => ...);

import net from 'node:net';

// one RESP value from buf at pos: [value, next pos], or null when more
// bytes are needed
function parse(buf, pos) {
    const eol = buf.indexOf('\r\n', pos);
    if (eol < 0) return null;
    const t = String.fromCharCode(buf[pos]);
    const line = buf.toString('utf8', pos + 1, eol);
    let at = eol + 2;
    if (t === '+') return [line, at];
    if (t === '-') return [new Error(line), at];
    if (t === ':') return [Number(line), at];
    if (t === '$') {
        const n = Number(line);
        if (n < 0) return [null, at];
        if (buf.length < at + n + 2) return null;
        return [buf.toString('utf8', at, at + n), at + n + 2];
    }
    if (t === '*') {
        const n = Number(line), a = [];
        if (n < 0) return [null, at];
        for (let i = 0; i < n; i++) {
            const v = parse(buf, at);
            if (!v) return null;
            a.push(v[0]);
            at = v[1];
        }
        return [a, at];
    }
    throw new Error(`redis: unexpected reply type ${t}`);
}

function encode(args) {
    const parts = [Buffer.from(`*${args.length}\r\n`)];
    for (const a of args) {
        const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
        parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
    }
    return Buffer.concat(parts);
}

export class Redis {
    constructor(sock) {
        this.sock = sock;
        this.buf = Buffer.alloc(0);
        this.waiting = [];
        this.onMessage = null;
        sock.on('data', (d) => this.data(d));
        sock.on('error', (e) => this.fail(e));
        sock.on('close', () => this.fail(new Error('redis: connection closed')));
    }

    static connect(port, host = '127.0.0.1') {
        return new Promise((resolve, reject) => {
            const s = net.createConnection({ port, host }, () => resolve(new Redis(s)));
            s.once('error', reject);
        });
    }

    data(d) {
        this.buf = Buffer.concat([this.buf, d]);
        for (;;) {
            const v = parse(this.buf, 0);
            if (!v) return;
            this.buf = this.buf.subarray(v[1]);
            const r = v[0];
            if (Array.isArray(r) && r[0] === 'message' && this.onMessage) {
                this.onMessage(r[1], r[2]);
                continue;
            }
            const w = this.waiting.shift();
            if (!w) continue;
            if (r instanceof Error) w.reject(r);
            else w.resolve(r);
        }
    }

    fail(e) {
        for (const w of this.waiting.splice(0)) w.reject(e);
    }

    cmd(...args) {
        return new Promise((resolve, reject) => {
            this.waiting.push({ resolve, reject });
            this.sock.write(encode(args));
        });
    }

    async subscribe(channel, onMessage) {
        this.onMessage = onMessage;
        return this.cmd('SUBSCRIBE', channel);
    }

    close() {
        this.sock.removeAllListeners('close');
        this.sock.destroy();
    }
}
