#!/usr/bin/perl

# Authentication and isolation of ngx_sandbox_mcp_module: bearer JWT checks
# (missing, malformed, bad signature, expired, wrong alg, wrong scope),
# Host/Origin checks (DNS rebinding), tenant isolation of sessions and runs,
# and no secret in error.log.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_encode json_decode b64url pong_ok);

my $t = SMCP::Test->new(
    workers => 2,
    server  => q{
        location /strict {
            sandbox_mcp;
            sandbox_mcp_allowed_hosts mcp.example.com 127.0.0.1;
            sandbox_mcp_allowed_origins https://app.example.com;
        }},
);
$t->start;

my $P = 'smcp:';
my $port = $t->port;
my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };
my @tokens_used;

sub tok { my $x = $t->token(@_); push @tokens_used, $x; return $x }

sub is_jsonrpc_error {
    my ($r, $status, $name) = @_;
    subtest $name => sub {
        is($r->{status}, $status, "HTTP $status");
        like($r->{headers}{'content-type'} // '', qr{^application/json},
             'Content-Type application/json');
        my $j = $r->{json};
        ok(ref $j eq 'HASH' && ref $j->{error} eq 'HASH', 'JSON-RPC error body')
            or diag($r->{body});
        is(ref $j eq 'HASH' && ref $j->{error} eq 'HASH' ? $j->{error}{code} : undef,
           -32000, 'code -32000');
        ok(ref $j eq 'HASH' && exists $j->{id} && !defined $j->{id}, 'id null');
    };
}

sub is_401 {
    my ($r, $name, %o) = @_;
    subtest "$name -> 401" => sub {
        is_jsonrpc_error($r, 401, 'error body');
        my $wa = $r->{headers}{'www-authenticate'} // '';
        like($wa, qr/^Bearer\b/, 'WWW-Authenticate: Bearer');
        like($wa, qr/realm="sandbox-mcp"/, 'realm="sandbox-mcp"');
        if ($o{invalid}) {
            like($wa, qr/error="invalid_token"/, 'error="invalid_token"');
        } elsif (defined $o{invalid}) {
            unlike($wa, qr/error=/, 'no error= when no token was sent');
        }
    };
}

# a valid session for alice
my ($sid, $ir) = $t->initialize(token => tok());
ok($sid, 'alice has a session') or diag($ir->{body});

###############################################################################
# bearer token checks

{
    # no token at all
    is_401($t->mcp_post($ping, session => $sid, token => undef),
           'no Authorization header', invalid => 0);
    my $r = $t->mcp_post($t->request_msg('initialize', {
            protocolVersion => '2025-11-25', capabilities => {},
            clientInfo => { name => 'x', version => '1' } }), token => undef);
    is_401($r, 'initialize without token', invalid => 0);
    ok(!defined $r->{headers}{'mcp-session-id'}, 'no session created');

    # other schemes / empty
    for my $h ('Basic YWxpY2U6cGFzcw==', 'Bearer', 'Bearer ', 'Token ' . tok()) {
        is_401($t->mcp_post($ping, session => $sid, token => undef,
                            headers => [ Authorization => $h ]),
               "Authorization: '" . substr($h, 0, 12) . "'");
    }

    # malformed tokens
    my $good = tok();
    my ($h, $p, $s) = split /\./, $good;
    for my $case (
        [ 'garbage',                       'abc' ],
        [ 'two parts',                     "$h.$p" ],
        [ 'four parts',                    "$good.x" ],
        [ 'empty signature',               "$h.$p." ],
        [ 'non-base64 header',             "!!!.$p.$s" ],
        [ 'header not JSON',               b64url('nope') . ".$p.$s" ],
        [ 'payload not JSON',              $t->token(payload => 'nope') ],
        [ 'payload a JSON array',          $t->token(payload => '[1,2]') ],
        [ 'huge token',                    'a' x 5000 . ".$p.$s" ],
    ) {
        push @tokens_used, $case->[1];
        is_401($t->mcp_post($ping, session => $sid, token => $case->[1]),
               "malformed token ($case->[0])", invalid => 1);
    }

    # signature
    is_401($t->mcp_post($ping, session => $sid,
                        token => tok(secret => 'not-the-secret')),
           'wrong signature', invalid => 1);
    my $bob = tok(sub => 'bob');
    my (undef, $bp) = split /\./, $bob;
    push @tokens_used, "$h.$bp.$s";
    is_401($t->mcp_post($ping, session => $sid, token => "$h.$bp.$s"),
           'payload swapped under a valid signature', invalid => 1);
    my $flip = $s;
    substr($flip, 5, 1) = substr($flip, 5, 1) eq 'A' ? 'B' : 'A';
    push @tokens_used, "$h.$p.$flip";
    is_401($t->mcp_post($ping, session => $sid, token => "$h.$p.$flip"),
           'one signature character changed', invalid => 1);

    # claims
    is_401($t->mcp_post($ping, session => $sid, token => tok(exp => time() - 5)),
           'expired token', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(exp => undef)),
           'token without exp', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(exp => 'tomorrow')),
           'token with a string exp', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(sub => undef)),
           'token without sub', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(sub => '')),
           'token with empty sub', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(sub => 42)),
           'token with a numeric sub', invalid => 1);

    # algorithms
    is_401($t->mcp_post($ping, session => $sid, token => tok(alg => 'none')),
           'alg none, empty signature', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid,
               token => tok(header => { alg => 'none', typ => 'JWT' })),
           'alg none with an HS256 signature', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(alg => 'HS512')),
           'alg HS512', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(alg => 'RS256')),
           'alg RS256 (HMAC-signed with the secret)', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(header => { typ => 'JWT' })),
           'header without alg', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(header => { alg => 'hs256' })),
           'alg hs256 (wrong case)', invalid => 1);

    # scopes
    is_401($t->mcp_post($ping, session => $sid, token => tok(scope => 'ui')),
           'scope ui refused on /mcp', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(scope => 'egress')),
           'scope egress refused on /mcp', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(scope => 'admin')),
           'unknown scope refused', invalid => 1);
    pong_ok($t->mcp_post($ping, session => $sid, token => tok(scope => 'mcp')),
           'scope mcp accepted');
    is_401($t->mcp_post($ping, session => $sid, token => tok(scope => undef)),
           'no scope refused (MCP tokens must say scope mcp)', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(scope => 'MCP')),
           'scope MCP (wrong case) refused', invalid => 1);
    is_401($t->mcp_post($ping, session => $sid, token => tok(scope => ['mcp'])),
           'scope as an array refused', invalid => 1);
    pong_ok($t->mcp_post($ping, session => $sid, token => tok()),
           'the default test token (scope mcp) accepted');
    pong_ok($t->mcp_post($ping, session => $sid,
                        token => tok(exp => time() + 60, iat => undef)),
           'token without iat accepted');
    pong_ok($t->mcp_post($ping, session => $sid, token => undef,
                        headers => [ Authorization => 'bearer ' . tok() ]),
           'auth scheme is case-insensitive ("bearer")');

    # every method needs the token
    $r = $t->http(method => 'GET', path => '/mcp',
                  headers => [ Accept => 'text/event-stream', 'Mcp-Session-Id' => $sid ]);
    is($r->{status}, 401, 'GET without token -> 401 (auth before method)');
    $r = $t->http(method => 'DELETE', path => '/mcp',
                  headers => [ 'Mcp-Session-Id' => $sid ]);
    is($r->{status}, 401, 'DELETE without token -> 401');
    is($t->redis('EXISTS', "${P}mcp:$sid"), 1, 'session still exists');

    # the token CLI mints tokens the module accepts
    my $cli = SMCP::Test::token_tool_path();
    SKIP: {
        skip "$cli not built", 2 unless -x $cli;
        my $ct = `$cli --sub alice --ttl 300 --secret-file @{[ $t->secret_file ]}`;
        chomp $ct;
        push @tokens_used, $ct;
        like($ct, qr/^[\w-]+\.[\w-]+\.[\w-]+$/, 'smcp-token printed a JWT');
        pong_ok($t->mcp_post($ping, session => $sid, token => $ct),
               'smcp-token token accepted');
    }
}

###############################################################################
# sandbox_mcp_secret_env

{
    my $env_secret = 'env-secret-0123456789abcdef';
    local $ENV{SMCP_TEST_SECRET} = $env_secret;
    my $port2 = $t->start_nginx(name => 'envsecret', workers => 1, server => '',
        secret_conf => 'sandbox_mcp_secret_env SMCP_TEST_SECRET;');
    my $etok = tok(secret => $env_secret);
    my ($esid, $r) = $t->initialize(port => $port2, token => $etok);
    ok($esid, 'sandbox_mcp_secret_env: a token signed with the env secret works')
        or diag($r->{body});
    pong_ok($t->mcp_post($ping, session => $esid, port => $port2, token => $etok),
           '... for later requests too');
    is_401($t->mcp_post($ping, session => $esid, port => $port2, token => tok()),
           'sandbox_mcp_secret_env: a token signed with the file secret', invalid => 1);
    $t->stop_nginx('envsecret');
}

###############################################################################
# refused requests have no side effects

{
    my $snap = $t->redis_snapshot;
    my $n = $t->redis('DBSIZE');
    my $init = $t->request_msg('initialize', {
        protocolVersion => '2025-11-25', capabilities => {},
        clientInfo => { name => 'x', version => '1' } });
    $t->mcp_post($init, token => undef);
    $t->mcp_post($init, token => tok(exp => time() - 5));
    $t->mcp_post($init, token => tok(alg => 'none'));
    $t->mcp_post($init, host => 'evil.example.com');
    $t->mcp_post($init, origin => 'http://evil.example.com');
    my $call = $t->request_msg('tools/call', { name => 'opencode_run_task',
                                                arguments => { task => 'sneaky' } });
    $t->mcp_post($call, session => $sid, token => undef);
    $t->mcp_post($call, session => $sid, token => tok(secret => 'wrong-secret-0123456789'));
    $t->mcp_post($call, session => $sid, token => tok(scope => 'ui'));
    $t->mcp_post($call, session => $sid, origin => 'http://evil.example.com');
    $t->http(method => 'DELETE', path => '/mcp',
             headers => [ 'Mcp-Session-Id' => $sid ]);
    $t->http(method => 'DELETE', path => '/mcp',
             headers => [ 'Mcp-Session-Id' => $sid, Authorization => 'Bearer x.y.z' ]);
    select(undef, undef, undef, 0.3);
    is($t->redis('DBSIZE'), $n, 'refused requests: DBSIZE unchanged');
    is_deeply($t->redis_snapshot, $snap, 'refused requests: nothing written to Redis')
        or diag(join ' ', $t->redis_keys);
    is($t->redis('EXISTS', "${P}mcp:$sid"), 1, 'the session survived refused DELETEs');
    my $acc = $t->read_file('access.log');
    my @lines = grep { /POST \/mcp|DELETE \/mcp/ } split /\n/, $acc;
    my @last = @lines[-11 .. -1];
    is(scalar(grep { / (401|403) \d+ / } @last), 11,
       'access.log records 401/403 for all of them (no second response)')
        or diag(join "\n", @last);
}

###############################################################################
# Host and Origin (before auth)

{
    my $r = $t->mcp_post($ping, session => $sid, host => 'evil.example.com');
    is_jsonrpc_error($r, 403, 'Host evil.example.com -> 403');
    $r = $t->mcp_post($ping, session => $sid, host => "evil.example.com:$port");
    is($r->{status}, 403, 'Host evil.example.com:port -> 403');
    $r = $t->mcp_post($ping, session => $sid, host => 'evil.example.com', token => undef);
    is($r->{status}, 403, 'Host checked before the token (403, not 401)');
    $r = $t->mcp_post($ping, session => $sid, host => 'localhost.evil.com');
    is($r->{status}, 403, 'Host localhost.evil.com -> 403');
    $r = $t->mcp_post($ping, session => $sid, host => '127.0.0.1.nip.io');
    is($r->{status}, 403, 'Host 127.0.0.1.nip.io -> 403');

    for my $h ("localhost:$port", 'localhost', "127.0.0.1:$port", '127.0.0.1',
               "[::1]:$port", '[::1]') {
        pong_ok($t->mcp_post($ping, session => $sid, host => $h), "Host $h allowed");
    }

    for my $o ('http://evil.example.com', "http://evil.example.com:$port",
               'http://localhost.evil.com', 'https://127.0.0.1.evil.com',
               'null', 'file://', 'http://localhost@evil.com') {
        $r = $t->mcp_post($ping, session => $sid, origin => $o);
        is_jsonrpc_error($r, 403, "Origin $o -> 403");
    }
    $r = $t->mcp_post($ping, session => $sid, origin => 'http://evil.example.com',
                      token => undef);
    is($r->{status}, 403, 'Origin checked before the token');

    for my $o ("http://localhost:$port", 'http://localhost:3000', 'http://localhost',
               "http://127.0.0.1:$port", 'https://127.0.0.1', "http://[::1]:$port") {
        pong_ok($t->mcp_post($ping, session => $sid, origin => $o), "Origin $o allowed");
    }
    pong_ok($t->mcp_post($ping, session => $sid), 'no Origin allowed');

    # explicit lists on /strict
    my ($ssid) = $t->initialize(path => '/strict', token => tok());
    ok($ssid, 'session on /strict');
    pong_ok($t->mcp_post($ping, session => $ssid, path => '/strict',
                        host => 'mcp.example.com', origin => 'https://app.example.com'),
           'configured host and origin allowed');
    $r = $t->mcp_post($ping, session => $ssid, path => '/strict', host => 'localhost');
    is($r->{status}, 403, 'sandbox_mcp_allowed_hosts replaces the default list');
    $r = $t->mcp_post($ping, session => $ssid, path => '/strict',
                      origin => "http://127.0.0.1:$port");
    is($r->{status}, 403, 'sandbox_mcp_allowed_origins replaces the default list');
    $r = $t->mcp_post($ping, session => $ssid, path => '/strict',
                      origin => 'http://app.example.com');
    is($r->{status}, 403, 'origin scheme must match');
    $r = $t->mcp_post($ping, session => $ssid, path => '/strict',
                      origin => 'https://app.example.com:8443');
    is($r->{status}, 403, 'origin port must match');
}

###############################################################################
# tenant isolation

my $bob_tok = tok(sub => 'bob');
my ($bob_sid) = $t->initialize(token => $bob_tok);
ok($bob_sid, 'bob has a session');

{
    # alice's MCP session with bob's token
    my $r = $t->mcp_post($ping, session => $sid, token => $bob_tok);
    is($r->{status}, 404, "bob cannot use alice's MCP session (404)");
    is($r->{json}{error}{code}, -32001, '-32001 Session not found');
    $r = $t->http(method => 'DELETE', path => '/mcp',
        headers => [ Authorization => "Bearer $bob_tok", 'Mcp-Session-Id' => $sid ]);
    is($r->{status}, 404, "bob cannot DELETE alice's MCP session");
    is($t->redis('EXISTS', "${P}mcp:$sid"), 1, "alice's session kept");
    pong_ok($t->mcp_post($ping, session => $sid), 'alice still uses it');
}

# alice starts a run
my $res = $t->call_tool($sid, 'opencode_run_task',
                        { task => 'print hello', title => 'alice run' });
my $sc = SMCP::Test::sc($res) || {};
my $run = $sc->{runId};
my $alice_ses = $sc->{sessionId};
like($run // '', qr/^run_[0-9a-f]{24}$/, 'alice started a run')
    or diag(json_encode($res));
$run //= 'run_000000000000000000000000';
my $before = $t->redis_hgetall("${P}run:$run");

{
    my $ghost = 'run_' . join('', map { sprintf '%x', int rand 16 } 1 .. 24);
    my @cases = (
        [ 'opencode_get_result', {} ],
        [ 'opencode_get_result', { waitSeconds => 1 } ],
        [ 'opencode_cancel_run', {} ],
        [ 'opencode_get_diff',   {} ],
        [ 'opencode_get_events', {} ],
    );
    for my $c (@cases) {
        my ($tool, $extra) = @$c;
        my $other = $t->call_tool($bob_sid, $tool, { runId => $run, %$extra },
                                  token => $bob_tok);
        my $none = $t->call_tool($bob_sid, $tool, { runId => $ghost, %$extra },
                                 token => $bob_tok);
        my $a = json_encode($other);
        my $b = json_encode($none);
        $a =~ s/\Q$run\E/RUNID/g;
        $b =~ s/\Q$ghost\E/RUNID/g;
        subtest "$tool on another tenant's run == nonexistent run" => sub {
            ok(SMCP::Test::is_error_result($other), 'isError true');
            like(SMCP::Test::result_text($other), qr/run not found/i, '"run not found"');
            is($a, $b, 'identical responses (id replaced)');
            unlike($a, qr/alice|print hello/, "nothing of alice's run leaks");
        };
    }
    is_deeply($t->redis_hgetall("${P}run:$run"), $before,
              "alice's run unchanged by bob's cancel attempt");
    is($t->redis('EXISTS', "${P}run:$ghost"), 0, 'no key created for the ghost id');

    # alice's own view still works
    my $mine = $t->call_tool($sid, 'opencode_get_result', { runId => $run });
    ok(!SMCP::Test::is_error_result($mine), 'alice reads her run')
        or diag(json_encode($mine));

    # bob's list does not show it
    my $list = $t->call_tool($bob_sid, 'opencode_list_runs', {}, token => $bob_tok);
    my $runs = (SMCP::Test::sc($list) || {})->{runs} || [];
    ok(!grep({ $_->{runId} eq $run } @$runs), "alice's run not in bob's list");
    $list = $t->call_tool($bob_sid, 'opencode_list_runs',
                          { sessionId => $alice_ses // 'ses_x' }, token => $bob_tok);
    $runs = (SMCP::Test::sc($list) || {})->{runs} || [];
    ok(!@$runs, "bob filtering on alice's sessionId sees nothing");

    # bob cannot add a run to alice's (run) session
    my $snap = $t->redis_snapshot;
    my $r = $t->call_tool($bob_sid, 'opencode_run_task',
                          { task => 'steal', sessionId => $alice_ses // 'ses_x' },
                          token => $bob_tok);
    ok(SMCP::Test::is_error_result($r), "run_task on alice's sessionId -> isError");
    is_deeply($t->redis_snapshot, $snap, 'nothing written to Redis');
}

###############################################################################
# no secret in error.log (nor in any response)

{
    my $log = $t->error_log;
    my $secret = $t->secret;
    unlike($log, qr/\Q$secret\E/, 'secret not in error.log');
    my @leaks;
    for my $tk (@tokens_used) {
        next unless length $tk > 20;
        my (undef, undef, $sig) = split /\./, $tk;
        push @leaks, $tk if index($log, $tk) >= 0;
        push @leaks, "sig of $tk" if defined $sig && length $sig > 10
                                   && index($log, $sig) >= 0;
    }
    ok(!@leaks, 'no token (or signature) in error.log')
        or diag(join "\n", @leaks[0 .. ($#leaks > 5 ? 5 : $#leaks)]);
    my $acc = $t->read_file('access.log');
    unlike($acc, qr/\Q$secret\E/, 'secret not in access.log');
}

$t->done;
