#!/usr/bin/perl

# docs/clients.md's client configurations, each run by the real client
# (from npm, pinned in package.json) as the doc writes it, against nginx
# with the module and redis-server: the configuration is read from the doc
# by its marker (SMCP::Clients), so the doc and the test cannot drift.
#
#   Claude Code: the doc's `claude mcp add` line (its `make -s token`
#       too), then `claude mcp list` says the server is connected.
#   Claude Desktop: the doc's mcpServers entry for mcp-remote with a
#       token, started as Claude Desktop starts it (a stdio server: the
#       entry's command, args and env), spoken to over stdio by the
#       official SDK's client (t/js/stdio_client.mjs): initialize,
#       tools/list, tools/call.
#   The MCP Inspector's CLI: the doc's two command lines (tools/list, a
#       tools/call).
#
# And the doc itself: every sh and json block of docs/clients.md follows
# a marker, and every marker names a configuration a test runs (this file,
# t/clients_claude_code.t or t/clients_public.t); README's client section
# is the doc's Claude Code line and no other configuration.
#
# Needs nginx + the module, redis-server, Node 22, npx and the clients
# from `npm ci`; CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root json_decode json_encode slurp);
use SMCP::Clients qw(snippet snippets localize claude_name desktop_entry);

my $root = repo_root();

# each configuration of the doc, and the test that runs it
my %RUN_BY = (
    'claude-code-add'      => 't/clients.t, t/clients_claude_code.t',
    'claude-desktop-token' => 't/clients.t',
    'claude-desktop-oauth' => 't/clients_public.t',
    'inspector-list'       => 't/clients.t',
    'inspector-call'       => 't/clients.t',
    'make-up-public'       => 't/clients_public.t',
);

my $c = SMCP::Clients->new;
my $t = SMCP::Test->new(workers => 2);
$t->start;

my $base = 'http://127.0.0.1:' . $t->port;
my $name = claude_name();
# `make -s token` in the doc's lines signs with the test's secret
my %signer = (PROXY_JWT_SECRET => $t->secret);

subtest 'the doc: every configuration marked, every marker run' => sub {
    my ($names, $configs) = snippets();
    is(scalar @$names, $configs, 'every sh and json block of docs/clients.md follows a marker')
        or diag("markers: @$names");
    for my $n (@$names) {
        ok($RUN_BY{$n}, "$n: run by a test ($RUN_BY{$n})")
            or diag("no test runs the configuration <!-- test: $n -->");
    }
    my %in_doc = map { $_ => 1 } @$names;
    ok($in_doc{$_}, "the doc has $_") for sort keys %RUN_BY;
    my %files = map { $_ => 1 } map { split /, / } values %RUN_BY;
    ok(-f "$root/$_", "$_ exists") for sort keys %files;
};

subtest 'README: the doc\'s Claude Code line, no other configuration' => sub {
    my $readme = slurp("$root/README.md");
    my ($section) = $readme =~ /^## Client configuration\n(.*?)^## /ms;
    ok($section, 'README has its client section');
    my @blocks = ($section // '') =~ /^```[a-z]*\n(.*?)^```/msg;
    is_deeply(\@blocks, [ snippet('claude-code-add') ],
              'one block: docs/clients.md\'s claude mcp add');
    like($section, qr{\(docs/clients\.md\)}, 'a link to docs/clients.md');
    unlike($readme, qr/"mcpServers"/, 'no mcpServers JSON in README');
};

subtest 'Claude Code: claude mcp add, claude mcp list' => sub {
    my ($rc, $out, $err) = $c->sh(snippet('claude-code-add'), url => $base, env => \%signer);
    is($rc, 0, 'the doc\'s claude mcp add line runs') or diag("$out$err");
    like($out, qr/Added HTTP MCP server \Q$name\E with URL: \Q$base\E\/mcp/,
         '... and adds the server');
    my ($hdr) = slurp($c->home . '/.claude.json') =~ /"Authorization": "Bearer ([^"]+)"/;
    my (undef, $claims) = SMCP::Test::decode_jwt($hdr // '');
    my $tenant = $ENV{USER} || 'local';
    is($claims && $claims->{sub}, $tenant,
       "... with a token of make token (make up's tenant: $tenant)");
    is_deeply($claims && $claims->{repos}, ['*'], '... and its repositories (any)');

    ($rc, $out, $err) = $c->run(['claude', 'mcp', 'list'], timeout => 60);
    is($rc, 0, 'claude mcp list') or diag("$out$err");
    like($out, qr/^\Q$name\E: \Q$base\E\/mcp \(HTTP\) - \S+ Connected$/m,
         '... connects: the server is connected') or diag($out);
};

subtest 'Claude Desktop: mcp-remote with a token, over stdio' => sub {
    my $json = localize(snippet('claude-desktop-token'), $base);
    my $tok = $t->token(sub => 'alice');
    $json =~ s/\Q$SMCP::Clients::TOKEN\E/$tok/g;
    my $entry = desktop_entry($json);
    ok($entry && $entry->{command}, 'the doc\'s claude_desktop_config.json parses: a stdio server')
        or diag($json);
    ok(!exists $entry->{url} && !exists $entry->{type}, '... not a url, as Claude Desktop needs');
    $c->js_checks('claude desktop (mcp-remote)',
                  [ "$root/t/js/stdio_client.mjs", json_encode($entry), 'opencode_list_runs' ], [
        'initialize over stdio',
        'tools/list: the nine tools',
        'tools/call opencode_list_runs',
    ], timeout => 120);
};

subtest 'MCP Inspector CLI: tools/list, tools/call' => sub {
    my ($rc, $out, $err) = $c->sh(snippet('inspector-list'), url => $base, env => \%signer);
    is($rc, 0, 'the doc\'s tools/list line runs') or diag("$out$err");
    my $j = json_decode($out);
    is_deeply([ sort map { $_->{name} } @{ (ref $j eq 'HASH' && $j->{tools}) || [] } ],
              [ qw(opencode_cancel_run opencode_get_diff opencode_get_events opencode_get_result
                   opencode_list_runs opencode_list_sessions opencode_pick_attempt
                   opencode_run_task opencode_send_message) ],
              '... and lists the nine tools') or diag($out);

    ($rc, $out, $err) = $c->sh(snippet('inspector-call'), url => $base, env => \%signer);
    is($rc, 0, 'the doc\'s tools/call line runs') or diag("$out$err");
    $j = json_decode($out);
    ok(ref $j eq 'HASH' && !$j->{isError} && ref $j->{structuredContent}{runs} eq 'ARRAY',
       '... and opencode_list_runs answers') or diag($out);
};

$t->done;
