#!/usr/bin/perl

# The official MCP TypeScript SDK client's OAuth flow end to end against the
# module's authorization server (t/js/sdk_oauth.mjs, an OAuthClientProvider):
# discovery from /mcp's 401, dynamic registration, the authorization
# request (PKCE S256, resource; state when the provider defines state(),
# none when it does not, as the SDK's examples write it), the sign-in page
# driven in headless Chromium on a phone-sized screen (a wrong access key
# refused, then the right one), the code exchanged (finishAuth), tools/call
# with the access token, a refresh rotating both tokens and tools/call
# with the new one.
#
# Needs nginx + the module, redis-server, node with the SDK and
# playwright-core, and Chromium; CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root require_prereqs browser_missing chromium_bin js_checks);

my $root = repo_root();

require_prereqs(browser_missing(),
                -d "$root/node_modules/\@modelcontextprotocol/sdk" ? ()
                : "$root/node_modules/\@modelcontextprotocol/sdk (run `npm ci`)");

my $t = SMCP::Test->new(
    workers => 2,
    server  => q{
        sandbox_mcp_oauth on;
        location /.well-known/ { sandbox_mcp_oauth_endpoints; }
        location /oauth/ { sandbox_mcp_oauth_endpoints; }},
);
$t->start;

my $url = 'http://127.0.0.1:' . $t->port . '/mcp';
my $key = $t->token(sub => 'alice', repos => ['acme/*'], jti => 'sdk-key');

# twice: a provider with state(), and one without (the SDK's examples
# define none; OAuth 2.1 lets PKCE carry the CSRF protection)
for my $mode (qw(state nostate)) {
    js_checks("sdk oauth ($mode)",
              [ "$root/t/js/sdk_oauth.mjs", $url, $key, chromium_bin(), $mode ], [
        'connect without a token ends in UnauthorizedError (redirect)',
        'discovery found the authorization server from the 401',
        'dynamic registration gave a client_id',
        'the authorization URL carries PKCE S256, resource and '
            . ($mode eq 'state' ? 'state' : 'no state'),
        'the sign-in page names the client',
        'a wrong access key is refused on the page',
        'the access key signs in and the browser returns with a code',
        'the page made no script error and no request off its origin',
        'finishAuth exchanges the code for tokens',
        'connect with the access token',
        'tools/call opencode_list_runs with the access token',
        'a refresh rotates both tokens',
        'tools/call with the refreshed access token',
    ], timeout => 120);
}

$t->done;
