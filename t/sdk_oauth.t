#!/usr/bin/perl

# The official MCP TypeScript SDK client's OAuth flow end to end against the
# module's authorization server (t/js/sdk_oauth.mjs, an OAuthClientProvider):
# discovery from /mcp's 401, dynamic registration, the authorization
# request (PKCE S256, resource, state), the sign-in page driven in headless
# Chromium (a wrong access key refused, then the right one), the code
# exchanged (finishAuth), tools/call with the access token, a refresh
# rotating both tokens and tools/call with the new one.
#
# Needs nginx + the module, redis-server, node with the SDK and
# playwright-core, and /usr/bin/chromium; CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root require_prereqs run_cmd);
use SMCP::JS qw(node_bin js_prereqs js_report);

my $root = repo_root();
my $chromium = $ENV{SMCP_CHROMIUM} || '/usr/bin/chromium';

my @EXPECTED = (
    'connect without a token ends in UnauthorizedError (redirect)',
    'discovery found the authorization server from the 401',
    'dynamic registration gave a client_id',
    'the authorization URL carries PKCE S256, resource and state',
    'the sign-in page names the client',
    'a wrong access key is refused on the page',
    'the access key signs in and the browser returns with a code',
    'finishAuth exchanges the code for tokens',
    'connect with the access token',
    'tools/call opencode_list_runs with the access token',
    'a refresh rotates both tokens',
    'tools/call with the refreshed access token',
);

my $node = node_bin();
require_prereqs(js_prereqs('playwright-core'),
                -x $chromium ? () : "$chromium (apt-get install chromium)");

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

my ($status, $stdout, $stderr) = run_cmd([ $node, "$root/t/js/sdk_oauth.mjs", $url,
                                           $key, $chromium ],
                                         timeout => 120, dir => $root);
ok($status != 124, 'the SDK client finished within 120 s');
js_report('sdk oauth', \@EXPECTED, $status, $stdout, $stderr);

$t->done;
