#!/usr/bin/perl

# MCP Streamable HTTP transport of ngx_sandbox_mcp_module: version
# negotiation, sessions in Redis, HTTP status mapping, JSON-RPC validation,
# batches, tools/list and its pagination, sessions across workers and
# across nginx instances sharing one Redis.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_encode json_decode pong_ok rhex);

my $t = SMCP::Test->new(
    workers => 2,
    listen  => 'reuseport',
    http    => q{log_format smcp '$pid $request_method $uri $status $http_mcp_session_id';
    access_log %%DIR%%/pid.log smcp;},
    server  => q{
        location /paged {
            sandbox_mcp;
            sandbox_mcp_page_size 4;
            sandbox_mcp_max_body 1k;
            sandbox_mcp_session_ttl 100s;
        }},
);
$t->start;

my $P = 'smcp:';
my @VERSIONS = qw(2025-11-25 2025-06-18 2025-03-26);
my @TOOLS = sort qw(opencode_run_task opencode_get_result opencode_list_runs
                    opencode_cancel_run opencode_get_diff opencode_get_events
                    opencode_list_sessions opencode_send_message
                    opencode_pick_attempt);

# expect an HTTP status + JSON-RPC error code in a JSON body
sub rpc_error_is {
    my ($r, $status, $code, $name) = @_;
    subtest $name => sub {
        is($r->{status}, $status, "HTTP $status");
        like($r->{headers}{'content-type'} // '', qr{^application/json},
             'Content-Type application/json');
        my $j = $r->{json};
        ok(ref $j eq 'HASH', 'JSON object body')
            or diag("body: $r->{body}");
        is($j->{jsonrpc}, '2.0', 'jsonrpc 2.0') if ref $j eq 'HASH';
        is(ref $j eq 'HASH' && ref $j->{error} eq 'HASH' ? $j->{error}{code} : undef,
           $code, "error code $code");
        ok(ref $j eq 'HASH' && ref $j->{error} eq 'HASH'
           && defined $j->{error}{message} && length $j->{error}{message},
           'error message present');
    };
}

###############################################################################
# initialize and version negotiation

my %sid;    # version => session id
for my $v (@VERSIONS, '2024-11-05', '1999-01-01') {
    my $expect = (grep { $_ eq $v } @VERSIONS) ? $v : '2025-11-25';
    my $id = $t->next_id;
    my $r = $t->mcp_post({
        jsonrpc => '2.0', id => $id, method => 'initialize',
        params => { protocolVersion => $v, capabilities => {},
                    clientInfo => { name => 'perl', version => '1' } },
    });
    subtest "initialize $v" => sub {
        is($r->{status}, 200, 'HTTP 200') or diag($r->{body});
        like($r->{headers}{'content-type'} // '', qr{^application/json},
             'Content-Type application/json');
        my $j = $r->{json} || {};
        is($j->{jsonrpc}, '2.0', 'jsonrpc');
        is($j->{id}, $id, 'id echoed');
        is($j->{result}{protocolVersion}, $expect, "negotiated $expect");
        is($j->{result}{serverInfo}{name}, 'sandbox-mcp', 'serverInfo.name');
        ok(defined $j->{result}{serverInfo}{version}, 'serverInfo.version');
        is(ref $j->{result}{capabilities}{tools}, 'HASH', 'capabilities.tools');
        my $sid = $r->{headers}{'mcp-session-id'};
        like($sid // '', qr/^[0-9a-f]{64}$/, 'Mcp-Session-Id is 64 hex');
        if ($sid) {
            is($t->redis('EXISTS', "${P}mcp:$sid"), 1, 'session stored in Redis');
            my $ttl = $t->redis('TTL', "${P}mcp:$sid");
            ok($ttl > 0 && $ttl <= 86400, "session has a TTL ($ttl)");
        }
        $sid{$v} = $sid;
    };
}
isnt($sid{'2025-11-25'}, $sid{'2025-06-18'}, 'session ids differ');

my $sid = $sid{'2025-11-25'};
my $sid0326 = $sid{'2025-03-26'};
my $sid0618 = $sid{'2025-06-18'};

# initialize on an existing session
{
    my $r = $t->mcp_post($t->request_msg('initialize', {
        protocolVersion => '2025-11-25', capabilities => {},
        clientInfo => { name => 'perl', version => '1' } }), session => $sid);
    rpc_error_is($r, 400, -32600, 'initialize with a session id -> 400 -32600');
}

# notifications and responses only -> 202, empty body
{
    my $r = $t->mcp_post({ jsonrpc => '2.0', method => 'notifications/initialized' },
                         session => $sid);
    is($r->{status}, 202, 'notifications/initialized -> 202');
    is($r->{body}, '', '202 has an empty body');

    $r = $t->mcp_post({ jsonrpc => '2.0', id => 'srv-1', result => {} },
                      session => $sid);
    is($r->{status}, 202, 'a JSON-RPC response from the client -> 202');

    $r = $t->mcp_post({ jsonrpc => '2.0', method => 'notifications/cancelled',
                        params => { requestId => 99 } }, session => $sid);
    is($r->{status}, 202, 'notifications/cancelled -> 202');
}

# ping, id echo (integer and string)
{
    my $r = $t->mcp_post({ jsonrpc => '2.0', id => 7, method => 'ping' },
                         session => $sid);
    pong_ok($r, 'ping -> {}');
    is($r->{json}{id}, 7, 'integer id echoed');
    like($r->{headers}{'content-type'} // '', qr{^application/json}, 'ping Content-Type');

    $r = $t->mcp_post({ jsonrpc => '2.0', id => 'abc-1', method => 'ping' },
                      session => $sid);
    pong_ok($r, 'ping with string id');
    is($r->{json}{id}, 'abc-1', 'string id echoed');

    $r = $t->mcp_post({ jsonrpc => '2.0', id => 0, method => 'ping' },
                      session => $sid);
    pong_ok($r, 'ping with id 0');
    ok(defined $r->{json}{id} && $r->{json}{id} eq '0', 'id 0 echoed');

    $r = $t->mcp_post({ jsonrpc => '2.0', id => 8, method => 'ping' },
                      session => $sid, version => '2025-11-25');
    pong_ok($r, 'ping with MCP-Protocol-Version 2025-11-25');
    $r = $t->mcp_post({ jsonrpc => '2.0', id => 9, method => 'ping' },
                      session => $sid, version => '2025-03-26');
    pong_ok($r, 'any supported MCP-Protocol-Version is accepted');
}

###############################################################################
# HTTP methods

{
    # GET is the session's stream (t/mcp_tasks.t)
    for my $m (qw(PUT PATCH OPTIONS)) {
        my $r = $t->http(method => $m, path => '/mcp', body => '{}',
            headers => [ 'Content-Type' => 'application/json',
                         Accept => 'application/json, text/event-stream',
                         Authorization => 'Bearer ' . $t->token,
                         'Mcp-Session-Id' => $sid ]);
        is($r->{status}, 405, "$m -> 405");
        my $allow = $r->{headers}{allow} // '';
        like($allow, qr/\bGET\b.*\bPOST\b.*\bDELETE\b/, "$m: Allow lists GET, POST, DELETE");
    }
}

###############################################################################
# Accept, Content-Type, body size

{
    my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };
    for my $a ('application/json', 'text/event-stream', undef, 'text/html') {
        my $r = $t->mcp_post($ping, session => $sid, accept => $a);
        is($r->{status}, 406, 'Accept ' . ($a // '(none)') . ' -> 406');
    }
    my $r = $t->mcp_post($ping, session => $sid,
        accept => 'text/event-stream, application/json;q=0.9');
    pong_ok($r, 'Accept listing both in another order is fine');

    for my $ct ('text/plain', undef, 'application/x-www-form-urlencoded') {
        $r = $t->mcp_post($ping, session => $sid, content_type => $ct);
        is($r->{status}, 415, 'Content-Type ' . ($ct // '(none)') . ' -> 415');
    }
    $r = $t->mcp_post($ping, session => $sid,
                      content_type => 'application/json; charset=utf-8');
    pong_ok($r, 'Content-Type application/json; charset=utf-8 accepted');

    # default max body 1m
    my $big = json_encode({ jsonrpc => '2.0', id => 1, method => 'ping',
                            params => { pad => 'x' x (1024 * 1024 + 10) } });
    $r = $t->mcp_post($big, session => $sid);
    is($r->{status}, 413, 'body over 1m -> 413');

    my $almost = json_encode({ jsonrpc => '2.0', id => 1, method => 'ping',
                               params => { pad => 'x' x (1024 * 1000) } });
    $r = $t->mcp_post($almost, session => $sid);
    pong_ok($r, 'body just under 1m is accepted');

    # sandbox_mcp_max_body 1k on /paged
    my ($psid) = $t->initialize(path => '/paged');
    ok($psid, 'session on /paged');
    $r = $t->mcp_post(json_encode({ jsonrpc => '2.0', id => 1, method => 'ping',
                                    params => { pad => 'x' x 2000 } }),
                      session => $psid, path => '/paged');
    is($r->{status}, 413, 'sandbox_mcp_max_body 1k: 2k body -> 413');
    $r = $t->mcp_post(json_encode({ jsonrpc => '2.0', id => 1, method => 'ping',
                                    params => { pad => 'x' x 500 } }),
                      session => $psid, path => '/paged');
    pong_ok($r, 'sandbox_mcp_max_body 1k: 0.5k body accepted');
}

###############################################################################
# keep-alive connections, chunked and slowly arriving bodies

{
    my $req = sub {
        my ($body, %h) = @_;
        return { method => 'POST', path => '/mcp', body => $body,
                 headers => $t->mcp_headers(session => $sid, %h) };
    };
    my $pj = sub { json_encode({ jsonrpc => '2.0', id => $_[0], method => 'ping' }) };

    my @r = $t->http_keepalive(map { $req->($pj->($_)) } 1 .. 5);
    is(scalar(grep { $_->{status} == 200 && ref $_->{json}{result} eq 'HASH' } @r), 5,
       'five pings on one keep-alive connection');
    ok(!grep({ $_->{closed} } @r[0 .. 3]), 'the connection stayed open');

    @r = $t->http_keepalive(
        $req->($pj->(1), accept => 'text/html'),
        $req->('{bad json'),
        $req->($pj->(3), version => 'garbage'),
        $req->(json_encode({ jsonrpc => '2.0', method => 'notifications/initialized' })),
        $req->(json_encode($t->request_msg('tools/list'))),
        $req->($pj->(6)),
    );
    is(join(',', map { $_->{status} } @r), '406,400,400,202,200,200',
       'errors, a 202 and results in turn on one keep-alive connection');

    @r = $t->http_keepalive(
        $req->($pj->(1), token => undef),
        $req->($pj->(2)),
    );
    is(join(',', map { $_->{status} } @r), '401,200', 'a 401 then a ping on one connection');

    # chunked request body
    my $body = $pj->(77);
    my $chunked = sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n",
        10, substr($body, 0, 10), length($body) - 10, substr($body, 10));
    my $r = $t->http(method => 'POST', path => '/mcp', body => $chunked,
        headers => [ @{ $t->mcp_headers(session => $sid) },
                     'Transfer-Encoding' => 'chunked' ]);
    _decode($r);
    pong_ok($r, 'chunked request body');
    is($r->{json}{id}, 77, '... id 77');

    # a body arriving in three pieces
    my $tl = json_encode($t->request_msg('tools/list', {}, 'slow'));
    my $n = int(length($tl) / 3);
    $r = $t->http(method => 'POST', path => '/mcp',
        headers => $t->mcp_headers(session => $sid),
        body_parts => [ substr($tl, 0, $n), substr($tl, $n, $n), substr($tl, 2 * $n) ],
        part_delay => 0.3);
    _decode($r);
    is($r->{status}, 200, 'a body sent in three delayed pieces');
    is(scalar @{ $r->{json}{result}{tools} || [] }, scalar(@TOOLS), '... is read whole');

    # a big body (in a temp file past client_body_buffer_size) in pieces
    my $big = json_encode({ jsonrpc => '2.0', id => 'big', method => 'ping',
                            params => { pad => 'y' x 300_000 } });
    $r = $t->http(method => 'POST', path => '/mcp',
        headers => $t->mcp_headers(session => $sid),
        body_parts => [ substr($big, 0, 100_000), substr($big, 100_000) ],
        part_delay => 0.2);
    _decode($r);
    pong_ok($r, 'a 300 KB body in two delayed pieces');
}

sub _decode {
    my ($r) = @_;
    $r->{json} = length $r->{body} ? json_decode($r->{body}) : undef;
}

###############################################################################
# malformed JSON and invalid JSON-RPC messages

{
    for my $bad ('{"jsonrpc":', '{"jsonrpc":"2.0","id":1,"method":"ping"', 'nope',
                 "\x{ff}\x{fe}", '{"a":1}}') {
        my $r = $t->mcp_post($bad, session => $sid);
        rpc_error_is($r, 400, -32700, "malformed JSON '$bad' -> 400 -32700");
        ok(ref $r->{json} eq 'HASH' && exists $r->{json}{id}
           && !defined $r->{json}{id}, 'parse error has id null');
    }
    my $r = $t->mcp_post('', session => $sid);
    is($r->{status}, 400, 'empty body -> 400');

    for my $bad (
        '42', '"str"', 'null', 'true', '{}',
        '{"jsonrpc":"1.0","id":1,"method":"ping"}',
        '{"id":1,"method":"ping"}',
        '{"jsonrpc":2,"id":1,"method":"ping"}',
        '{"jsonrpc":"2.0","id":1,"method":5}',
        '{"jsonrpc":"2.0","id":1,"method":null}',
        '{"jsonrpc":"2.0","id":{},"method":"ping"}',
        '{"jsonrpc":"2.0","id":[1],"method":"ping"}',
        '{"jsonrpc":"2.0","id":true,"method":"ping"}',
        '{"jsonrpc":"2.0","id":null,"method":"ping"}',
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":5}',
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}',
        '{"jsonrpc":"2.0","id":1}',
    ) {
        my $r = $t->mcp_post($bad, session => $sid);
        rpc_error_is($r, 400, -32600, "invalid JSON-RPC $bad -> 400 -32600");
    }

    $r = $t->mcp_post('[]', session => $sid0326);
    rpc_error_is($r, 400, -32600, 'empty batch -> 400 -32600 (2025-03-26)');
}

###############################################################################
# batches

{
    my $batch = [
        { jsonrpc => '2.0', id => 1, method => 'ping' },
        { jsonrpc => '2.0', method => 'notifications/initialized' },
        { jsonrpc => '2.0', id => 'two', method => 'ping' },
        { jsonrpc => '2.0', id => 3, method => 'no/such/method' },
    ];
    my $r = $t->mcp_post($batch, session => $sid0326);
    is($r->{status}, 200, 'batch on a 2025-03-26 session -> 200')
        or diag($r->{body});
    my $j = $r->{json};
    is(ref $j, 'ARRAY', 'batch answer is an array');
    if (ref $j eq 'ARRAY') {
        is(scalar @$j, 3, 'three responses (none for the notification)');
        my %by = map { (defined $_->{id} ? $_->{id} : 'null') => $_ } @$j;
        ok($by{1} && ref $by{1}{result} eq 'HASH', 'response for id 1');
        ok($by{two} && ref $by{two}{result} eq 'HASH', 'response for id "two"');
        is($by{3} && $by{3}{error}{code}, -32601, 'id 3: method not found');
    }

    $r = $t->mcp_post([ { jsonrpc => '2.0', method => 'notifications/initialized' } ],
                      session => $sid0326);
    is($r->{status}, 202, 'batch of notifications only -> 202');

    $r = $t->mcp_post([ { jsonrpc => '2.0', id => 1, method => 'ping' } ],
                      session => $sid0326, version => '2025-03-26');
    is($r->{status}, 200, 'batch with header 2025-03-26 -> 200');

    for my $v ('2025-06-18', '2025-11-25') {
        $r = $t->mcp_post([ { jsonrpc => '2.0', id => 1, method => 'ping' } ],
                          session => $sid{$v});
        rpc_error_is($r, 400, -32600, "batch on a $v session -> 400 -32600");
    }

    # effective version = header, else the session's
    $r = $t->mcp_post([ { jsonrpc => '2.0', id => 1, method => 'ping' } ],
                      session => $sid0326, version => '2025-06-18');
    rpc_error_is($r, 400, -32600,
                 '2025-03-26 session, header 2025-06-18: batch refused');
    # the header cannot switch batches on in a later version's session
    $r = $t->mcp_post([ { jsonrpc => '2.0', id => 1, method => 'ping' } ],
                      session => $sid, version => '2025-03-26');
    rpc_error_is($r, 400, -32600,
                 '2025-11-25 session, header 2025-03-26: batch refused');
    like($r->{json}{error}{message} // '', qr/negotiated/,
         '... saying batches need a negotiated 2025-03-26');

    # at most 32 messages
    my @pings = map { { jsonrpc => '2.0', id => $_, method => 'ping' } } 1 .. 33;
    $r = $t->mcp_post([ @pings[0 .. 31] ], session => $sid0326);
    is($r->{status}, 200, 'batch of 32 -> 200');
    is(ref $r->{json} eq 'ARRAY' ? scalar @{ $r->{json} } : 0, 32, '... 32 answers');
    $r = $t->mcp_post(\@pings, session => $sid0326);
    rpc_error_is($r, 400, -32600, 'batch of 33 -> 400 -32600');
    like($r->{json}{error}{message} // '', qr/at most 32/, '... saying the limit');
    my @calls = map { { jsonrpc => '2.0', id => $_, method => 'tools/call',
                        params => { name => 'opencode_run_task',
                                    arguments => { task => "b$_" } } } } 1 .. 1000;
    my $before = $t->redis('DBSIZE');
    $r = $t->mcp_post(\@calls, session => $sid0326);
    rpc_error_is($r, 400, -32600, 'batch of 1000 run_task calls -> 400 -32600');
    is($t->redis('DBSIZE'), $before, '... and nothing written');
}

###############################################################################
# MCP-Protocol-Version header

for my $bad ('2024-01-01', 'garbage', '2025-11-25x', '') {
    my $r = $t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                         session => $sid, version => $bad);
    next if $bad eq '' && $r->{status} == 200;   # empty header: ignorable
    rpc_error_is($r, 400, -32000, "MCP-Protocol-Version '$bad' -> 400 -32000");
}

###############################################################################
# sessions: missing, unknown, deleted, expired

{
    my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };
    my $r = $t->mcp_post($ping);
    rpc_error_is($r, 400, -32000, 'no Mcp-Session-Id -> 400 -32000');

    $r = $t->mcp_post($t->request_msg('tools/list'));
    rpc_error_is($r, 400, -32000, 'tools/list without session -> 400');

    my $unknown = rhex(32);
    $r = $t->mcp_post($ping, session => $unknown);
    rpc_error_is($r, 404, -32001, 'unknown session -> 404 -32001');
    like($r->{json}{error}{message} // '', qr/Session not found/i,
         '"Session not found"');

    $r = $t->mcp_post($ping, session => 'not-hex-at-all');
    is($r->{status}, 404, 'malformed session id -> 404');

    # a key that exists in Redis but is not a session: still 404
    $r = $t->mcp_post($ping, session => "../run:x");
    is($r->{status}, 404, 'path-like session id refused: 404');

    # DELETE
    my ($s2) = $t->initialize;
    ok($s2, 'another session');
    pong_ok($t->mcp_post($ping, session => $s2), 'it works');
    $r = $t->http(method => 'DELETE', path => '/mcp',
        headers => [ Authorization => 'Bearer ' . $t->token,
                     'Mcp-Session-Id' => $s2 ]);
    is($r->{status}, 200, 'DELETE -> 200');
    is($t->redis('EXISTS', "${P}mcp:$s2"), 0, 'session key removed from Redis');
    $r = $t->mcp_post($ping, session => $s2);
    rpc_error_is($r, 404, -32001, 'deleted session -> 404');
    $r = $t->http(method => 'DELETE', path => '/mcp',
        headers => [ Authorization => 'Bearer ' . $t->token,
                     'Mcp-Session-Id' => $s2 ]);
    is($r->{status}, 404, 'DELETE of a deleted session -> 404');
    $r = $t->http(method => 'DELETE', path => '/mcp',
        headers => [ Authorization => 'Bearer ' . $t->token ]);
    is($r->{status}, 400, 'DELETE without session -> 400');

    # expiry (key gone from Redis)
    my ($s3) = $t->initialize;
    $t->redis('DEL', "${P}mcp:$s3");
    $r = $t->mcp_post($ping, session => $s3);
    rpc_error_is($r, 404, -32001, 'expired session -> 404');

    # TTL from sandbox_mcp_session_ttl and refreshed on use
    my ($s4) = $t->initialize(path => '/paged');
    my $ttl = $t->redis('TTL', "${P}mcp:$s4");
    ok($ttl > 0 && $ttl <= 100, "sandbox_mcp_session_ttl 100s ($ttl)");
    $t->redis('EXPIRE', "${P}mcp:$s4", 5);
    pong_ok($t->mcp_post($ping, session => $s4, path => '/paged'), 'ping on /paged');
    $ttl = $t->redis('TTL', "${P}mcp:$s4");
    ok($ttl > 50, "session TTL refreshed on use ($ttl)");
}

###############################################################################
# unknown method, tools/list, tools/call on an unknown tool

{
    my $r = $t->rpc($sid, 'no/such/method', {});
    is($r->{status}, 200, 'unknown method: HTTP 200');
    is($r->{json}{error}{code}, -32601, 'unknown method -> -32601');
    ok(defined $r->{json}{id}, 'id echoed on -32601');

    $r = $t->rpc($sid, 'prompts/list', {});
    is($r->{json}{error}{code}, -32601, 'prompts/list (no capability) -> -32601');

    $r = $t->rpc($sid, 'tools/list', {});
    is($r->{status}, 200, 'tools/list 200');
    my $tools = $r->{json}{result}{tools};
    is(ref $tools, 'ARRAY', 'tools array');
    $tools = [] unless ref $tools eq 'ARRAY';
    is_deeply([ sort map { $_->{name} } @$tools ], \@TOOLS, 'the ' . @TOOLS . ' tools');
    ok(!defined $r->{json}{result}{nextCursor}, 'no nextCursor with default page size');
    for my $tool (@$tools) {
        subtest "tool $tool->{name}" => sub {
            ok(defined $tool->{description} && length($tool->{description}) > 10,
               'description');
            is(ref $tool->{inputSchema}, 'HASH', 'inputSchema object');
            is($tool->{inputSchema}{type}, 'object', 'inputSchema type object');
            is(ref $tool->{inputSchema}{properties}, 'HASH', 'inputSchema properties');
            is(ref $tool->{outputSchema}, 'HASH', 'outputSchema object');
            is($tool->{outputSchema}{type}, 'object', 'outputSchema type object');
        };
    }
    my ($run) = grep { $_->{name} eq 'opencode_run_task' } @$tools;
    if ($run) {
        ok(grep({ $_ eq 'task' } @{ $run->{inputSchema}{required} || [] }),
           'run_task requires task');
        for my $a (qw(task repository branch sessionId model title
                      createPullRequest timeoutSeconds)) {
            ok(exists $run->{inputSchema}{properties}{$a}, "run_task has $a");
        }
    }

    $r = $t->rpc($sid, 'tools/call', { name => 'no_such_tool', arguments => {} });
    is($r->{json}{error}{code}, -32602, 'unknown tool -> -32602');

    $r = $t->rpc($sid, 'tools/call', { arguments => {} });
    ok($r->{json}{error} && $r->{json}{error}{code} == -32602,
       'tools/call without name -> -32602');
}

###############################################################################
# tools/list pagination (sandbox_mcp_page_size 4 on /paged)

{
    my ($psid) = $t->initialize(path => '/paged');
    my $r = $t->rpc($psid, 'tools/list', {}, path => '/paged');
    my $res = $r->{json}{result} || {};
    is(scalar @{ $res->{tools} || [] }, 4, 'first page has 4 tools');
    my $cursor = $res->{nextCursor};
    ok(defined $cursor && !ref $cursor && length $cursor, 'nextCursor string');
    my @names = map { $_->{name} } @{ $res->{tools} || [] };

    # the pages after it: 4 tools each, the last the rest, without a cursor
    my $pages = 1;
    while (defined $cursor && $pages < 10) {
        $r = $t->rpc($psid, 'tools/list', { cursor => $cursor }, path => '/paged');
        $res = $r->{json}{result} || {};
        $pages++;
        my $want = @TOOLS - 4 * ($pages - 1) > 4 ? 4 : @TOOLS - 4 * ($pages - 1);
        is(scalar @{ $res->{tools} || [] }, $want, "page $pages has $want tools");
        push @names, map { $_->{name} } @{ $res->{tools} || [] };
        $cursor = $res->{nextCursor};
    }
    is($pages, int((@TOOLS + 3) / 4), 'no nextCursor on the last page');
    is_deeply([ sort @names ], \@TOOLS, 'pages cover every tool once');

    for my $bad ('bogus!!', 'ZZZZ', '999', '') {
        $r = $t->rpc($psid, 'tools/list', { cursor => $bad }, path => '/paged');
        is($r->{json}{error}{code}, -32602, "bad cursor '$bad' -> -32602");
    }
    $r = $t->rpc($psid, 'tools/list', { cursor => 5 }, path => '/paged');
    is($r->{json}{error}{code}, -32602, 'non-string cursor -> -32602');

    # the session of /mcp works on /paged too (same Redis)
    pong_ok($t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                         session => $sid, path => '/paged'),
            'session usable on another location');
}

###############################################################################
# a session is served by any worker

{
    my @w = $t->worker_pids;
    is(scalar @w, 2, 'two workers');
    my $bad = 0;
    for my $i (1 .. 60) {
        my $r = $t->mcp_post({ jsonrpc => '2.0', id => $i, method => 'ping' },
                             session => $sid);
        $bad++ unless $r->{status} == 200 && ref $r->{json}{result} eq 'HASH';
    }
    is($bad, 0, '60 pings on new connections all succeed');
    my %pids;
    for (split /\n/, $t->read_file('pid.log')) {
        my ($pid, $m, $uri, $st, $s) = split / /;
        $pids{$pid}++ if ($s // '') eq $sid && $st == 200;
    }
    ok(keys(%pids) >= 2, 'the session was served by both workers ('
       . join(',', sort keys %pids) . ')');
}

###############################################################################
# a second nginx instance sharing the Redis

{
    my $port2 = $t->start_nginx(name => 'second', workers => 1, listen => '');
    my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };
    pong_ok($t->mcp_post($ping, session => $sid, port => $port2),
            'session from instance 1 works on instance 2');
    my $r = $t->rpc($sid, 'tools/list', {}, port => $port2);
    is(scalar @{ $r->{json}{result}{tools} || [] }, scalar(@TOOLS), 'tools/list on instance 2');

    my ($s5) = $t->initialize(port => $port2);
    ok($s5, 'session created on instance 2');
    pong_ok($t->mcp_post($ping, session => $s5), 'and used on instance 1');

    $r = $t->http(method => 'DELETE', path => '/mcp', port => $port2,
        headers => [ Authorization => 'Bearer ' . $t->token,
                     'Mcp-Session-Id' => $s5 ]);
    is($r->{status}, 200, 'deleted on instance 2');
    $r = $t->mcp_post($ping, session => $s5);
    is($r->{status}, 404, 'gone on instance 1');
}

###############################################################################
# sandbox_mcp_redis unix:/path and sandbox_mcp_redis_prefix

{
    my $port3 = $t->start_nginx(name => 'unixpfx', workers => 1, listen => '',
        redis_addr => 'unix:' . $t->redis_socket,
        http => 'sandbox_mcp_redis_prefix other:;', server => '');
    my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };
    my ($s6, $r) = $t->initialize(port => $port3);
    like($s6 // '', qr/^[0-9a-f]{64}$/, 'session over a unix-socket Redis')
        or diag($r->{body});
    $s6 //= 'none';
    is($t->redis('EXISTS', "other:mcp:$s6"), 1, 'stored under sandbox_mcp_redis_prefix other:');
    is($t->redis('EXISTS', "${P}mcp:$s6"), 0, 'not under smcp:');
    pong_ok($t->mcp_post($ping, session => $s6, port => $port3), 'ping on the prefixed instance');
    $r = $t->mcp_post($ping, session => $sid, port => $port3);
    is($r->{status}, 404, 'a smcp: session is unknown under other:');
    my ($res) = $t->call_tool($s6, 'opencode_run_task', { task => 'prefixed' }, port => $port3);
    my $run = (SMCP::Test::sc($res) || {})->{runId} // 'none';
    is($t->redis('EXISTS', "other:run:$run"), 1, 'run hash under other:');
    ok($t->redis('XLEN', 'other:queue') >= 1, 'queue under other:');
    is($t->redis('EXISTS', "${P}run:$run"), 0, 'nothing under smcp:');
    $t->stop_nginx('unixpfx');
}

###############################################################################
# reload keeps sessions (state is in Redis)

{
    ok($t->reload, 'nginx reloaded (new workers)');
    pong_ok($t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                         session => $sid), 'session survives a reload');
}

$t->done;
