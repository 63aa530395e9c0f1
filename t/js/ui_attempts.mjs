// A group's attempts on the run page (issue 26, point 1), in real headless
// Chromium (playwright-core driving Debian's chromium) against nginx with
// the module and Redis, started by t/ui_attempts.t: side by side on a
// desktop, one under the other on a phone, each with its status,
// changes, cost and pull request, and a link to each other attempt's
// changes that opens.
//
// Usage: node ui_attempts.mjs CONFIG.json   (written by t/ui_attempts.t)
// Output: one JSON line per check, {check, ok, detail}, then {done: true}.

import fs from 'node:fs';
import { Browser, WAIT, check, assert, done, widths } from './lib/browser.mjs';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const browser = await Browser.launch(cfg.chromium);
const [one, two, three] = cfg.runs;

// each attempt's card: its text and where it is
const cards = (page) => page.evaluate(() => [...document.querySelectorAll('#attempts > li')]
    .map((li) => {
        const b = li.getBoundingClientRect();
        return { text: li.innerText.replace(/\s+/g, ' ').trim(), top: Math.round(b.top),
                 left: Math.round(b.left), right: Math.round(b.right),
                 current: li.getAttribute('aria-current'),
                 links: [...li.querySelectorAll('a')].map((a) => [a.textContent, a.href]) };
    }));

// the tenant's link, then the second attempt's page
const desk = await browser.desktop();
const page = await browser.open(desk, cfg.tenantUrl);
await browser.goto(page, `${cfg.origin}/ui/runs/${two.runId}`);
await page.waitForFunction(() => !document.getElementById('attempts-box').hidden &&
                                 document.querySelectorAll('#attempts > li').length === 3,
                           null, { timeout: WAIT });

await check("the second attempt's page lists the three attempts, this one marked", async () => {
    const c = await cards(page);
    assert(c.length === 3, `${c.length} cards`);
    assert(c[1].current === 'page' && /^Attempt 2 \(this one\)/.test(c[1].text), c[1].text);
    assert(/^Attempt 1 /.test(c[0].text) && /^Attempt 3 /.test(c[2].text), c.map((x) => x.text));
    return c.map((x) => x.text).join(' | ');
});

await check('each shows its status, changes, cost and pull request', async () => {
    const c = await cards(page);
    assert(/Completed/i.test(c[0].text) && c[0].text.includes('2 files changed, 5 insertions(+)'),
           c[0].text);
    assert(c[0].text.includes('$0.4200'), c[0].text);
    assert(c[0].links.some(([t, h]) => t === 'Pull request' && h === cfg.prUrl), c[0].links);
    assert(/Running/i.test(c[2].text) && c[2].text.includes('not yet'), c[2].text);
    assert(/Failed/i.test(c[1].text), c[1].text);
    return 'ok';
});

await check('desktop: the attempts side by side', async () => {
    const c = await cards(page);
    assert(c[0].top === c[1].top && c[1].top === c[2].top, c.map((x) => x.top));
    assert(c[0].right <= c[1].left && c[1].right <= c[2].left, c.map((x) => [x.left, x.right]));
    return c.map((x) => `${x.left}-${x.right}`).join(' ');
});

await check("the tenant's link: each other attempt's changes linked", async () => {
    const c = await cards(page);
    const open = c[0].links.find(([t]) => t === 'Open its changes');
    assert(open && open[1] === `${cfg.origin}/ui/runs/${one.runId}#diff-h`, c[0].links);
    assert(!c[1].links.some(([t]) => t === 'Open its changes'), 'none to itself');
    return open[1];
});

await check("the link opens the first attempt's page and its changes", async () => {
    await page.click('#attempts > li:first-child a:text("Open its changes")');
    await page.waitForFunction((id) => document.querySelector('#facts')?.innerText.includes(id),
                               one.runId, { timeout: WAIT });
    await page.waitForFunction(() => !document.getElementById('diff-box').hidden,
                               null, { timeout: WAIT });
    const c = await cards(page);
    assert(c[0].current === 'page' && /^Attempt 1 \(this one\)/.test(c[0].text), c[0].text);
    return page.url();
});

const phone = await browser.phone();
const small = await browser.open(phone, three.watchUrl);
await small.waitForFunction(() => document.querySelectorAll('#attempts > li').length === 3,
                            null, { timeout: WAIT });

await check("a watchUrl: the others' number and status only, no link, no words of theirs", async () => {
    const c = await cards(small);
    assert(/^Attempt 1 completed$/i.test(c[0].text) && /^Attempt 2 failed$/i.test(c[1].text),
           c.map((x) => x.text));
    assert(/^Attempt 3 \(this one\) running/i.test(c[2].text), c[2].text);
    assert(c[0].links.length === 0 && c[1].links.length === 0, c.map((x) => x.links));
    const data = await small.evaluate(async (u) => (await fetch(u)).json(),
                                      `${cfg.origin}/ui/runs/${three.runId}/data`);
    const keys = data.attempts.map((a) => Object.keys(a).sort().join(','));
    assert(keys.every((k) => k === 'attempt,runId,status'), keys);
    return keys[0];
});

await check('390 px: one under the other, no sideways scroll', async () => {
    const c = await cards(small);
    assert(c[0].top < c[1].top && c[1].top < c[2].top, c.map((x) => x.top));
    const [sw, vw] = await widths(small);
    assert(sw <= vw, `scrollWidth ${sw} > ${vw}`);
    return c.map((x) => x.top).join(' ');
});

await check('no script error', async () => {
    assert(page.errors.length === 0 && small.errors.length === 0,
           [...page.errors, ...small.errors]);
    return 'none';
});

await browser.close();
done();
