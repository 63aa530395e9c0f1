// The official MCP TypeScript SDK client's OAuth flow against the module's
// authorization server, with the sign-in page driven in headless Chromium
// (playwright-core): discovery from the 401, dynamic registration, the
// authorization request, the access key typed into the page, the code
// exchanged, tools/call with the access token, then a refresh.
//
//   node t/js/sdk_oauth.mjs URL ACCESS_KEY CHROMIUM
//
// Prints one JSON object per line: {"check": NAME, "ok": BOOL, "detail": ...}
// followed by {"done": true}; t/sdk_oauth.t makes each line an assertion.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { chromium } from 'playwright-core';
import { check, emit, errInfo, done } from './checks.mjs';

const [url, accessKey, chromiumPath] = process.argv.slice(2);
if (!url || !accessKey || !chromiumPath) {
    console.error('usage: node sdk_oauth.mjs URL ACCESS_KEY CHROMIUM');
    process.exit(2);
}

// a loopback redirect URI nothing listens on: the browser's request to it
// is intercepted and its code read
const redirectUrl = 'http://127.0.0.1:9/oauth/callback';

// an in-memory OAuthClientProvider, as a CLI would keep in a file
class MemoryProvider {
    constructor() {
        this.saved = {};
        this.authorizationUrl = null;
        this.stateValue = 'sdk-' + Math.random().toString(16).slice(2);
    }
    get redirectUrl() { return redirectUrl; }
    get clientMetadata() {
        return {
            client_name: 'SDK OAuth test',
            redirect_uris: [redirectUrl],
            grant_types: ['authorization_code', 'refresh_token'],
            response_types: ['code'],
            token_endpoint_auth_method: 'none',
        };
    }
    state() { return this.stateValue; }
    clientInformation() { return this.saved.client; }
    saveClientInformation(c) { this.saved.client = c; }
    tokens() { return this.saved.tokens; }
    saveTokens(t) { this.saved.tokens = t; }
    redirectToAuthorization(u) { this.authorizationUrl = new URL(u); }
    saveCodeVerifier(v) { this.saved.verifier = v; }
    codeVerifier() { return this.saved.verifier; }
    saveDiscoveryState(s) { this.saved.discovery = s; }
    discoveryState() { return this.saved.discovery; }
}

const provider = new MemoryProvider();
let browser;
let code;

async function connect() {
    const client = new Client({ name: 'smcp-sdk-oauth', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    await client.connect(transport);
    return { client, transport };
}

try {
    // 1. no token: the 401 starts discovery, registration, the redirect
    let transport;
    await check('connect without a token ends in UnauthorizedError (redirect)', async () => {
        const client = new Client({ name: 'smcp-sdk-oauth', version: '1.0.0' });
        transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
        try {
            await client.connect(transport);
            return { ok: false, detail: 'connected without authorization' };
        } catch (e) {
            return { ok: e instanceof UnauthorizedError, detail: errInfo(e) };
        }
    });
    await check('discovery found the authorization server from the 401', () => ({
        ok: provider.saved.discovery?.authorizationServerMetadata?.token_endpoint?.endsWith('/oauth/token'),
        detail: provider.saved.discovery,
    }));
    await check('dynamic registration gave a client_id', () => ({
        ok: /^mcp_[0-9a-f]{32}$/.test(provider.saved.client?.client_id ?? ''),
        detail: provider.saved.client,
    }));
    await check('the authorization URL carries PKCE S256, resource and state', () => {
        const q = provider.authorizationUrl?.searchParams;
        return {
            ok: !!q && q.get('code_challenge_method') === 'S256' && !!q.get('code_challenge')
                && q.get('resource') === url && q.get('state') === provider.stateValue,
            detail: String(provider.authorizationUrl),
        };
    });

    // 2. the sign-in page in headless Chromium
    browser = await chromium.launch({ executablePath: chromiumPath, headless: true,
                                      args: ['--no-sandbox'] });
    const page = await browser.newPage();
    let redirected;
    await page.route('http://127.0.0.1:9/**', (route) => {
        redirected = new URL(route.request().url());
        route.fulfill({ status: 200, contentType: 'text/plain', body: 'signed in' });
    });
    await check('the sign-in page names the client', async () => {
        await page.goto(String(provider.authorizationUrl));
        const text = await page.textContent('#consent');
        return { ok: text.includes('SDK OAuth test') && text.includes('127.0.0.1:9'), detail: text };
    });
    await check('a wrong access key is refused on the page', async () => {
        await page.fill('#access_key', 'not-a-key');
        await Promise.all([page.waitForLoadState('load'), page.click('#approve')]);
        const err = await page.textContent('#error');
        return { ok: /not accepted/.test(err) && !redirected, detail: err };
    });
    await check('the access key signs in and the browser returns with a code', async () => {
        await page.fill('#access_key', accessKey);
        await page.click('#approve');
        for (let i = 0; i < 100 && !redirected; i++) await new Promise((r) => setTimeout(r, 100));
        code = redirected?.searchParams.get('code');
        return {
            ok: !!code && redirected.searchParams.get('state') === provider.stateValue,
            detail: String(redirected),
        };
    });

    // 3. the code exchanged
    await check('finishAuth exchanges the code for tokens', async () => {
        await transport.finishAuth(code);
        const t = provider.saved.tokens;
        return { ok: !!t?.access_token && !!t?.refresh_token && t.token_type === 'Bearer',
                 detail: { expires_in: t?.expires_in, scope: t?.scope } };
    });

    // 4. tools with the access token
    let session = await connect();
    await check('connect with the access token', () => true);
    await check('tools/call opencode_list_runs with the access token', async () => {
        const r = await session.client.callTool({ name: 'opencode_list_runs', arguments: {} });
        return { ok: !r.isError && Array.isArray(r.structuredContent?.runs), detail: r };
    });
    await session.client.close();

    // 5. a refresh: new tokens, and they work
    const before = provider.saved.tokens;
    await check('a refresh rotates both tokens', async () => {
        const r = await auth(provider, { serverUrl: new URL(url) });
        const t = provider.saved.tokens;
        return { ok: r === 'AUTHORIZED' && t.access_token !== before.access_token
                     && t.refresh_token !== before.refresh_token, detail: r };
    });
    session = await connect();
    await check('tools/call with the refreshed access token', async () => {
        const r = await session.client.callTool({ name: 'opencode_list_runs', arguments: {} });
        return { ok: !r.isError, detail: r };
    });
    await session.client.close();
} catch (e) {
    emit('unexpected error', false, errInfo(e));
} finally {
    if (browser) await browser.close();
}

done();
process.exit(0);
