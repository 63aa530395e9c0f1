// The dashboard in real headless Chromium (playwright-core driving Debian's
// /usr/bin/chromium) against nginx with the module and Redis, started by
// t/ui_browser.t.  Runs are fed the way the runner feeds them
// (lib/runner.mjs: events XADDed and PUBLISHed, status by the runner's
// scripts), so the pages see live runs without Docker.
//
// Usage: node ui_browser.mjs CONFIG.json   (written by t/ui_browser.t)
// Output: one JSON line per check, {check, ok, detail}, then {done: true}.

import fs from 'node:fs';
import { Redis } from './lib/redis.mjs';
import { FakeRunner } from './lib/runner.mjs';
import { Browser, WAIT, check, assert, done, text, widths } from './lib/browser.mjs';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

const redis = await Redis.connect(cfg.redisPort);
const fr = new FakeRunner(redis, { prefix: cfg.prefix, scripts: cfg.scripts });
const browser = await Browser.launch(cfg.chromium);
const open = (ctx, url) => browser.open(ctx, url);

const shots = cfg.shots;
fs.mkdirSync(shots, { recursive: true });

const desk = await browser.desktop();
const phone = await browser.phone();

// the tab's title while a run has a status (issue 23, 11)
const tabTitle = (mark, status, title) => `${mark} ${status} — ${title} — sandbox-mcp`;
const waitTitle = (page, want) => page.waitForFunction((t) => document.title === t, want,
                                                       { timeout: WAIT });

// where elements are on the page (px from its top; left and right from
// the screen's edge): {id: {top, bottom, left, right}}
const boxes = (page, ids) => page.evaluate((list) => Object.fromEntries(list.map((id) => {
    const b = document.getElementById(id).getBoundingClientRect();
    return [id, { top: b.top + window.scrollY, bottom: b.bottom + window.scrollY,
                  left: b.left, right: b.right }];
})), ids);

// the newest step on the screen: its place, the scroll position, the text
// of the step, and whether "Back to the newest step" shows
const view = (page) => page.evaluate(() => {
    const li = document.querySelector('#timeline > li:last-child');
    const b = li.getBoundingClientRect();
    return { top: Math.round(b.top), bottom: Math.round(b.bottom), vh: window.innerHeight,
             y: Math.round(window.scrollY), last: li.textContent,
             button: !document.getElementById('to-newest').hidden };
});
const inView = (v) => v.bottom > 0 && v.bottom <= v.vh;
const newestInView = (page) => page.waitForFunction(() => {
    const b = document.querySelector('#timeline > li:last-child').getBoundingClientRect();
    return b.bottom > 0 && b.bottom <= window.innerHeight;
}, null, { timeout: WAIT });

// a page's next frames drawn (what it does after new steps is done by then)
const frames = (page) => page.evaluate(() => new Promise((r) => {
    requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 100)));
}));

// text as a reader sees it: runs of white space as one space
const squash = (s) => s.replace(/\s+/g, ' ').trim();

// SMCP.duration's wording (common.js): "1 h 2 min 3 s", "2 min 3 s", "3 s"
const duration = (ms) => {
    const s = Math.floor(ms / 1000), h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
    return (h ? `${h} h ` : '') + (h || m ? `${m} min ` : '') + `${s % 60} s`;
};

// a tool call as OpenCode reports it (runner/sandbox/session-events)
const tool = (name, input, title, status = 'completed') => ({ type: 'tool_use', part: {
    type: 'tool', tool: name, state: status === 'error'
        ? { status, title, input, error: 'permission denied' }
        : { status, title, input, output: 'done' } } });

// every link a page shows that stays on the origin, with the answer the
// page's own cookies get for it: [[href, status], ...]
const followLinks = (page) => page.evaluate(async (origin) => {
    const hrefs = [...document.querySelectorAll('a[href]')]
        .filter((a) => a.getClientRects().length > 0)
        .map((a) => a.href).filter((h) => h.startsWith(`${origin}/`));
    const out = [];
    for (const h of hrefs) {
        const r = await fetch(h, { credentials: 'same-origin', cache: 'no-store' });
        out.push([h, r.status]);
    }
    return out;
}, cfg.origin);

// ---------------------------------------------------------------------------
// a live run: opened while started, fed events, completed

const L = cfg.live;
// headless Chromium answers "denied" unless told otherwise: the person
// who will allow notifications when the page asks
await desk.grantPermissions(['notifications'], { origin: cfg.origin });
let page = await open(desk, L.watchUrl);

await check('the watchUrl loads the run page and the address bar has no token', async () => {
    const href = await page.evaluate(() => window.location.href);
    assert(!/token=/.test(href) && !/token=/.test(page.url()), `address: ${href}`);
    assert(href === `${cfg.origin}${cfg.prefixPath}runs/${L.runId}`, `address: ${href}`);
    await page.locator('#title').filter({ hasText: L.title }).waitFor({ timeout: WAIT });
    return href;
});

await check('the run cookie is HttpOnly, SameSite=Strict, scoped to the run', async () => {
    const c = (await desk.cookies()).filter((c) => c.name === 'smcp_ui_run');
    assert(c.length === 1, `cookies: ${JSON.stringify(c)}`);
    assert(c[0].httpOnly && c[0].sameSite === 'Strict', JSON.stringify(c[0]));
    assert(c[0].path === `${cfg.prefixPath}runs/${L.runId}`, `path ${c[0].path}`);
    assert(!(await page.evaluate(() => document.cookie)).includes('smcp_ui'),
           'the cookie is readable by the page');
    return c[0].path;
});

await check('the run page shows task, title, repository, model and status', async () => {
    assert((await text(page, '#task')) === L.task, 'task');
    const facts = await text(page, '#facts');
    assert(facts.includes(L.model) && facts.includes(L.repository) && facts.includes(L.runId),
           `facts: ${facts}`);
    const st = await text(page, '#status');
    assert(st === 'started', `status ${st}`);
    assert(await page.locator('header').count() === 1 && await page.locator('main').count() === 1
           && await page.locator('h1').count() === 1, 'landmarks and one h1');
    return st;
});

await check('the tab title leads with the status: started', async () => {
    const want = tabTitle('○', 'started', L.title);
    await waitTitle(page, want);
    return await page.title();
});

await check('the session id is shown; Copy puts it on the clipboard', async () => {
    await desk.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: cfg.origin });
    const id = page.locator('#session-id');
    await id.waitFor({ timeout: WAIT });
    assert((await id.innerText()) === L.sessionId, `shown: ${await id.innerText()}`);
    await page.getByRole('button', { name: 'Copy the session id' }).click();
    await page.locator('#copy-note', { hasText: /^Copied\.$/ }).waitFor({ timeout: WAIT });
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    assert(clip === L.sessionId, `clipboard: ${clip}`);
    return clip;
});

await check('without the Clipboard API, Copy selects the session id', async () => {
    await page.evaluate(() => {
        window.getSelection().removeAllRanges();
        Object.defineProperty(Navigator.prototype, 'clipboard',
                              { get: () => undefined, configurable: true });
    });
    await page.getByRole('button', { name: 'Copy the session id' }).click();
    await page.locator('#copy-note', { hasText: /selected/ }).waitFor({ timeout: WAIT });
    const sel = await page.evaluate(() => window.getSelection().toString());
    assert(sel === L.sessionId, `selected: ${JSON.stringify(sel)}`);
    const note = await text(page, '#copy-note');
    await page.evaluate(() => window.getSelection().removeAllRanges());
    return `${sel}; ${note}`;
});

const before = await page.locator('#timeline > li').count();
await fr.running(L.runId);
await fr.event(L.runId, 'lifecycle', { type: 'smcp', step: 'clone' });
await fr.event(L.runId, 'lifecycle', { type: 'smcp', step: 'agent_start' });
await fr.event(L.runId, 'agent', { type: 'step_start', part: { type: 'step-start' } });
await fr.event(L.runId, 'agent', { type: 'tool_use', part: { type: 'tool', tool: 'bash',
    state: { status: 'completed', title: 'Run the test suite',
             input: { command: 'npm test -- --grep login', description: 'Run the test suite' },
             output: '1 failing\n  login: expected 200, got 500\n' } } });
await fr.event(L.runId, 'egress', { route: 'anthropic', method: 'POST',
    path: '/anthropic/v1/messages', status: 200, bytesIn: 5321, bytesOut: 20480,
    durationMs: 1432, granted: true });
await fr.event(L.runId, 'agent', { type: 'step_finish', part: { type: 'step-finish', cost: 0.01,
    tokens: { input: 1000, output: 200, reasoning: 0, cache: { read: 0, write: 0 } } } });

await check('the page asks for no notification on load; a live run offers the button', async () => {
    await page.locator('#notify').waitFor({ timeout: WAIT });
    const n = await page.evaluate(() => window.__notify);
    assert(n.asks === 0 && n.shown.length === 0, JSON.stringify(n));
    return await text(page, '#notify');
});

await check('the button asks the browser; granted, the page says it will tell', async () => {
    await page.click('#notify');
    await page.locator('#notify-note', { hasText: 'You will be told when this run ends.' })
        .waitFor({ timeout: WAIT });
    const n = await page.evaluate(() => window.__notify);
    assert(n.asks === 1 && n.shown.length === 0, JSON.stringify(n));
    assert(await page.locator('#notify').isHidden(), 'the button is still shown');
    return await text(page, '#notify-note');
});

await check('the status turns running without reload', async () => {
    await page.locator('#status').filter({ hasText: /^running$/ }).waitFor({ timeout: WAIT });
    return 'running';
});

await check('the tab title turns running, live', async () => {
    await waitTitle(page, tabTitle('●', 'running', L.title));
    return await page.title();
});

await check('the timeline grows without reload: tool call, command, folded output, egress', async () => {
    await page.locator('#timeline li.tool', { hasText: 'Run the test suite' }).waitFor({ timeout: WAIT });
    const tool = page.locator('#timeline li.tool', { hasText: 'Run the test suite' });
    assert((await tool.locator('pre.cmd').innerText()) === 'npm test -- --grep login', 'command');
    const out = tool.locator('details');
    assert(await out.count() === 1 && !(await out.evaluate((d) => d.open)), 'output folded');
    assert((await out.locator('pre').textContent()).includes('expected 200, got 500'), 'output');
    await page.locator('#timeline li.egress', { hasText: '/anthropic/v1/messages' }).waitFor({ timeout: WAIT });
    const n = await page.locator('#timeline > li').count();
    assert(n > before, `entries ${before} -> ${n}`);
    return `${before} -> ${n} entries`;
});

await fr.event(L.runId, 'agent', { type: 'tool_use', part: { type: 'tool', tool: 'edit',
    state: { status: 'completed', title: 'src/login.js',
             input: { filePath: '/workspace/repo/src/login.js' }, output: 'Edit applied.' } } });
await fr.event(L.runId, 'agent', { type: 'error', error: { name: 'APIError',
    data: { message: 'rate limited, retrying' } } });
await fr.event(L.runId, 'log', 'npm WARN deprecated left-pad');
const replyAt = Date.now();
await fr.event(L.runId, 'agent', { type: 'text', part: { type: 'text', text: L.reply } });
await fr.event(L.runId, 'agent', { type: 'step_finish', part: { type: 'step-finish', cost: 0.005,
    tokens: { input: 500, output: 100, reasoning: 0, cache: { read: 0, write: 0 } } } });

await check('the timeline grows further: text reply, error, log line', async () => {
    await page.locator('#timeline li.reply', { hasText: L.reply }).waitFor({ timeout: WAIT });
    const shownAfter = Date.now() - replyAt;   // measured, not asserted
    await page.locator('#timeline li', { hasText: 'rate limited, retrying' }).waitFor({ timeout: WAIT });
    await page.locator('#timeline li', { hasText: 'npm WARN deprecated left-pad' }).waitFor({ timeout: WAIT });
    return `${await page.locator('#timeline > li').count()} entries; the reply shown `
           + `${shownAfter} ms after it was stored`;
});

await check('tokens and cost so far add up the steps', async () => {
    await page.locator('#usage', { hasText: '1500' }).waitFor({ timeout: WAIT });
    const u = await text(page, '#usage');
    assert(u.includes('1500') && u.includes('300') && u.includes('$0.0150'), u);
    return u.replace(/\s+/g, ' ');
});

await check('desktop: the details, task and tokens stand beside the timeline', async () => {
    const b = await boxes(page, ['summary', 'timeline-box', 'facts-box', 'task-box', 'usage-box']);
    const side = ['facts-box', 'task-box', 'usage-box'];
    assert(side.every((id) => b[id].left >= b['timeline-box'].right), `columns ${JSON.stringify(b)}`);
    assert(b['facts-box'].top < b['timeline-box'].bottom && b['summary'].top <= b['facts-box'].top,
           `rows ${JSON.stringify(b)}`);
    assert(b['timeline-box'].top > b['summary'].top, 'the timeline above the status');
    return `timeline ${Math.round(b['timeline-box'].left)}-${Math.round(b['timeline-box'].right)} px, `
           + `details ${Math.round(b['facts-box'].left)}-${Math.round(b['facts-box'].right)} px`;
});

const pl = await open(phone, L.watchUrl);
await pl.locator('#timeline li.reply', { hasText: L.reply }).waitFor({ timeout: WAIT });
await check('390 px, a running run: the status and the timeline first, then the details, task, tokens and cost', async () => {
    await pl.locator('#status').filter({ hasText: /^running$/ }).waitFor({ timeout: WAIT });
    const order = ['summary', 'timeline-box', 'facts-box', 'task-box', 'usage-box'];
    const b = await boxes(pl, [...order, 'status', 'cancel']);
    for (let i = 1; i < order.length; i++) {
        assert(b[order[i]].top >= b[order[i - 1]].bottom, `${order[i]} above ${order[i - 1]}: `
               + JSON.stringify(b));
    }
    assert(b['status'].bottom < 844 && b['cancel'].bottom < 844, 'the status or Cancel off the first screen');
    assert(b['timeline-box'].top < 844, `the timeline starts at ${b['timeline-box'].top} px`);
    assert(await pl.evaluate(() => window.scrollY) === 0, 'the page moved');
    return order.map((id) => `${id} ${Math.round(b[id].top)}`).join(', ');
});
await check('while it runs, the files changed so far show in the summary', async () => {
    const want = 'Files changed so far: src/login.js';
    for (const p of [pl, page]) {
        await p.locator('#files-now').waitFor({ timeout: WAIT });
        const got = squash(await p.locator('#files-now').textContent());
        assert(got === want, `shown: ${got}`);
    }
    assert(await pl.locator('#files-now').evaluate((e) => e.closest('#summary') !== null),
           'not in the summary');
    return want;
});
await pl.screenshot({ path: `${shots}/run-phone.png` });
await pl.close();

await fr.finish(L.runId, 'completed', {
    result: L.result, exit_code: 0, tokens_input: 1500, tokens_output: 300,
    tokens_reasoning: 0, tokens_cache_read: 0, tokens_cache_write: 0, cost: '0.015',
    metered_cost: '0.0172',
    files_changed: JSON.stringify([{ path: 'src/login.js', additions: 1, deletions: 1 },
                                   { path: 'docs/login.md', additions: 2, deletions: 0 }]),
    diff_stat: '2 files changed, 3 insertions(+), 1 deletion(-)',
    pr_url: L.prUrl,
}, L.diff);

await check('the status turns completed without reload', async () => {
    await page.locator('#status').filter({ hasText: /^completed$/ }).waitFor({ timeout: WAIT });
    await page.locator('#cancel').waitFor({ state: 'hidden', timeout: WAIT });
    return 'completed';
});

await check('the cost metered at the egress, once the run ended', async () => {
    await page.locator('#usage', { hasText: 'Metered at the egress' }).waitFor({ timeout: WAIT });
    const u = await text(page, '#usage');
    assert(u.includes('$0.0172'), u);
    return u.replace(/\s+/g, ' ');
});

await check('the tab title turns completed, live', async () => {
    await waitTitle(page, tabTitle('✓', 'completed', L.title));
    return await page.title();
});

await check('the run\'s end is told by one notification: status, title, the result\'s first line', async () => {
    await page.waitForFunction(() => window.__notify.shown.length > 0, null, { timeout: WAIT });
    const n = await page.evaluate(() => window.__notify);
    const want = `✓ completed — ${L.title}`;
    assert(n.shown.length === 1 && n.shown[0].title === want
           && n.shown[0].body === L.result.split('\n')[0].slice(0, 200)
           && n.shown[0].tag === L.runId, JSON.stringify(n));
    return `${n.shown[0].title}: ${n.shown[0].body}`;
});

await check('the result, the pull request link and the diff render', async () => {
    await page.locator('#result', { hasText: L.result }).waitFor({ timeout: WAIT });
    const pr = page.locator('#pr a');
    assert((await pr.getAttribute('href')) === L.prUrl, 'PR link');
    await page.locator('#diff details.file').nth(1).waitFor({ timeout: WAIT });
    const files = await page.locator('#diff .file summary .path').allInnerTexts();
    assert(JSON.stringify(files) === JSON.stringify(['src/login.js', 'docs/login.md']),
           `files ${JSON.stringify(files)}`);
    const add = await page.locator('#diff .dl.add').allTextContents();
    const del = await page.locator('#diff .dl.del').allTextContents();
    assert(add.length === 3 && del.length === 1, `+${add.length} -${del.length}`);
    assert(del[0].startsWith('-  return s.id == "1";'), del[0]);
    const [ab, db, cb] = await page.evaluate(() => ['.dl.add', '.dl.del', '.dl.ctx'].map(
        (s) => getComputedStyle(document.querySelector(s)).backgroundColor));
    assert(ab !== cb && db !== cb && ab !== db, `colours ${ab} ${db} ${cb}`);
    assert((await text(page, '#diff-stat')).includes('2 files changed'), 'diff stat');
    return `${files.length} files, +${add.length} -${del.length}`;
});

await check('the run ended: its diff takes over from the files so far', async () => {
    await page.locator('#files-now').waitFor({ state: 'hidden', timeout: WAIT });
    assert(await page.locator('#diff-box').isVisible(), 'no diff');
    return 'files so far hidden, the diff shown';
});

await check('a watchUrl: every link on the page opens; All runs and the session\'s runs are not offered, the page says how to reach them', async () => {
    const links = await followLinks(page);
    const refused = links.filter(([, st]) => st !== 200);
    assert(refused.length === 0, `links refused: ${JSON.stringify(refused)}`);
    await page.locator('#run-only').waitFor({ timeout: WAIT });
    assert(await page.locator('#all-runs').isHidden(), 'All runs is shown');
    assert(await page.locator('#session-runs a').count() === 0, 'the session\'s runs are linked');
    const how = await text(page, '#run-only');
    assert(/opencode_get_result/.test(how) && /watchUrl/.test(how)
           && /make token SUB=<tenant> UI=1/.test(how), how);
    return `${links.length} links, all 200`;
});

await check('the page was loaded once: no reload, no script error', async () => {
    assert(page.navigations === 1, `navigations ${page.navigations}`);
    assert(page.errors.length === 0, page.errors.join('; '));
    return 'one navigation';
});

await page.evaluate(() => document.querySelectorAll('#timeline details').forEach((d, i) => { if (i === 0) d.open = true; }));
await page.evaluate(() => {
    const note = document.getElementById('copy-note');
    if (note) note.textContent = '';
});
await page.screenshot({ path: `${shots}/run-desktop.png`, fullPage: true });
await page.close();

const pp = await open(phone, L.watchUrl);
await pp.locator('#status').filter({ hasText: /^completed$/ }).waitFor({ timeout: WAIT });
await pp.locator('#diff details.file').nth(1).waitFor({ timeout: WAIT });
await check('390 px: the run page does not scroll sideways', async () => {
    const [sw, vw] = await widths(pp);
    assert(vw === 390 && sw <= vw, `scrollWidth ${sw} > ${vw}`);
    return `scrollWidth ${sw}, viewport ${vw}`;
});
await check('390 px: the session id and its Copy button fit the screen', async () => {
    const [id, button] = await pp.evaluate(() => ['session-id', 'copy-session'].map((x) => {
        const b = document.getElementById(x).getBoundingClientRect();
        return { left: b.left, right: b.right, top: b.top, bottom: b.bottom, height: b.height };
    }));
    const vw = 390;
    for (const b of [id, button]) {
        assert(b.left >= 0 && b.right <= vw && b.height > 0, `box ${JSON.stringify(b)}`);
    }
    assert(button.height >= 44, `button ${button.height} px high`);
    assert(id.right <= button.left || button.top >= id.bottom, 'the button covers the id');
    assert((await text(pp, '#session-id')) === L.sessionId, 'the id');
    return `id ${Math.round(id.left)}-${Math.round(id.right)} px, button `
           + `${Math.round(button.left)}-${Math.round(button.right)} px`;
});
await check('dark mode: the page follows the system setting', async () => {
    const bg = await pp.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const m = bg.match(/\d+/g).map(Number);
    assert(m[0] + m[1] + m[2] < 150, `background ${bg}`);
    return bg;
});
await pp.screenshot({ path: `${shots}/run-phone-completed.png`, fullPage: true });
await pp.close();

// ---------------------------------------------------------------------------
// nginx reloaded under a watched run: the page reconnects and resumes

const RL = cfg.reload;
page = await open(desk, RL.watchUrl);
const lines = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}`);
await check('nginx reload: the page reconnects and resumes, missing nothing', async () => {
    await page.locator('#status').filter({ hasText: /^started$/ }).waitFor({ timeout: WAIT });
    await page.waitForFunction(() => window.__sse.opens === 1, null, { timeout: WAIT });
    await fr.running(RL.runId);
    for (const l of lines(1, 3)) await fr.event(RL.runId, 'log', l);
    await page.locator('#timeline li', { hasText: 'line 3' }).waitFor({ timeout: WAIT });
    process.kill(cfg.nginxPid, 'SIGHUP');
    for (const l of lines(4, 6)) await fr.event(RL.runId, 'log', l);
    await page.waitForFunction(() => window.__sse.opens >= 2, null, { timeout: WAIT });
    for (const l of lines(7, 9)) await fr.event(RL.runId, 'log', l);
    await page.locator('#timeline li', { hasText: 'line 9' }).waitFor({ timeout: WAIT });
    const x = await redis.cmd('XRANGE', `${cfg.prefix}run:${RL.runId}:events`, '-', '+');
    const stored = x.map((e) => e[0]);
    const sse = await page.evaluate(() => window.__sse);
    const shownLines = (await page.locator('#timeline pre.log').allTextContents());
    assert(JSON.stringify(sse.ids) === JSON.stringify(stored),
           `received ${sse.ids.length} ids, stored ${stored.length}`);
    assert(JSON.stringify(shownLines) === JSON.stringify(lines(1, 9)), `lines ${shownLines}`);
    assert(await page.locator('#timeline > li').count() === stored.length, 'entries');
    assert(page.navigations === 1, `navigations ${page.navigations}`);
    return `${stored.length} events, ${sse.opens} connections, ${sse.errors} errors`;
});
await page.close();

// ---------------------------------------------------------------------------
// Cancel: a running run (the runner then stops it) and a started one

const C = cfg.cancel;
await fr.running(C.runId);
await fr.event(C.runId, 'agent', { type: 'text', part: { type: 'text', text: 'Working on it' } });
const sub = await Redis.connect(cfg.redisPort);
const told = [];
await sub.subscribe(`${cfg.prefix}cancel`, (ch, msg) => told.push(msg));

page = await open(desk, C.watchUrl);
await check('a running run has a Cancel button', async () => {
    await page.locator('#status').filter({ hasText: /^running$/ }).waitFor({ timeout: WAIT });
    const b = page.getByRole('button', { name: /Cancel/ });
    await b.waitFor({ timeout: WAIT });
    assert(await b.evaluate((e) => e.tagName) === 'BUTTON', 'a real button');
    return await b.innerText();
});

await check('Cancel clicked, then Confirm cancel: cancel requested in Redis and the runners told', async () => {
    await page.getByRole('button', { name: /Cancel/ }).click();
    await page.waitForTimeout(300);
    const early = await redis.cmd('HGET', `${cfg.prefix}run:${C.runId}`, 'cancel_requested');
    assert(early === null && !told.includes(C.runId), `one press cancelled: ${early}`);
    await page.getByRole('button', { name: 'Confirm cancel' }).click();
    const t0 = Date.now();
    let flag;
    while (Date.now() - t0 < WAIT) {
        flag = await redis.cmd('HGET', `${cfg.prefix}run:${C.runId}`, 'cancel_requested');
        if (flag === '1' && told.includes(C.runId)) break;
        await new Promise((r) => setTimeout(r, 100));
    }
    assert(flag === '1', `cancel_requested ${flag}`);
    assert(told.includes(C.runId), `cancel channel: ${JSON.stringify(told)}`);
    await page.locator('#cancel-note', { hasText: /Cancel requested/ }).waitFor({ timeout: WAIT });
    return 'cancel_requested=1';
});

await fr.event(C.runId, 'lifecycle', { type: 'smcp', step: 'agent_exit', code: 137 });
await fr.finish(C.runId, 'cancelled', { error: 'cancelled', exit_code: 137 });
await check('the page shows cancelled once the runner stopped the run', async () => {
    await page.locator('#status').filter({ hasText: /^cancelled$/ }).waitFor({ timeout: WAIT });
    await page.locator('#cancel').waitFor({ state: 'hidden', timeout: WAIT });
    const st = await redis.cmd('HGET', `${cfg.prefix}run:${C.runId}`, 'status');
    assert(st === 'cancelled', `redis status ${st}`);
    return st;
});
await check('a page whose button was not pressed tells nothing', async () => {
    const n = await page.evaluate(() => window.__notify);
    assert(n.asks === 0 && n.shown.length === 0, JSON.stringify(n));
    return JSON.stringify(n);
});

await check('the tab title turns cancelled, live', async () => {
    await waitTitle(page, tabTitle('⊘', 'cancelled', C.title));
    return await page.title();
});
await page.close();

const S = cfg.cancelStarted;
page = await open(desk, S.watchUrl);
await check('Cancel by keyboard on a started run: Enter, Enter again, cancelled at once', async () => {
    await page.locator('#status').filter({ hasText: /^started$/ }).waitFor({ timeout: WAIT });
    let focused = '';
    for (let i = 0; i < 20 && focused !== 'cancel'; i++) {
        await page.keyboard.press('Tab');
        focused = await page.evaluate(() => document.activeElement && document.activeElement.id);
    }
    assert(focused === 'cancel', 'Tab never reached the Cancel button');
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    assert(outline !== 'none', 'the focused button shows no focus outline');
    await page.keyboard.press('Enter');
    await page.locator('#cancel', { hasText: /^Confirm cancel$/ }).waitFor({ timeout: WAIT });
    assert(await page.evaluate(() => document.activeElement.id) === 'cancel', 'the focus moved');
    assert((await text(page, '#status')) === 'started', 'one Enter cancelled');
    await page.keyboard.press('Enter');
    await page.locator('#status').filter({ hasText: /^cancelled$/ }).waitFor({ timeout: WAIT });
    const st = await redis.cmd('HGET', `${cfg.prefix}run:${S.runId}`, 'status');
    assert(st === 'cancelled', `redis status ${st}`);
    return st;
});
await page.close();

// ---------------------------------------------------------------------------
// XSS: everything the agent or the tenant wrote is text

const X = cfg.xss;
await fr.running(X.runId);
await fr.event(X.runId, 'agent', { type: 'tool_use', part: { type: 'tool', tool: 'bash',
    state: { status: 'completed', title: X.payload, input: { command: X.payload },
             output: X.payload } } });
await fr.event(X.runId, 'agent', { type: 'text', part: { type: 'text', text: X.payload } });
await fr.event(X.runId, 'log', X.payload);
await fr.event(X.runId, 'egress', { route: X.payload, method: 'GET', path: X.payload,
    status: 403, bytesIn: 0, bytesOut: 0, durationMs: 1, granted: false });
await fr.event(X.runId, 'agent', { type: 'tool_use', part: { type: 'tool', tool: 'bash',
    state: { status: 'completed', title: 'W'.repeat(600), input: { command: 'w'.repeat(3000) },
             output: 'o'.repeat(3000) } } });
await fr.event(X.runId, 'log', 'l'.repeat(5000));
await fr.finish(X.runId, 'completed', { result: X.payload, pr_url: 'javascript:window.__smcpXss=3',
    diff_stat: '1 file changed, 1 insertion(+)' }, X.diff);

page = await open(desk, X.watchUrl);
await check('XSS: task, title, result, tool output and file names show as text', async () => {
    await page.locator('#status').filter({ hasText: /^completed$/ }).waitFor({ timeout: WAIT });
    await page.locator('#diff details.file').waitFor({ timeout: WAIT });
    await page.locator('#timeline li.tool').first().waitFor({ timeout: WAIT });
    await page.locator('#timeline li.tool details').first().evaluate((d) => { d.open = true; });
    assert((await text(page, '#title')) === X.title, 'title');
    assert((await page.locator('#task').textContent()) === X.task, 'task');
    assert((await page.locator('#result').textContent()) === X.payload, 'result');
    assert((await page.locator('#timeline li.tool details pre').first().textContent()) === X.payload,
           'tool output');
    assert((await page.locator('#timeline li.reply pre').textContent()) === X.payload, 'text reply');
    const files = await page.locator('#diff .file summary .path').allTextContents();
    assert(files.length === 1 && files[0] === X.payload, `file names ${JSON.stringify(files)}`);
    assert(await page.locator('#pr').isHidden(), 'a javascript: PR link is not a link');
    return 'shown as text';
});

await check('XSS: no script ran and no element came from the data', async () => {
    await page.waitForTimeout(500);
    const r = await page.evaluate(() => ({
        flag: window.__smcpXss,
        img: document.querySelectorAll('img').length,
        scripts: [...document.scripts].map((s) => s.getAttribute('src')),
        links: [...document.querySelectorAll('a')].map((a) => a.protocol),
    }));
    assert(r.flag === 0, `a script ran: ${r.flag}`);
    assert(browser.dialogs.length === 0, `dialogs ${browser.dialogs}`);
    assert(r.img === 0, `${r.img} <img> in the page`);
    assert(r.scripts.every((s) => s === 'static/common.js' || s === 'static/run.js'),
           `scripts ${r.scripts}`);
    assert(r.links.every((p) => p === 'http:' || p === 'https:'), `links ${r.links}`);
    return JSON.stringify(r);
});
await page.close();

page = await open(phone, X.watchUrl);
await check('390 px: long unbroken words (title, command, output, log, diff) wrap', async () => {
    await page.locator('#diff details.file').waitFor({ timeout: WAIT });
    await page.locator('#timeline li.tool details').evaluateAll((l) => l.forEach((d) => { d.open = true; }));
    const [sw, vw] = await widths(page);
    assert(sw <= vw, `scrollWidth ${sw} > ${vw}`);
    return `scrollWidth ${sw}, viewport ${vw}`;
});
await page.close();

// ---------------------------------------------------------------------------
// a running run read on a phone: the page follows the newest step while the
// reader is at the end, stays put once they scroll away and offers a way
// back; the files written so far; long commands; Cancel asks to confirm

const F = cfg.follow;
const stepAt = (p, n) => p.locator('#timeline pre.log', { hasText: new RegExp(`^step ${n}$`) });
await fr.running(F.runId);
for (let i = 1; i <= 40; i++) await fr.event(F.runId, 'log', `step ${i}`);

const pf = await open(phone, F.watchUrl);
await check('390 px, a long timeline opened: the page stays at the top; a button leads to the newest step', async () => {
    await stepAt(pf, 40).waitFor({ timeout: WAIT });
    await pf.locator('#to-newest').waitFor({ state: 'visible', timeout: WAIT });
    const v = await view(pf);
    assert(v.y === 0, `the page moved to ${v.y}`);
    assert(v.top > v.vh, `the newest step is on the first screen (${v.top} px)`);
    const label = await text(pf, '#to-newest');
    assert(label === 'Back to the newest step', label);
    const b = await pf.locator('#to-newest').boundingBox();
    assert(b.y + b.height <= v.vh && b.y + b.height > v.vh - 100 && b.x >= 0 && b.x + b.width <= 390,
           `the button at ${JSON.stringify(b)}`);
    return `newest step at ${v.top} px; the button at ${Math.round(b.y)} px`;
});

await check('Back to the newest step: the newest step in view, the button gone', async () => {
    await pf.click('#to-newest');
    await pf.locator('#to-newest').waitFor({ state: 'hidden', timeout: WAIT });
    const v = await view(pf);
    assert(inView(v) && squash(v.last).endsWith('step 40'), JSON.stringify(v));
    return `scrolled to ${v.y}; newest step ${v.top}-${v.bottom} px of ${v.vh}`;
});

await check('at the end, the page follows: new steps come into view', async () => {
    const y0 = (await view(pf)).y;
    for (const i of [41, 42, 43]) await fr.event(F.runId, 'log', `step ${i}`);
    await stepAt(pf, 43).waitFor({ timeout: WAIT });
    await newestInView(pf);
    const v = await view(pf);
    assert(v.y > y0 && !v.button && squash(v.last).endsWith('step 43'), JSON.stringify(v));
    return `scrolled ${y0} -> ${v.y}`;
});

await check('scrolled up: the page stops following and stays put while steps come; the button shows', async () => {
    await pf.evaluate(() => window.scrollBy({ top: -400, behavior: 'instant' }));
    await pf.locator('#to-newest').waitFor({ state: 'visible', timeout: WAIT });
    const y = (await view(pf)).y;
    for (const i of [44, 45, 46]) await fr.event(F.runId, 'log', `step ${i}`);
    await stepAt(pf, 46).waitFor({ timeout: WAIT });
    await frames(pf);
    const v = await view(pf);
    assert(v.y === y, `the page moved from ${y} to ${v.y}`);
    assert(v.top > v.vh && v.button, JSON.stringify(v));
    return `stayed at ${y}; the newest step at ${v.top} px`;
});

await check('the button again: back at the newest step, and following again', async () => {
    await pf.click('#to-newest');
    await pf.locator('#to-newest').waitFor({ state: 'hidden', timeout: WAIT });
    let v = await view(pf);
    assert(inView(v) && squash(v.last).endsWith('step 46'), JSON.stringify(v));
    const y0 = v.y;
    await fr.event(F.runId, 'log', 'step 47');
    await stepAt(pf, 47).waitFor({ timeout: WAIT });
    await newestInView(pf);
    v = await view(pf);
    assert(v.y > y0 && !v.button, JSON.stringify(v));
    return `scrolled to ${y0}, then ${v.y}`;
});

const fcmd = ['cd /workspace/repo', 'npm ci --no-audit', `echo '${F.payload}'`,
              'npm test -- --reporter dot', 'npm run lint'].join('\n');
await fr.event(F.runId, 'agent', tool('write', { filePath: '/workspace/repo/src/a.js', content: 'a' }, 'src/a.js'));
await fr.event(F.runId, 'agent', tool('edit', { filePath: '/workspace/repo/src/a.js', oldString: 'a',
                                                newString: 'b' }, 'src/a.js'));
await fr.event(F.runId, 'agent', tool('write', { filePath: `/workspace/repo/docs/${F.payload}.md`,
                                                 content: 'x' }, F.payload));
await fr.event(F.runId, 'agent', tool('write', { filePath: '/workspace/repo/denied.txt', content: 'x' },
                                      'denied.txt', 'error'));
await fr.event(F.runId, 'agent', tool('read', { filePath: '/workspace/repo/README.md' }, 'README.md'));
// an OpenCode whose title is the command, and a description
await fr.event(F.runId, 'agent', tool('bash', { command: fcmd, description: 'Install and test' }, fcmd));
await fr.event(F.runId, 'agent', tool('bash', { command: 'git status --short' }, 'git status --short'));

await check('while it runs: the files written so far, each once, names as text (not errors, not reads)', async () => {
    const want = `Files changed so far: src/a.js, docs/${F.payload}.md`;
    await pf.waitForFunction((w) => document.getElementById('files-now').textContent
        .replace(/\s+/g, ' ').trim() === w, want, { timeout: WAIT });
    assert(await pf.locator('#files-now').isVisible(), 'hidden');
    const paths = await pf.locator('#files-now-list code').allTextContents();
    assert(JSON.stringify(paths) === JSON.stringify(['src/a.js', `docs/${F.payload}.md`]),
           `paths ${JSON.stringify(paths)}`);
    const r = await pf.evaluate(() => ({ flag: window.__smcpXss, img: document.querySelectorAll('img').length }));
    assert(r.flag === 0 && r.img === 0, `markup ran: ${JSON.stringify(r)}`);
    return squash(await pf.locator('#files-now').textContent()).slice(0, 60);
});

await check('a long command is folded under its first line and shown once; a title that repeats it is not shown', async () => {
    const li = pf.locator('#timeline li.tool', { hasText: 'npm run lint' });
    await li.waitFor({ timeout: WAIT });
    const d = li.locator('details.cmd-fold');
    assert(await d.count() === 1 && !(await d.evaluate((e) => e.open)), 'not folded');
    const first = await d.locator('summary code').textContent();
    assert(first === 'cd /workspace/repo', `summary ${first}`);
    assert((await d.locator('pre.cmd').textContent()) === fcmd, 'the command');
    assert((await li.locator('.what').textContent()) === 'Install and test', 'the description');
    const all = await li.textContent();
    assert(all.split('npm run lint').length === 2, `the command shown more than once: ${all}`);
    const short = pf.locator('#timeline li.tool', { hasText: 'git status --short' });
    assert((await short.textContent()).split('git status --short').length === 2, 'a short one twice');
    assert(await short.locator('details.cmd-fold').count() === 0
           && (await short.locator('pre.cmd').textContent()) === 'git status --short', 'a short one folded');
    const r = await pf.evaluate(() => ({ flag: window.__smcpXss, img: document.querySelectorAll('img').length }));
    assert(r.flag === 0 && r.img === 0, `markup ran: ${JSON.stringify(r)}`);
    return `summary "${first}" (${fcmd.split('\n').length} lines)`;
});

// a browser without scroll anchoring (Safari): the page itself keeps what
// the reader reads below the timeline in place
const still = await browser.context({ viewport: { width: 390, height: 844 }, isMobile: true,
                                      hasTouch: true });
await still.addInitScript(() => {
    const supports = CSS.supports.bind(CSS);
    CSS.supports = (...a) => (/overflow-anchor/.test(a[0]) ? false : supports(...a));
    document.addEventListener('DOMContentLoaded', () => {
        document.documentElement.style.overflowAnchor = 'none';
        document.body.style.overflowAnchor = 'none';
    });
    // the page's live stream, kept for a test to hand it steps
    window.__smcpSources = [];
    window.EventSource = class extends window.EventSource {
        constructor(...a) {
            super(...a);
            window.__smcpSources.push(this);
        }
    };
});
const ps = await open(still, F.watchUrl);
await check('reading below the timeline (no scroll anchoring): new steps do not move what is read', async () => {
    await stepAt(ps, 47).waitFor({ timeout: WAIT });
    await ps.locator('#to-newest').waitFor({ state: 'visible', timeout: WAIT });
    assert(await ps.evaluate(() => getComputedStyle(document.body).overflowAnchor) === 'none',
           'scroll anchoring still on');
    await ps.evaluate(() => document.getElementById('facts-box').scrollIntoView(
        { block: 'start', behavior: 'instant' }));
    const top = () => ps.evaluate(() => Math.round(document.getElementById('facts-box')
        .getBoundingClientRect().top));
    const end = await ps.evaluate(() => document.getElementById('timeline').getBoundingClientRect().bottom);
    assert(end < 0, `the timeline's end on the screen (${end} px): the page is too short to test`);
    const where = () => ps.evaluate(() => ({
        y: Math.round(window.scrollY),
        end: Math.round(document.getElementById('timeline').getBoundingClientRect().bottom),
        height: document.documentElement.scrollHeight,
        away: !document.getElementById('to-newest').hidden,
    }));
    const t0 = await top();
    const w0 = await where();
    for (const i of [48, 49, 50]) await fr.event(F.runId, 'log', `step ${i}`);
    await stepAt(ps, 50).waitFor({ timeout: WAIT });
    // settled: the page puts it back within a frame or two (a loaded
    // machine's frames come late: up to 3 s)
    let t1 = t0 + 1000;
    for (let i = 0; i < 30 && Math.abs(t1 - t0) > 1; i++) {
        await frames(ps);
        t1 = await top();
    }
    assert(Math.abs(t1 - t0) <= 1, `the details moved from ${t0} to ${t1} px `
           + `(before ${JSON.stringify(w0)}, after ${JSON.stringify(await where())})`);
    return `the details stayed at ${t1} px`;
});
await check('... the reader\'s scroll whose event comes after new steps is judged by where the timeline ended before them',
            async () => {
    // the race a loaded machine showed: the reader scrolls to just below
    // the timeline's end; steps come before the scroll's event (it waits
    // for the next frame) and bring the end onto the screen
    assert(await ps.locator('#to-newest').isVisible(), 'not away to begin with');
    const r = await ps.evaluate(() => {
        const tl = document.getElementById('timeline');
        const facts = document.getElementById('facts-box');
        const src = window.__smcpSources[window.__smcpSources.length - 1];
        const e0 = tl.getBoundingClientRect().bottom;
        const want = Math.abs(e0 + 25) < 5 ? -60 : -25;
        window.scrollBy({ top: e0 - want, left: 0, behavior: 'instant' });
        const before = Math.round(tl.getBoundingClientRect().bottom);
        const top = Math.round(facts.getBoundingClientRect().top);
        for (let i = 0; i < 4; i++) {
            src.dispatchEvent(new MessageEvent('log', { data: JSON.stringify({
                id: `late-${i}`, type: 'log', time: new Date().toISOString(),
                data: `late step ${i}` }) }));
        }
        const end = Math.round(tl.getBoundingClientRect().bottom);
        window.dispatchEvent(new Event('scroll'));
        return { before, end, top, away: !document.getElementById('to-newest').hidden };
    });
    assert(r.before < 0 && r.end >= 0, `the end not brought onto the screen (${JSON.stringify(r)}): nothing tested`);
    assert(r.away, `the page took it for the reader going to the newest step (${JSON.stringify(r)})`);
    let t1 = r.top + 1000;
    for (let i = 0; i < 30 && Math.abs(t1 - r.top) > 1; i++) {
        await frames(ps);
        t1 = await ps.evaluate(() => Math.round(document.getElementById('facts-box')
            .getBoundingClientRect().top));
    }
    assert(Math.abs(t1 - r.top) <= 1, `the details moved from ${r.top} to ${t1} px`);
    assert(await ps.locator('#to-newest').isVisible(), 'no longer away');
    return `still away, the details at ${t1} px (the end was at ${r.before}, the steps brought it to ${r.end} px)`;
});
await check('... a scroll event while the timeline has grown and is not yet put back is not the reader\'s move',
            async () => {
    // the race a loaded machine showed: a step grows the timeline, and the
    // scroll event of the page's previous correction comes before this
    // one's; the timeline's end is on the screen for that moment
    assert(await ps.locator('#to-newest').isVisible(), 'not away to begin with');
    const r = await ps.evaluate(() => {
        const tl = document.getElementById('timeline');
        const pad = document.createElement('div');
        pad.style.height = `${Math.ceil(-tl.getBoundingClientRect().bottom) + 40}px`;
        tl.appendChild(pad);
        const end = Math.round(tl.getBoundingClientRect().bottom);
        window.dispatchEvent(new Event('scroll'));
        const away = !document.getElementById('to-newest').hidden;
        pad.remove();
        return { end, away };
    });
    assert(r.end >= 0, `the end not on the screen (${r.end} px): nothing tested`);
    assert(r.away, `the page took it for the reader going to the newest step (end at ${r.end} px)`);
    return `still away (the end at ${r.end} px)`;
});
await still.close();

await check('Cancel asks to confirm: one press cancels nothing; Keep it running, or 5 s, undoes it', async () => {
    const flag = () => redis.cmd('HGET', `${cfg.prefix}run:${F.runId}`, 'cancel_requested');
    await pf.click('#cancel');
    assert((await text(pf, '#cancel')) === 'Confirm cancel', await text(pf, '#cancel'));
    await pf.locator('#cancel-keep').waitFor({ timeout: WAIT });
    assert(/Confirm cancel/.test(await text(pf, '#cancel-note')), await text(pf, '#cancel-note'));
    await pf.click('#cancel-keep');
    assert((await text(pf, '#cancel')) === 'Cancel this run', 'Keep it running did not undo it');
    assert(await pf.locator('#cancel-keep').isHidden(), 'Keep it running stays');
    await pf.click('#cancel');
    const t0 = Date.now();
    await pf.locator('#cancel', { hasText: /^Cancel this run$/ }).waitFor({ timeout: WAIT });
    const waited = Date.now() - t0;
    assert(waited >= 4000, `back after ${waited} ms`);
    const f = await flag();
    assert(f === null, `cancel_requested ${f}`);
    assert((await text(pf, '#status')) === 'running', 'not running');
    return `back after ${waited} ms; nothing cancelled`;
});

const fdiff = 'diff --git a/src/a.js b/src/a.js\nnew file mode 100644\n--- /dev/null\n'
            + '+++ b/src/a.js\n@@ -0,0 +1 @@\n+b\n';
await fr.finish(F.runId, 'completed', { result: 'Followed.', cost: '0.002',
    diff_stat: '1 file changed, 1 insertion(+)' }, fdiff);
await check('the run ends: the diff takes over from the files so far; no button back', async () => {
    await pf.locator('#status').filter({ hasText: /^completed$/ }).waitFor({ timeout: WAIT });
    await pf.locator('#diff details.file').waitFor({ timeout: WAIT });
    await pf.locator('#files-now').waitFor({ state: 'hidden', timeout: WAIT });
    assert(await pf.locator('#to-newest').isHidden(), 'the button stays');
    const files = await pf.locator('#diff .file summary .path').allTextContents();
    assert(JSON.stringify(files) === JSON.stringify(['src/a.js']), `diff ${files}`);
    assert(pf.errors.length === 0, pf.errors.join('; '));
    return files.join(', ');
});
await pf.close();

// ---------------------------------------------------------------------------
// the run list

const R = cfg.list;
page = await open(desk, R.url);
await check('run list: the tenant link opens it and leaves no token in the address', async () => {
    const href = await page.evaluate(() => window.location.href);
    assert(href === `${cfg.origin}${cfg.prefixPath}`, href);
    await page.locator('#runs li').first().waitFor({ timeout: WAIT });
    return href;
});

const ids = () => page.locator('#runs li').evaluateAll((l) => l.map((e) => e.dataset.run));


await check('run list: newest first, a page at a time, older ones by cursor', async () => {
    const first = await ids();
    assert(first.length === 20, `first page ${first.length}`);
    assert(JSON.stringify(first) === JSON.stringify(R.newestFirst.slice(0, 20)),
           `order ${first.slice(0, 3)} vs ${R.newestFirst.slice(0, 3)}`);
    await page.getByRole('button', { name: /older/i }).click();
    await page.locator('#runs li').nth(20).waitFor({ timeout: WAIT });
    await page.waitForFunction((n) => document.querySelectorAll('#runs li').length === n
                               && document.getElementById('more').hidden, R.newestFirst.length,
                               { timeout: WAIT });
    const all = await ids();
    assert(JSON.stringify(all) === JSON.stringify(R.newestFirst), `all ${all.length}`);
    return `${first.length} then ${all.length}`;
});

await check('run list: each row shows repository, branch, duration and cost', async () => {
    const row = page.locator(`#runs li[data-run="${L.runId}"]`);
    await row.waitFor({ timeout: WAIT });
    const [c, f] = await redis.cmd('HMGET', `${cfg.prefix}run:${L.runId}`, 'created_at', 'finished_at');
    const want = { repo: 'acme/app', branch: 'main', duration: duration(Number(f) - Number(c)),
                   cost: '$0.0150' };
    const got = {};
    for (const k of Object.keys(want)) got[k] = await row.locator(`.run-${k}`).textContent();
    assert(JSON.stringify(got) === JSON.stringify(want), `row ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
    const started = page.locator(`#runs li[data-run="${R.changing}"]`);
    assert(await started.locator('.run-cost').count() === 0, 'a started run has a cost');
    assert((await started.locator('.run-branch').textContent()) === 'filler-19', 'its branch');
    assert(/^(\d+ min )?\d+ s$/.test(await started.locator('.run-duration').textContent()),
           'a started run without its duration');
    const bare = page.locator(`#runs li[data-run="${cfg.cancel.runId}"]`);
    assert(await bare.locator('.run-repo').count() === 0 && await bare.locator('.run-branch').count() === 0,
           'a run without repository or branch shows one');
    return squash(await row.locator('.run-meta').textContent());
});

await check('run list: the status filter', async () => {
    await page.selectOption('#status-filter', 'completed');
    await page.waitForFunction((n) => document.querySelectorAll('#runs li').length === n,
                               R.completed.length, { timeout: WAIT });
    const got = await ids();
    assert(JSON.stringify(got) === JSON.stringify(R.completed), `completed ${got}`);
    const badges = await page.locator('#runs li .badge').allInnerTexts();
    assert(badges.every((b) => b === 'completed'), `badges ${badges}`);
    await page.selectOption('#status-filter', '');
    await page.waitForFunction((n) => document.querySelectorAll('#runs li').length === n,
                               20, { timeout: WAIT });
    return got.length + ' completed';
});

await check('run list: a status changes live', async () => {
    const row = page.locator(`#runs li[data-run="${R.changing}"] .badge`);
    assert((await row.innerText()) === 'started', 'started first');
    await fr.running(R.changing);
    await page.locator(`#runs li[data-run="${R.changing}"] .badge`, { hasText: /^running$/ })
        .waitFor({ timeout: WAIT });
    await fr.finish(R.changing, 'failed', { error: 'the tests fail', cost: '0.25' });
    await page.locator(`#runs li[data-run="${R.changing}"] .badge`, { hasText: /^failed$/ })
        .waitFor({ timeout: WAIT });
    assert(page.navigations === 1, `navigations ${page.navigations}`);
    return 'started -> running -> failed';
});

await check('run list: a running run\'s duration counts live; once it ended, its duration stops and its cost shows', async () => {
    const d = () => page.locator(`#runs li[data-run="${R.changingAway}"] .run-duration`).textContent();
    const d0 = await d();
    await page.waitForFunction(([id, t]) => document.querySelector(`#runs li[data-run="${id}"] .run-duration`)
        .textContent !== t, [R.changingAway, d0], { timeout: 5000 });
    const cost = page.locator(`#runs li[data-run="${R.changing}"] .run-cost`);
    await cost.waitFor({ timeout: WAIT });
    assert((await cost.textContent()) === '$0.2500', await cost.textContent());
    const ended = () => page.locator(`#runs li[data-run="${R.changing}"] .run-duration`).textContent();
    const e0 = await ended();
    await page.waitForTimeout(2100);
    assert((await ended()) === e0, `an ended run's duration moved: ${e0} -> ${await ended()}`);
    return `${d0} -> ${await d()}; the failed one: ${e0}, $0.2500`;
});

await check('run list: after an nginx reload it reconnects and shows what changed', async () => {
    const opens = await page.evaluate(() => window.__sse.opens);
    process.kill(cfg.nginxPid, 'SIGHUP');
    await fr.running(R.changingAway);
    await page.waitForFunction((n) => window.__sse.opens > n, opens, { timeout: WAIT });
    await page.locator(`#runs li[data-run="${R.changingAway}"] .badge`, { hasText: /^running$/ })
        .waitFor({ timeout: WAIT });
    assert(page.navigations === 1, `navigations ${page.navigations}`);
    return `${await page.evaluate(() => window.__sse.opens)} connections`;
});

// opencode_run_task over MCP, as an assistant would call it
async function mcpRunTask(args) {
    const h = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
                Authorization: `Bearer ${cfg.mcp.token}` };
    let r = await fetch(cfg.mcp.url, { method: 'POST', headers: h, body: JSON.stringify({
        jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25',
        capabilities: {}, clientInfo: { name: 'ui-browser', version: '1' } } }) });
    const sid = r.headers.get('mcp-session-id');
    await r.text();
    h['Mcp-Session-Id'] = sid;
    r = await fetch(cfg.mcp.url, { method: 'POST', headers: h, body: JSON.stringify({
        jsonrpc: '2.0', id: 2, method: 'tools/call',
        params: { name: 'opencode_run_task', arguments: args } }) });
    const j = await r.json();
    assert(j.result && j.result.structuredContent, `run_task: ${JSON.stringify(j)}`);
    return j.result.structuredContent;
}

await check('run list: a new run appears at the top, live', async () => {
    const sc = await mcpRunTask({ task: 'A run started while the list is open', title: 'Brand new' });
    const first = page.locator('#runs li').first();
    await page.locator(`#runs li[data-run="${sc.runId}"]`).waitFor({ timeout: WAIT });
    assert((await first.getAttribute('data-run')) === sc.runId, 'not at the top');
    assert((await first.locator('.run-title').innerText()) === 'Brand new', 'title');
    assert((await first.locator('.badge').innerText()) === 'started', 'status');
    assert(page.navigations === 1, `navigations ${page.navigations}`);
    return sc.runId;
});

await check('run list: a row links to its run page', async () => {
    await page.locator(`#runs li[data-run="${R.changing}"] a`).click();
    await page.waitForURL(`${cfg.origin}${cfg.prefixPath}runs/${R.changing}`, { timeout: WAIT });
    await page.locator('#status').filter({ hasText: /^failed$/ }).waitFor({ timeout: WAIT });
    await page.locator('#run-error', { hasText: 'the tests fail' }).waitFor({ timeout: WAIT });
    return page.url();
});

await check('a failed run\'s tab title says failed', async () => {
    await waitTitle(page, tabTitle('✗', 'failed', R.changingTitle));
    return await page.title();
});

await check('the tenant\'s link: the run page offers All runs and the session\'s runs, and they open', async () => {
    await browser.goto(page, `${cfg.origin}${cfg.prefixPath}runs/${L.runId}`);
    const sib = page.locator('#session-runs a', { hasText: L.sibling.title });
    await sib.waitFor({ timeout: WAIT });
    await page.locator('#all-runs').waitFor({ timeout: WAIT });
    assert(await page.locator('#run-only').isHidden(), 'the run-only note is shown');
    const links = await followLinks(page);
    const refused = links.filter(([, st]) => st !== 200);
    assert(refused.length === 0, `links refused: ${JSON.stringify(refused)}`);
    await sib.click();
    await page.waitForURL(`${cfg.origin}${cfg.prefixPath}runs/${L.sibling.runId}`, { timeout: WAIT });
    await page.locator('#title', { hasText: L.sibling.title }).waitFor({ timeout: WAIT });
    await page.locator('#all-runs').click();
    await page.waitForURL(`${cfg.origin}${cfg.prefixPath}`, { timeout: WAIT });
    await page.locator('#runs li').first().waitFor({ timeout: WAIT });
    return `${links.length} links, all 200; the sibling, then the list`;
});

await check('the tenant\'s link: an ended run offers a follow-up, which starts in its session and opens', async () => {
    await browser.goto(page, `${cfg.origin}${cfg.prefixPath}runs/${L.runId}`);
    await page.locator('#followup-box').waitFor({ timeout: WAIT });
    assert(await page.locator('#steer-box').isHidden(), 'the steer box shows on an ended run');
    await page.locator('#followup-send').click();
    await page.locator('#followup-note', { hasText: 'Write the next task first.' })
        .waitFor({ timeout: WAIT });
    const task = `${cfg.follow.payload} and now the tests`;
    await page.locator('#followup').fill(task);
    await page.locator('#followup-send').click();
    const re = new RegExp(`${cfg.prefixPath}runs/(run_[0-9a-f]{24})$`);
    await page.waitForURL((u) => re.test(u.pathname) && !u.pathname.endsWith(L.runId),
                          { timeout: WAIT }).catch(async (e) => {
        throw new Error(`not opened (${await text(page, '#followup-note')}): ${e.message}`);
    });
    const id = re.exec(new URL(page.url()).pathname)[1];
    await page.locator('#task', { hasText: 'and now the tests' }).waitFor({ timeout: WAIT });
    assert((await text(page, '#task')) === task, 'the task is not shown as text');
    const r = await page.evaluate(() => ({ flag: window.__smcpXss,
                                           img: document.querySelectorAll('img').length }));
    assert(r.flag === 0 && r.img === 0, `the task ran as HTML: ${JSON.stringify(r)}`);
    const ses = await redis.cmd('HGET', `${cfg.prefix}run:${id}`, 'session');
    const was = await redis.cmd('HGET', `${cfg.prefix}run:${L.runId}`, 'session');
    assert(ses && ses === was, `session ${ses}, the ended run's ${was}`);
    assert((await redis.cmd('HGET', `${cfg.prefix}run:${id}`, 'task')) === task,
           'the stored task differs');
    return `${id} in ${ses}`;
});

await check('the tenant\'s link: an ended run runs again, the same task and settings in a new session', async () => {
    await browser.goto(page, `${cfg.origin}${cfg.prefixPath}runs/${L.runId}`);
    await page.locator('#rerun').waitFor({ timeout: WAIT });
    await page.locator('#rerun').click();
    const re = new RegExp(`${cfg.prefixPath}runs/(run_[0-9a-f]{24})$`);
    await page.waitForURL((u) => re.test(u.pathname) && !u.pathname.endsWith(L.runId),
                          { timeout: WAIT }).catch(async (e) => {
        throw new Error(`not opened (${await text(page, '#rerun-note')}): ${e.message}`);
    });
    const id = re.exec(new URL(page.url()).pathname)[1];
    const fields = ['task', 'repository', 'branch', 'model', 'title', 'create_pr', 'base_branch',
                    'timeout', 'session'];
    const was = {}, now = {};
    for (const f of fields) {
        was[f] = await redis.cmd('HGET', `${cfg.prefix}run:${L.runId}`, f);
        now[f] = await redis.cmd('HGET', `${cfg.prefix}run:${id}`, f);
    }
    for (const f of fields.filter((x) => x !== 'session')) {
        assert(was[f] === now[f], `${f}: ${now[f]}, the ended run's ${was[f]}`);
    }
    assert(now.session && now.session !== was.session, `session ${now.session}`);
    return `${id}: ${JSON.stringify({ ...now, task: undefined })}`;
});

await check('the run list\'s form starts a run: the link\'s grants offered, refusals said, hostile text kept as text', async () => {
    await browser.goto(page, `${cfg.origin}${cfg.prefixPath}`);
    await page.locator('#new-box').waitFor({ timeout: WAIT });
    assert(await page.locator('#new-task').isHidden(), 'the form is open before it is asked for');
    await page.locator('#new-details > summary').click();
    await page.locator('#new-task').waitFor({ timeout: WAIT });
    const hint = await text(page, '#new-grants');
    assert(hint === 'This link may name: acme/*.', hint);
    await page.locator('#new-send').click();
    await page.locator('#new-note', { hasText: 'Write the task first.' }).waitFor({ timeout: WAIT });
    const task = `${cfg.follow.payload} new from the form`;
    await page.locator('#new-task').fill(task);
    await page.locator('#new-repo').fill('https://github.com/evil/x');
    await page.locator('#new-send').click();
    await page.locator('#new-note', { hasText: /^Not started: .*evil\/x is not granted/ })
        .waitFor({ timeout: WAIT });
    await page.locator('#new-repo').fill('https://github.com/acme/app');
    await page.locator('#new-branch').fill(`x"><img src=x onerror=window.__smcpXss=5>`);
    await page.locator('#new-send').click();
    await page.locator('#new-note', { hasText: /^Not started: .*[Bb]ranch/ })
        .waitFor({ timeout: WAIT });
    await page.locator('#new-branch').fill('feature/form');
    await page.locator('#new-pr').check();
    await page.locator('#new-send').click();
    const re = new RegExp(`${cfg.prefixPath}runs/(run_[0-9a-f]{24})$`);
    await page.waitForURL((u) => re.test(u.pathname), { timeout: WAIT }).catch(async (e) => {
        throw new Error(`not opened (${await text(page, '#new-note')}): ${e.message}`);
    });
    const id = re.exec(new URL(page.url()).pathname)[1];
    await page.locator('#task', { hasText: 'new from the form' }).waitFor({ timeout: WAIT });
    const r = await page.evaluate(() => ({ flag: window.__smcpXss,
                                           img: document.querySelectorAll('img').length }));
    assert(r.flag === 0 && r.img === 0, `markup ran: ${JSON.stringify(r)}`);
    const key = `${cfg.prefix}run:${id}`;
    const got = {};
    for (const f of ['task', 'repository', 'branch', 'create_pr']) {
        got[f] = await redis.cmd('HGET', key, f);
    }
    assert(got.task === task && got.repository === 'https://github.com/acme/app'
           && got.branch === 'feature/form' && got.create_pr === '1',
           `stored ${JSON.stringify(got)}`);
    return `${id}: acme/app, feature/form, a pull request`;
});

await check('a run\'s watchUrl offers no follow-up (it only watches)', async () => {
    const w = await open(phone, L.watchUrl);
    await w.locator('#status').filter({ hasText: /^completed$/ }).waitFor({ timeout: WAIT });
    await w.locator('#result-box').waitFor({ timeout: WAIT });
    const hidden = await w.locator('#followup-box').isHidden();
    await w.close();
    assert(hidden, 'the follow-up box shows to a watchUrl');
    return 'no follow-up box';
});
await page.close();

page = await open(phone, R.url);
await page.locator('#runs li').nth(5).waitFor({ timeout: WAIT });
await check('390 px: the run list does not scroll sideways', async () => {
    await page.locator('#new-box').waitFor({ timeout: WAIT });
    const [sw, vw] = await widths(page);
    assert(sw <= vw, `scrollWidth ${sw} > ${vw}`);
    return `scrollWidth ${sw}, viewport ${vw}`;
});
await page.screenshot({ path: `${shots}/runs-phone.png` });
await check('390 px: the New run form opens without sideways scroll, its model field\'s markup refused as text', async () => {
    await page.locator('#new-details > summary').click();
    await page.locator('#new-task').waitFor({ timeout: WAIT });
    await page.locator('#new-task').fill('Add a CHANGELOG entry for the login fix.');
    await page.locator('#new-repo').fill('https://github.com/acme/app');
    await page.locator('#new-model').fill(`x"><img src=x onerror=window.__smcpXss=6>`);
    await page.locator('#new-send').click();
    await page.locator('#new-note', { hasText: /^Not started: .*model/i })
        .waitFor({ timeout: WAIT }).catch(async (e) => {
            throw new Error(`${await text(page, '#new-note')}: ${e.message}`);
        });
    const r = await page.evaluate(() => ({ flag: window.__smcpXss,
                                           img: document.querySelectorAll('img').length }));
    assert(!r.flag && r.img === 0, `markup ran: ${JSON.stringify(r)}`);
    await page.locator('#new-model').fill('');
    const [sw, vw] = await widths(page);
    assert(sw <= vw, `scrollWidth ${sw} > ${vw}`);
    return `refused: ${await text(page, '#new-note')}; scrollWidth ${sw}, viewport ${vw}`;
});
await page.screenshot({ path: `${shots}/runs-form-phone.png` });
await page.close();

// ---------------------------------------------------------------------------
// a tampered link

const fresh = await browser.desktop();
page = await open(fresh, cfg.denied.url);
await check('a tampered link: the 401 page, no run data', async () => {
    const h1 = await text(page, 'h1');
    const body = await page.content();
    assert(/not valid/.test(h1), h1);
    assert(!body.includes(L.title) && !body.includes(L.runId.slice(4)), 'run data in the page');
    return h1;
});

await check('the 401 page says how to get a new link: opencode_get_result\'s watchUrl, make token SUB=<tenant> UI=1', async () => {
    const how = await text(page, 'main');
    assert(/opencode_get_result/.test(how) && /watchUrl/.test(how), how);
    assert(/make token SUB=<tenant> UI=1/.test(how), how);
    await page.screenshot({ path: `${shots}/denied-desktop.png` });
    return how.split('\n').filter((l) => /opencode_get_result|make token/.test(l)).join(' / ');
});
await fresh.close();

// a link that stops working under an open page (the token expired: its
// cookie, which lives as long, is gone)
const E = cfg.expiring;
const gone = await browser.desktop();
page = await open(gone, E.watchUrl);
await check('a link that stops working under an open page: it says how to get a new one', async () => {
    await page.locator('#status').filter({ hasText: /^started$/ }).waitFor({ timeout: WAIT });
    await page.waitForFunction(() => window.__sse.opens === 1, null, { timeout: WAIT });
    await gone.clearCookies();
    await fr.running(E.runId);
    const err = page.locator('#load-error');
    await err.waitFor({ timeout: WAIT });
    const msg = await err.innerText();
    assert(/opencode_get_result/.test(msg) && /make token SUB=<tenant> UI=1/.test(msg), msg);
    await page.reload();
    const h1 = await text(page, 'h1');
    assert(/not valid/.test(h1), `after a reload: ${h1}`);
    return msg;
});
await gone.close();

await check('no request left the origin', async () => {
    const out = browser.offOrigin(cfg.origin);
    assert(browser.requests.length > 0 && out.length === 0, `left: ${out.slice(0, 5)}`);
    return `${browser.requests.length} requests, all to ${cfg.origin}`;
});

await browser.close();
sub.close();
redis.close();
done();
process.exit(0);
