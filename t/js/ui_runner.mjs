// The run page of a run the real runner runs (the real OpenCode in a
// sandbox, a scripted fake model): opened from its watchUrl at once and
// watched, in headless Chromium, until the run completes.  Started by
// t/ui_runner.t, which checks Redis afterwards.
//
// Usage: node ui_runner.mjs CONFIG.json
// Output: one JSON line per check, {check, ok, detail}, then {done: true}.

import fs from 'node:fs';
import { Browser, WAIT, check, assert, done, text, widths } from './lib/browser.mjs';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const RUN_WAIT = 180000;         // ms the real run may take

const browser = await Browser.launch(cfg.chromium);
fs.mkdirSync(cfg.shots, { recursive: true });

const desk = await browser.desktop();
// the tenant's link first (its cookie: the message box is the tenant's),
// then the run's watchUrl in the same browser
const list = await browser.open(desk, cfg.tenantUrl);
await list.close();
const page = await browser.open(desk, cfg.watchUrl);
let first = 0;

await check('the watchUrl opens the run page while the run has not ended', async () => {
    await page.locator('#status').filter({ hasText: /^(started|running)$/ })
        .waitFor({ timeout: WAIT });
    first = await page.locator('#timeline > li').count();
    return `${await text(page, '#status')}, ${first} entries`;
});

await check('the file the real OpenCode wrote shows among the files changed so far while it runs', async () => {
    await page.locator('#timeline li.tool', { hasText: cfg.file }).first()
        .waitFor({ timeout: RUN_WAIT });
    const shown = (await page.locator('#files-now').textContent()).replace(/\s+/g, ' ').trim();
    const st = await text(page, '#status');
    assert(st === 'running', `status ${st}`);
    assert(await page.locator('#files-now').isVisible(), 'hidden');
    assert(shown === `Files changed so far: ${cfg.file}`, `shown: ${shown}`);
    return shown;
});

await check('a message from the page reaches the running agent: shown as text, then taken', async () => {
    await page.locator('#timeline li.tool', { hasText: cfg.file }).first()
        .waitFor({ timeout: RUN_WAIT });
    await page.locator('#steer-box').waitFor({ state: 'visible', timeout: WAIT });
    await page.click('#steer-send');
    const empty = await text(page, '#steer-note');
    assert(/Write a message first/.test(empty), `empty: ${empty}`);
    await page.fill('#steer', cfg.steer);
    await page.click('#steer-send');
    await page.locator('#steer-note', { hasText: /^Sent/ }).waitFor({ timeout: WAIT });
    assert((await page.inputValue('#steer')) === '', 'the box was not cleared');
    const m = page.locator('#timeline li.message', { hasText: cfg.steerMark }).first();
    await m.waitFor({ timeout: WAIT });
    const pre = await m.locator('pre').textContent();
    assert(pre === cfg.steer, `shown: ${pre}`);
    assert((await page.locator('#timeline img, #timeline script').count()) === 0,
           'its markup became elements');
    await page.locator('#timeline li', { hasText: /Message 1 reached the agent/ })
        .waitFor({ timeout: RUN_WAIT });
    return pre.slice(0, 60);
});

await check('the real OpenCode\'s tool calls appear live: write, then bash with its command', async () => {
    const write = page.locator('#timeline li.tool', { hasText: cfg.file });
    await write.first().waitFor({ timeout: RUN_WAIT });
    const bash = page.locator('#timeline li.tool', { hasText: cfg.command });
    await bash.first().waitFor({ timeout: RUN_WAIT });
    assert((await bash.first().locator('pre.cmd').innerText()) === cfg.command, 'the command');
    const st = await text(page, '#status');
    assert(st === 'running', `status ${st} when the tool calls showed`);
    return `status ${st}`;
});

await check('the command\'s output is folded and holds what it printed', async () => {
    const d = page.locator('#timeline li.tool', { hasText: cfg.command }).first().locator('details');
    assert(!(await d.evaluate((e) => e.open)), 'open');
    const out = await d.locator('pre').textContent();
    assert(out.includes(cfg.printed), `output: ${out.slice(0, 200)}`);
    return out.trim().slice(0, 80);
});

await check('the status turns completed, without reload', async () => {
    await page.locator('#status').filter({ hasText: /^completed$/ }).waitFor({ timeout: RUN_WAIT });
    const n = await page.locator('#timeline > li').count();
    assert(n > first, `entries ${first} -> ${n}`);
    assert(page.navigations === 1, `navigations ${page.navigations}`);
    assert(page.errors.length === 0, page.errors.join('; '));
    assert(await page.locator('#steer-box').isHidden(), 'the message box stays');
    return `${first} -> ${n} entries`;
});

await check('the reply, the result, tokens and cost and the diff render', async () => {
    await page.locator('#timeline li.reply', { hasText: cfg.reply }).waitFor({ timeout: WAIT });
    await page.locator('#result', { hasText: cfg.reply }).waitFor({ timeout: WAIT });
    await page.locator('#diff details.file').first().waitFor({ timeout: WAIT });
    const files = await page.locator('#diff .file summary .path').allInnerTexts();
    assert(files.includes(cfg.file), `files ${files}`);
    const add = await page.locator('#diff .dl.add').allTextContents();
    assert(add.some((l) => l.includes(cfg.added)), `added lines ${add}`);
    const u = await text(page, '#usage');
    const m = u.match(/Input tokens\s+(\d+)/);
    assert(m && Number(m[1]) > 0, `usage ${u}`);
    return `${files.join(', ')}; ${u.replace(/\s+/g, ' ')}`;
});

await page.evaluate(() => {
    const d = document.querySelector('#timeline li.tool details');
    if (d) d.open = true;
});
await page.screenshot({ path: `${cfg.shots}/real-run-desktop.png`, fullPage: true });

const phone = await browser.phone();
const pp = await browser.open(phone, cfg.watchUrl);
await check('390 px: the real run\'s page does not scroll sideways', async () => {
    await pp.locator('#diff details.file').first().waitFor({ timeout: WAIT });
    const [sw, vw] = await widths(pp);
    assert(sw <= vw, `scrollWidth ${sw} > ${vw}`);
    return `scrollWidth ${sw}, viewport ${vw}`;
});
await pp.screenshot({ path: `${cfg.shots}/real-run-phone.png`, fullPage: true });

await check('no request left the origin', async () => {
    const out = browser.offOrigin(cfg.origin);
    assert(out.length === 0, `left: ${out.slice(0, 5)}`);
    return `${browser.requests.length} requests`;
});

await browser.close();
done();
process.exit(0);
