// A person signing in with an access key, in headless Chromium
// (t/js/lib/browser.mjs): the browser a client opens on the
// authorization page (mcp-remote through xdg-open's BROWSER). It fills
// the access key, allows the client, and follows the redirect back to
// the client's loopback callback.
//
//   node t/js/signin.mjs AUTHORIZATION_URL
//
// Environment: SMCP_ACCESS_KEY (the key typed in), SMCP_CHROMIUM,
// SMCP_CHECKS_FILE (where the check lines go: the client started this
// script, nobody reads its output). The page's certificate is the test's
// own CA's: not checked here (the client, Node, checks it).

import { Browser, check, assert, script } from './lib/browser.mjs';

const [url] = process.argv.slice(2);
const accessKey = process.env.SMCP_ACCESS_KEY;
const json = (x) => JSON.stringify(x);

let browser;
await script(async () => {
    const auth = new URL(url);
    const redirect = auth.searchParams.get('redirect_uri');
    await check('the client opened the authorization page with PKCE S256', async () => {
        assert(auth.pathname === '/oauth/authorize'
               && auth.searchParams.get('code_challenge_method') === 'S256'
               && /^http:\/\/(localhost|127\.0\.0\.1):\d+\//.test(redirect ?? ''), url);
        return `${auth.origin}${auth.pathname}, redirect_uri ${redirect}`;
    });

    browser = await Browser.launch(process.env.SMCP_CHROMIUM);
    const ctx = await browser.context({ viewport: { width: 390, height: 844 },
                                        ignoreHTTPSErrors: true });
    const page = await browser.open(ctx, url);
    await check('the sign-in page names the client and its callback', async () => {
        const text = await page.textContent('#consent');
        assert(text.includes(new URL(redirect).host), text);
        return text.replace(/\s+/g, ' ');
    });
    await check('the access key signs in; the browser goes back to the client', async () => {
        await page.fill('#access_key', accessKey);
        await Promise.all([
            page.waitForURL((u) => String(u).startsWith(redirect), { timeout: 30000 }),
            page.click('#approve'),
        ]);
        const back = new URL(page.url());
        assert(back.searchParams.get('code') && !back.searchParams.get('error'), page.url());
        return page.url().replace(/code=[^&]+/, 'code=...');
    });
    await check('the page made no script error', async () => {
        assert(page.errors.length === 0, json(page.errors));
        return '';
    });
}, async () => {
    if (browser) await browser.close();
});
