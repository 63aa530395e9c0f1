// The official MCP TypeScript SDK client's OAuth flow against the module's
// authorization server, with the sign-in page driven in headless Chromium
// (t/js/lib/browser.mjs): discovery from the 401, dynamic registration, the
// authorization request, the access key typed into the page, the code
// exchanged, tools/call with the access token, then a refresh.
//
//   node t/js/sdk_oauth.mjs URL ACCESS_KEY CHROMIUM [state|nostate]
//
// nostate: the provider defines no state(), as the SDK's own examples
// write it; the authorization request then carries none (PKCE S256 is
// the CSRF protection, OAuth 2.1) and the redirect brings none back.
//
// One JSON line per check, then {"done": true}; t/sdk_oauth.t makes each
// an assertion (SMCP::Test's js_checks).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Browser, check, assert, script } from './lib/browser.mjs';

const [url, accessKey, chromiumPath, mode = 'state'] = process.argv.slice(2);
if (!url || !accessKey || !chromiumPath || !/^(no)?state$/.test(mode)) {
    console.error('usage: node sdk_oauth.mjs URL ACCESS_KEY CHROMIUM [state|nostate]');
    process.exit(2);
}
const withState = mode === 'state';

// a loopback redirect URI nothing listens on: the browser's request to it
// is intercepted and its code read
const redirectUrl = 'http://127.0.0.1:9/oauth/callback';

// an in-memory OAuthClientProvider, as a CLI would keep in a file
class MemoryProvider {
    constructor() {
        this.saved = {};
        this.authorizationUrl = null;
        if (withState) {
            this.stateValue = 'sdk-' + Math.random().toString(16).slice(2);
            this.state = () => this.stateValue;
        }
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
const json = (x) => JSON.stringify(x);

async function connect() {
    const client = new Client({ name: 'smcp-sdk-oauth', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    await client.connect(transport);
    return { client, transport };
}

let browser;

await script(async () => {
    // 1. no token: the 401 starts discovery, registration, the redirect
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    await check('connect without a token ends in UnauthorizedError (redirect)', async () => {
        const client = new Client({ name: 'smcp-sdk-oauth', version: '1.0.0' });
        let error;
        try { await client.connect(transport); } catch (e) { error = e; }
        assert(error instanceof UnauthorizedError, `connected, or ${error}`);
        return error.message;
    });
    await check('discovery found the authorization server from the 401', async () => {
        const d = provider.saved.discovery;
        assert(d?.authorizationServerMetadata?.token_endpoint?.endsWith('/oauth/token'), json(d));
        return d.authorizationServerUrl;
    });
    await check('dynamic registration gave a client_id', async () => {
        assert(/^mcp_[0-9a-f]{32}$/.test(provider.saved.client?.client_id ?? ''),
               json(provider.saved.client));
        return provider.saved.client.client_id;
    });
    await check(`the authorization URL carries PKCE S256, resource and ${withState ? 'state' : 'no state'}`, async () => {
        const q = provider.authorizationUrl?.searchParams;
        assert(q && q.get('code_challenge_method') === 'S256' && q.get('code_challenge')
               && q.get('resource') === url && q.get('state') === (provider.stateValue ?? null),
               String(provider.authorizationUrl));
        return String(provider.authorizationUrl);
    });

    // 2. the sign-in page in headless Chromium
    browser = await Browser.launch(chromiumPath);
    const ctx = await browser.phone();
    let redirected;
    await ctx.route('http://127.0.0.1:9/**', (route) => {
        redirected = new URL(route.request().url());
        route.fulfill({ status: 200, contentType: 'text/plain', body: 'signed in' });
    });
    const page = await browser.open(ctx, String(provider.authorizationUrl));
    await check('the sign-in page names the client', async () => {
        const text = await page.textContent('#consent');
        assert(text.includes('SDK OAuth test') && text.includes('127.0.0.1:9'), text);
        return text.replace(/\s+/g, ' ');
    });
    await check('a wrong access key is refused on the page', async () => {
        await page.fill('#access_key', 'not-a-key');
        await Promise.all([page.waitForLoadState('load'), page.click('#approve')]);
        const err = await page.textContent('#error');
        assert(/not accepted/.test(err) && !redirected, err);
        return err;
    });
    await check('the access key signs in and the browser returns with a code', async () => {
        await page.fill('#access_key', accessKey);
        await page.click('#approve');
        for (let i = 0; i < 100 && !redirected; i++) await new Promise((r) => setTimeout(r, 100));
        assert(redirected?.searchParams.get('code')
               && redirected.searchParams.get('state') === (provider.stateValue ?? null),
               String(redirected));
        return String(redirected).replace(/code=[^&]+/, 'code=...');
    });
    await check('the page made no script error and no request off its origin', async () => {
        const origin = new URL(url).origin;
        const off = browser.offOrigin(origin).filter((u) => !u.startsWith('http://127.0.0.1:9/'));
        assert(page.errors.length === 0 && off.length === 0, json({ errors: page.errors, off }));
        return '';
    });

    // 3. the code exchanged
    await check('finishAuth exchanges the code for tokens', async () => {
        await transport.finishAuth(redirected.searchParams.get('code'));
        const t = provider.saved.tokens;
        assert(t?.access_token && t?.refresh_token && t.token_type === 'Bearer', json(t));
        return `expires_in ${t.expires_in}, scope ${t.scope}`;
    });

    // 4. tools with the access token
    let session = await connect();
    await check('connect with the access token', async () => '');
    await check('tools/call opencode_list_runs with the access token', async () => {
        const r = await session.client.callTool({ name: 'opencode_list_runs', arguments: {} });
        assert(!r.isError && Array.isArray(r.structuredContent?.runs), json(r));
        return '';
    });
    await session.client.close();

    // 5. a refresh: new tokens, and they work
    const before = provider.saved.tokens;
    await check('a refresh rotates both tokens', async () => {
        const r = await auth(provider, { serverUrl: new URL(url) });
        const t = provider.saved.tokens;
        assert(r === 'AUTHORIZED' && t.access_token !== before.access_token
               && t.refresh_token !== before.refresh_token, r);
        return r;
    });
    session = await connect();
    await check('tools/call with the refreshed access token', async () => {
        const r = await session.client.callTool({ name: 'opencode_list_runs', arguments: {} });
        assert(!r.isError, json(r));
        return '';
    });
    await session.client.close();
}, async () => {
    if (browser) await browser.close();
});
