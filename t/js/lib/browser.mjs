// Headless Chromium for the dashboard's tests: Debian's /usr/bin/chromium
// driven by playwright-core, checks reported as JSON lines (SMCP::Test's
// js_checks turns each into an assertion), and every page instrumented:
// the requests it makes, the dialogs it opens, a flag an injected script
// would set, what its event streams received.
//
//   const b = await Browser.launch(cfg.chromium);
//   const ctx = await b.context({ viewport: { width: 390, height: 844 } });
//   const page = await b.open(ctx, url);
//   await check('the page says hello', async () => { assert(...); return 'detail'; });
//   await b.close(); done();

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

export { report, check, assert, done, script } from './checks.mjs';

export const WAIT = 60000;       // ms a page may take to show a change (a loaded machine)

export const text = (page, sel) => page.locator(sel).innerText();

// [document scrollWidth, viewport width]
export const widths = (page) => page.evaluate(() =>
    [document.documentElement.scrollWidth, window.innerWidth]);

// before any script of a page: alert() and the flag an injected script
// sets (window.__smcpXss), the ids, opens and errors of its streams, and
// the notifications it asked for and made (window.__notify)
function instrument() {
    window.__smcpXss = 0;
    window.alert = () => { window.__smcpXss = 'alert'; };
    const N = window.Notification;
    const notify = window.__notify = { asks: 0, shown: [] };
    if (N) {
        const ask = N.requestPermission.bind(N);
        window.Notification = class extends N {
            constructor(title, opts) {
                super(title, opts);
                notify.shown.push({ title, body: opts?.body ?? '', tag: opts?.tag ?? '' });
            }

            static get permission() { return N.permission; }

            static requestPermission(...a) {
                notify.asks++;
                return ask(...a);
            }
        };
    }
    const ES = window.EventSource;
    const sse = window.__sse = { ids: [], opens: 0, errors: 0 };
    window.EventSource = class extends ES {
        constructor(url, opts) {
            super(url, opts);
            for (const t of ['agent', 'lifecycle', 'log', 'egress']) {
                this.addEventListener(t, (m) => sse.ids.push(m.lastEventId));
            }
            this.addEventListener('open', () => sse.opens++);
            this.addEventListener('error', () => sse.errors++);
        }
    };
}

export class Browser {
    constructor(b) {
        this.b = b;
        this.requests = [];      // every URL any page asked for
        this.dialogs = [];       // every dialog any page opened
    }

    static async launch(executablePath) {
        return new Browser(await chromium.launch({
            executablePath,
            args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
        }));
    }

    async context(opts) {
        const ctx = await this.b.newContext(opts);
        await ctx.addInitScript(instrument);
        ctx.on('request', (r) => this.requests.push(r.url()));
        ctx.on('page', (p) => p.on('dialog', (d) => {
            this.dialogs.push(d.message());
            d.dismiss();
        }));
        return ctx;
    }

    desktop() {
        return this.context({ viewport: { width: 1280, height: 900 }, colorScheme: 'light' });
    }

    phone() {
        return this.context({ viewport: { width: 390, height: 844 }, colorScheme: 'dark',
                              isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    }

    // a page that counts its navigations (a reload would be a second one)
    // and its script errors
    async open(ctx, url) {
        const page = await ctx.newPage();
        page.navigations = 0;
        page.errors = [];
        page.on('framenavigated', (f) => { if (f === page.mainFrame()) page.navigations++; });
        page.on('pageerror', (e) => page.errors.push(e.message));
        await this.goto(page, url);
        return page;
    }

    // page.goto, tried again when Chromium gave the navigation up because
    // the host's addresses changed (net::ERR_NETWORK_CHANGED: Docker's
    // interfaces come and go while other files of make test run); an error
    // page it showed meanwhile is not counted as a navigation
    async goto(page, url, opts = { waitUntil: 'load' }) {
        for (let i = 1; ; i++) {
            const before = page.navigations;
            try {
                return await page.goto(url, opts);
            } catch (e) {
                if (i >= 5 || !/ERR_NETWORK_CHANGED/.test(String(e?.message))) throw e;
                page.navigations = before;
                await new Promise((r) => setTimeout(r, 250));
            }
        }
    }

    // the requests that left `origin`
    offOrigin(origin) {
        return this.requests.filter((u) => !u.startsWith(`${origin}/`) && !u.startsWith('data:'));
    }

    close() {
        return this.b.close();
    }
}
