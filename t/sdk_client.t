#!/usr/bin/perl
# The official MCP TypeScript SDK client (Client + StreamableHTTPClientTransport
# with a bearer token) against the module: connect, listTools, the run tools,
# invalid arguments, terminateSession, and 404 after termination.
#
# The client side is t/js/sdk_client.mjs; it reports one JSON line per check
# and every line becomes an assertion here.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root require_prereqs node_bin js_checks);

my $root = repo_root();

# the checks t/js/sdk_client.mjs reports, in order
my @EXPECTED = (
    'connect (initialize + initialized)',
    'negotiated protocol version is the SDK latest',
    'ping',
    'listTools returns the 9 tools',
    'callTool opencode_run_task starts a run',
    'callTool opencode_get_result returns the run',
    'callTool opencode_list_runs lists the run',
    'callTool without the required argument gives isError',
    'callTool with a wrongly typed argument gives isError',
    'callTool for an unknown run gives isError "run not found"',
    'callTool of an unknown tool is a -32602 protocol error',
    'terminateSession (DELETE) succeeds',
    'request without a session after termination is refused (400)',
    'request on the terminated session fails with 404',
    'raw POST on the terminated session: 404 with -32001',
);

my $node = node_bin();
my @missing;
push @missing, 'node' unless $node;
push @missing, "$root/node_modules/\@modelcontextprotocol/sdk (run `npm ci`)"
    unless -d "$root/node_modules/\@modelcontextprotocol/sdk";
require_prereqs(@missing);

my $t = SMCP::Test->new(workers => 2);
$t->start;

my $url = 'http://127.0.0.1:' . $t->port . '/mcp';
my $token = $t->token(scope => 'mcp');

# the client, 120 s at most: stdout = JSON lines, one per check
js_checks('sdk', ["$root/t/js/sdk_client.mjs", $url, $token], \@EXPECTED,
          timeout => 120);

$t->done;
