#!/usr/bin/perl

# A hostile tenant gets nothing: repository grants in the token (the
# "repos" claim), quotas on queued runs, cost caps, retention and session
# expiry, token scope and revocation, batch limits.  Every refusal leaves
# Redis as it was.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode json_decode now_ms wait_until tool_ok tool_err);

my $t = SMCP::Test->new(
    workers  => 2,
    location => q{
            sandbox_mcp_run_timeout_max 2h;},
    server => q{
        location /q {
            sandbox_mcp;
            sandbox_mcp_max_queued 3;
            sandbox_mcp_max_running 2;
        }
        location /cost {
            sandbox_mcp;
            sandbox_mcp_max_cost_usd 2.50;
        }
        location /ret {
            sandbox_mcp;
            sandbox_mcp_retention 2d;
            sandbox_mcp_session_idle 1h;
            sandbox_mcp_run_timeout_max 3h;
        }
        location /nocap {
            sandbox_mcp;
            sandbox_mcp_max_cost_usd 0;
        }},
);
$t->start;

my $P = 'smcp:';

###############################################################################
# helpers

# a call that must be refused and change nothing in Redis
sub refused {
    my ($sid, $tool, $args, $re, $name, %o) = @_;
    my $sent = delete $o{sent};
    my $before = $t->redis_snapshot;
    my $out = $sent ? redis_out_bytes() : 0;
    my $res = $t->call_tool($sid, $tool, $args, %o);
    $$sent = redis_out_bytes() - $out if $sent;
    tool_err($res, $re, $name);
    is_deeply($t->redis_snapshot, $before, "$name: Redis unchanged");
    return $res;
}

sub redis_out_bytes {
    my $info = $t->redis('INFO', 'stats');
    return $info =~ /total_net_output_bytes:(\d+)/ ? $1 : 0;
}

sub session_for_port {
    my ($tok, $port) = @_;
    my ($sid) = $t->initialize(token => $tok, port => $port);
    ok($sid, 'an MCP session') or SMCP::Test::give_up('no MCP session');
    return $sid;
}

sub session_for {
    my ($tok) = @_;
    my ($sid) = $t->initialize(token => $tok);
    ok($sid, 'an MCP session') or SMCP::Test::give_up('no MCP session');
    return $sid;
}

###############################################################################
# repository grants: the token's "repos" claim

{
    my $gh = 'https://github.com';
    my $tok = $t->token(sub => 'g1', repos => [ 'acme/app', 'tools/*' ]);
    my $sid = session_for($tok);
    my %o = (token => $tok);

    for my $repo ("$gh/acme/app", "$gh/ACME/App.git", "$gh/acme/app/",
                  "$gh/tools/lint", "$gh/Tools/anything.git") {
        tool_ok($t->call_tool($sid, 'opencode_run_task',
                              { task => 't', repository => $repo }, %o),
                "grant acme/app + tools/*: $repo");
    }

    for my $repo ("$gh/acme/app-evil", "$gh/acme/ap", "$gh/acme/other",
                  "$gh/evil/app", "$gh/toolsx/lint", "$gh/acme/app.gitx") {
        refused($sid, 'opencode_run_task', { task => 't', repository => $repo },
                qr{not granted to this token; it may name only: acme/app, tools/\*},
                "grant acme/app + tools/*: $repo refused", %o);
    }

    tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'no repo' }, %o),
            'a run without a repository needs no grant');
}

{
    # no claim: no repository at all
    my $tok = $t->token(sub => 'g2', repos => undef);
    my $sid = session_for($tok);
    refused($sid, 'opencode_run_task',
            { task => 't', repository => 'https://github.com/acme/app' },
            qr/grants no repositories/, 'no repos claim: a repository refused',
            token => $tok);
    refused($sid, 'opencode_run_task',
            { task => 't', repository => 'https://github.com/acme/app',
              createPullRequest => JSON::PP::true },
            qr/grants no repositories/, 'no repos claim: no pull request either',
            token => $tok);
    tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 't' }, token => $tok),
            'no repos claim: a run without a repository');

    $tok = $t->token(sub => 'g2', repos => []);
    $sid = session_for($tok);
    refused($sid, 'opencode_run_task',
            { task => 't', repository => 'https://github.com/acme/app' },
            qr/grants no repositories/, 'repos []: a repository refused',
            token => $tok);

    $tok = $t->token(sub => 'g2', repos => ['*']);
    $sid = session_for($tok);
    tool_ok($t->call_tool($sid, 'opencode_run_task',
                          { task => 't', repository => 'https://github.com/any/thing' },
                          token => $tok), 'repos [*]: any repository');
}

{
    # a claim that is not a list of grants refuses the token itself
    my @bad = (
        [ 'acme/app',                  'a string' ],
        [ { 'acme/app' => 1 },         'an object' ],
        [ [42],                        'a number inside' ],
        [ [undef],                     'null inside' ],
        [ ['acme/a*'],                 'a partial wildcard' ],
        [ ['../x'],                    'a dot-dot owner' ],
        [ ['acme/app', 'x'],           'an entry without a slash' ],
        [ ["acme/app\x{0}"],           'a NUL' ],
        [ ["acme/\x{e9}"],             'a non-ASCII name' ],
        [ [('*') x 257],               '257 entries' ],
    );
    my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };
    for my $c (@bad) {
        my ($repos, $name) = @$c;
        my $r = $t->mcp_post($ping, token => $t->token(sub => 'g3', repos => $repos));
        is($r->{status}, 401, "repos claim $name: 401");
        like($r->{headers}{'www-authenticate'} // '', qr/invalid_token/,
             "repos claim $name: invalid_token");
    }
    my $r = $t->mcp_post($t->request_msg('initialize', {
        protocolVersion => '2025-11-25', capabilities => {},
        clientInfo => { name => 'x', version => '1' } }),
        token => $t->token(sub => 'g3', repos => [('acme/*') x 256]));
    is($r->{status}, 200, 'repos claim with 256 entries accepted');
}

{
    # smcp-token --repos
    my $bin = SMCP::Test::token_tool_path();
    my $sf = $t->secret_file;
    my $tok = `$bin --sub g4 --repos 'acme/app,tools/*' --secret-file $sf`;
    is($? >> 8, 0, 'smcp-token --repos mints a token');
    chomp $tok;
    my (undef, $cl) = SMCP::Test::decode_jwt($tok);
    is_deeply($cl->{repos}, [ 'acme/app', 'tools/*' ], '... with the repos claim');
    is($cl->{scope}, 'mcp', '... scope mcp');
    my $sid = session_for($tok);
    tool_ok($t->call_tool($sid, 'opencode_run_task',
                          { task => 't', repository => 'https://github.com/tools/x' },
                          token => $tok), 'the CLI token names a granted repository');
    refused($sid, 'opencode_run_task',
            { task => 't', repository => 'https://github.com/acme/x' },
            qr/not granted/, 'the CLI token: another repository refused', token => $tok);

    $tok = `$bin --sub g4 --secret-file $sf`;
    chomp $tok;
    (undef, $cl) = SMCP::Test::decode_jwt($tok);
    ok(!exists $cl->{repos}, 'without --repos: no repos claim');

    for my $bad ('acme/a*', 'acme', 'acme/app,', ',acme/app', 'a b/c', '../x') {
        my $out = `$bin --sub g4 --repos '$bad' --secret-file $sf 2>&1`;
        isnt($? >> 8, 0, "smcp-token --repos '$bad' refused");
        unlike($out, qr/^[\w-]+\.[\w-]+\.[\w-]+$/m, '... and prints no token');
    }
}

{
    # a follow-up (sessionId) reaches every repository of its session: it
    # fetches them all, and works on the first (clone, push, pull request)
    # unless it names another.  The token that asks must grant each one,
    # whatever token started the session.
    my $gh = 'https://github.com';
    my %tok = (wide   => $t->token(sub => 'g5', repos => ['*']),
               narrow => $t->token(sub => 'g5', repos => ['acme/app']),
               none   => $t->token(sub => 'g5', repos => undef),
               cased  => $t->token(sub => 'g5', repos => ['ACME/Secret.git']),
               owner  => $t->token(sub => 'g5', repos => ['acme/*']));
    my %sid = map { $_ => session_for($tok{$_}) } sort keys %tok;
    my $call = sub {
        my ($who, $args) = @_;
        my $res = $t->call_tool($sid{$who}, 'opencode_run_task',
                                { task => 't', %$args }, token => $tok{$who});
        return $res;
    };
    my $ses = tool_ok($call->('wide', { repository => "$gh/acme/secret",
                                        createPullRequest => JSON::PP::true() }),
                      'a wide token starts a session on acme/secret')->{sessionId};
    my $wide_run = $t->redis('HGET', "${P}session:$ses", 'last_run');

    my $not_granted = qr{^Session \Q$ses\E works on \Q$gh/acme/secret\E, which this }
                      . 'token does not grant .*start a new session.*; '
                      . 'it may name only: acme/app\.$';
    $not_granted = qr/$not_granted/;
    for my $c ([ 'no repository, a pull request',
                 { sessionId => $ses, createPullRequest => JSON::PP::true() } ],
               [ 'no repository', { sessionId => $ses } ],
               [ 'a branch', { sessionId => $ses, branch => 'feature' } ],
               [ 'naming its granted acme/app',
                 { sessionId => $ses, repository => "$gh/acme/app",
                   createPullRequest => JSON::PP::true() } ]) {
        my ($what, $args) = @$c;
        refused($sid{narrow}, 'opencode_run_task', { task => 't', %$args },
                $not_granted, "a narrow token continuing the wide session, $what",
                token => $tok{narrow});
    }
    refused($sid{none}, 'opencode_run_task', { task => 't', sessionId => $ses },
            qr{works on \Q$gh/acme/secret\E, which this token does not grant.*this token grants no repositories},
            'a token without a repos claim continuing it', token => $tok{none});
    is($t->redis('HGET', "${P}session:$ses", 'last_run'), $wide_run,
       'the session ran nothing for them');

    for my $who (qw(wide cased owner)) {
        my $sc = tool_ok($call->($who, { sessionId => $ses,
                                         createPullRequest => JSON::PP::true() }),
                         "a token granting acme/secret ($who) continues it");
        is($t->redis('HGET', "${P}run:$sc->{runId}", 'repository'), "$gh/acme/secret",
           "... on the session's repository");
    }

    # the session gains acme/app: a token granting only acme/secret is
    # refused now, even naming acme/secret
    tool_ok($call->('wide', { sessionId => $ses, repository => "$gh/acme/app" }),
            'the wide token adds acme/app to the session');
    refused($sid{cased}, 'opencode_run_task',
            { task => 't', sessionId => $ses, repository => "$gh/acme/secret" },
            qr{works on \Q$gh/acme/app\E, which this token does not grant.*it may name only: ACME/Secret\.git\.},
            'a token granting one of its two repositories, naming it',
            token => $tok{cased});
    tool_ok($call->('owner', { sessionId => $ses }), 'acme/* grants both');

    # the narrow token's own session and one without a repository
    my $own = tool_ok($call->('narrow', { repository => "$gh/acme/app" }),
                      'the narrow token starts its own session')->{sessionId};
    tool_ok($call->('narrow', { sessionId => $own,
                                createPullRequest => JSON::PP::true() }),
            '... and continues it');
    my $bare = tool_ok($call->('none', {}), 'a session without a repository')
        ->{sessionId};
    tool_ok($call->('none', { sessionId => $bare }),
            '... continued by a token without a repos claim');
    tool_ok($call->('narrow', { sessionId => $bare, repository => "$gh/acme/app" }),
            '... then by the narrow token naming acme/app');
    refused($sid{none}, 'opencode_run_task', { task => 't', sessionId => $bare },
            qr{works on \Q$gh/acme/app\E, which this token does not grant},
            '... after which the token without a claim is refused',
            token => $tok{none});
}

###############################################################################
# quotas: sandbox_mcp_max_queued started runs per tenant (the set
# tenant:{t}:started, kept by the scripts that change a status: run_create
# adds, the runner's claim moves a run to tenant:{t}:claimed, the cancel of
# a started run and the runner's finish remove); max_running is stored for
# the runner

{
    my $tok = $t->token(sub => 'q1');
    my $sid = session_for($tok);
    my %o = (token => $tok, path => '/q');
    my $started = "${P}tenant:q1:started";
    my $claimed = "${P}tenant:q1:claimed";
    my @runs;
    for my $i (1 .. 3) {
        my $sc = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => "q$i" }, %o),
                         "queued run $i of 3");
        push @runs, $sc->{runId};
    }
    is_deeply([ sort @{ $t->redis('SMEMBERS', $started) } ], [ sort @runs ],
              'the three runs are in tenant:q1:started');
    my $ses0 = $t->redis_hgetall("${P}run:$runs[0]")->{session};
    is_deeply($t->redis('ZRANGE', "${P}session:$ses0:active", 0, -1), [ $runs[0] ],
              "... and each in its session's active set");
    is($t->redis('HGET', "${P}run:$runs[0]", 'max_running'), '2',
       'run hash: max_running from sandbox_mcp_max_running');

    refused($sid, 'opencode_run_task', { task => 'q4' },
            qr/you already have 3 queued runs, the limit/,
            'a 4th started run is refused', %o);
    refused($sid, 'opencode_run_task', { task => 'q4', sessionId => $ses0 },
            qr/3 queued runs/, '... in an existing session too', %o);
    is_deeply($t->redis('ZRANGE', "${P}session:$ses0:active", 0, -1), [ $runs[0] ],
              '... which wrote nothing to the session');

    my $tok2 = $t->token(sub => 'q2');
    tool_ok($t->call_tool(session_for($tok2), 'opencode_run_task', { task => 'other' },
                          token => $tok2, path => '/q'),
            'another tenant is not held back');

    # a cancel of a started run frees its place
    my $sc = tool_ok($t->call_tool($sid, 'opencode_cancel_run', { runId => $runs[0] }, %o),
                     'cancel a started run');
    is($sc->{status}, 'cancelled', '... cancelled');
    ok(!$t->redis('SISMEMBER', $started, $runs[0]), '... out of the started set');
    is_deeply($t->redis('ZRANGE', "${P}session:$ses0:active", 0, -1), [],
              "... and out of its session's active set");
    my $r4 = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'q4' }, %o),
                     'then a new run is accepted')->{runId};

    # a run a runner claimed (moved to the claimed set, as the runner's
    # claim script does) does not count against the queue
    $t->redis('SMOVE', $started, $claimed, $runs[1]);
    $t->redis('HSET', "${P}run:$runs[1]", status => 'running');
    my $r5 = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'q5' }, %o),
                     'a claimed run does not count')->{runId};
    is_deeply([ sort @{ $t->redis('SMEMBERS', $started) } ], [ sort $runs[2], $r4, $r5 ],
              '... the started set');

    # the sets are the count: a member is a started run whatever its hash
    # says (the runner's finish removes it)
    $t->redis('HSET', "${P}run:$r4", status => 'completed');
    refused($sid, 'opencode_run_task', { task => 'q6' }, qr/3 queued runs/,
            'full: refused', %o);
    $t->redis('SREM', $started, $r4);
    my $r6 = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'q6' }, %o),
                     'once it left the set, a new run is accepted')->{runId};
    is_deeply([ sort @{ $t->redis('SMEMBERS', $started) } ], [ sort $runs[2], $r5, $r6 ],
              '... the started set');

    my $tok3 = $t->token(sub => 'q3');
    my $d = tool_ok($t->call_tool(session_for($tok3), 'opencode_run_task',
                                  { task => 'd' }, token => $tok3),
                    'default limits');
    is($t->run_hash($d->{runId})->{max_running}, '4', 'max_running defaults to 4');
}

###############################################################################
# cost caps: maxCostUsd, at most sandbox_mcp_max_cost_usd (also the default)

{
    my $tok = $t->token(sub => 'c1');
    my $sid = session_for($tok);
    my $run = sub {
        my ($args, $path, $name) = @_;
        my $sc = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'c', %$args },
                                       token => $tok, path => $path), $name);
        return $sc->{runId} // 'run_none';
    };
    my $result = sub {
        return SMCP::Test::sc($t->call_tool($sid, 'opencode_get_result',
                                            { runId => $_[0] }, token => $tok)) || {};
    };

    my $r = $run->({}, '/mcp', 'no maxCostUsd');
    is($t->run_hash($r)->{max_cost}, '25', 'run hash: max_cost 25 (the default)');
    is($result->($r)->{maxCostUsd}, 25, 'get_result: maxCostUsd 25');

    $r = $run->({ maxCostUsd => 3.75 }, '/mcp', 'maxCostUsd 3.75');
    is($t->run_hash($r)->{max_cost}, '3.75', 'run hash: max_cost 3.75');
    is($result->($r)->{maxCostUsd}, 3.75, 'get_result: maxCostUsd 3.75');

    $r = $run->({ maxCostUsd => 25 }, '/mcp', 'maxCostUsd at the cap');
    is($t->run_hash($r)->{max_cost}, '25', '... stored');

    for my $c ([ 25.01, 'over the cap' ], [ 0, 'zero' ], [ -1, 'negative' ],
               [ '5', 'a string' ], [ JSON::PP::true, 'a boolean' ],
               [ 1e300, 'huge' ], [ 0.0000001, 'below a micro-dollar' ]) {
        refused($sid, 'opencode_run_task', { task => 'c', maxCostUsd => $c->[0] },
                qr/'maxCostUsd' must be a number of US dollars more than 0 and at most 25\./,
                "maxCostUsd $c->[1] refused", token => $tok);
    }

    $r = $run->({}, '/cost', 'sandbox_mcp_max_cost_usd 2.50: default');
    is($t->run_hash($r)->{max_cost}, '2.5', '... max_cost 2.5');
    $r = $run->({ maxCostUsd => 0.000001 }, '/cost', 'a micro-dollar');
    is($t->run_hash($r)->{max_cost}, '0.000001', '... max_cost 0.000001');
    refused($sid, 'opencode_run_task', { task => 'c', maxCostUsd => 2.6 },
            qr/at most 2\.5\./, 'maxCostUsd over 2.50 refused', token => $tok,
            path => '/cost');

    $r = $run->({}, '/nocap', 'sandbox_mcp_max_cost_usd 0: default');
    is($t->run_hash($r)->{max_cost}, '0', '... max_cost 0 (no cap)');
    is($result->($r)->{maxCostUsd}, undef, '... get_result: maxCostUsd null');
    $r = $run->({ maxCostUsd => 1000 }, '/nocap', 'no server cap: 1000 accepted');
    is($t->run_hash($r)->{max_cost}, '1000', '... max_cost 1000');
}

###############################################################################
# retention and session expiry

{
    my $tok = $t->token(sub => 'r1');
    my $sid = session_for($tok);
    my %o = (token => $tok, path => '/ret');
    my $t0 = now_ms();
    my $sc = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'r' }, %o),
                     'a run with sandbox_mcp_retention 2d, session_idle 1h');
    my ($run, $ses) = ($sc->{runId}, $sc->{sessionId});
    is($t->run_hash($run)->{retention}, 172800, 'run hash: retention 172800 s');
    my $sh = $t->redis_hgetall("${P}session:$ses");
    is($sh->{retention}, 172800, 'session hash: retention');
    is($sh->{idle_ttl}, 3600, 'session hash: idle_ttl 3600 s');
    ok($sh->{last_active} >= $t0 && $sh->{last_active} <= now_ms(),
       'session hash: last_active = the run_create time (ms)');
    is($t->redis('ZSCORE', "${P}sessions", $ses), $sh->{last_active} + 3600 * 1000,
       'sessions zset: last_active + idle_ttl');

    sleep(0.01);
    my $sc2 = tool_ok($t->call_tool($sid, 'opencode_run_task',
                                    { task => 'r2', sessionId => $ses }, %o),
                      'a second run in the session');
    my $sh2 = $t->redis_hgetall("${P}session:$ses");
    ok($sh2->{last_active} > $sh->{last_active}, '... bumps last_active');
    is($sh2->{created_at}, $sh->{created_at}, '... keeps created_at');
    is($t->redis('ZSCORE', "${P}sessions", $ses), $sh2->{last_active} + 3600 * 1000,
       '... and the sessions score');

    # defaults
    my $d = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'd' },
                                  token => $tok), 'default retention');
    is($t->run_hash($d->{runId})->{retention}, 30 * 86400, 'retention defaults to 30d');
    is($t->redis('HGET', "${P}session:$d->{sessionId}", 'idle_ttl'), 7 * 86400,
       'session idle defaults to 7d');

    # the cancel of a run not yet started: its keys expire after the retention
    $t->redis('SET', "${P}run:$run:diff", 'x');
    tool_ok($t->call_tool($sid, 'opencode_cancel_run', { runId => $run }, %o),
            'cancel a started run');
    for my $k ("${P}run:$run", "${P}run:$run:events", "${P}run:$run:diff") {
        my $ttl = $t->redis('TTL', $k);
        ok($ttl > 172800 - 60 && $ttl <= 172800, "$k expires in the retention ($ttl s)");
    }
    # a running run's cancel sets no expiry
    $t->redis('HSET', "${P}run:$sc2->{runId}", status => 'running');
    tool_ok($t->call_tool($sid, 'opencode_cancel_run', { runId => $sc2->{runId} }, %o),
            'cancel a running run');
    is($t->redis('TTL', "${P}run:$sc2->{runId}"), -1, '... no expiry (the runner ends it)');

    # index entries older than retention + run_timeout_max are trimmed
    my $cut = now_ms() - (172800 + 3 * 3600) * 1000;
    my ($old, $young) = ('run_' . ('1' x 24), 'run_' . ('2' x 24));
    for my $k ("${P}runs:r1", "${P}session:$ses:runs") {
        $t->redis('ZADD', $k, $cut - 60_000, $old, $cut + 60_000, $young);
    }
    # one run_create in 16 trims (a run id ending in 0): within 400 of
    # them, but for one chance in 10^11
    my $tries = 0;
    while ($tries++ < 400) {
        $t->redis('DEL', "${P}tenant:r1:started");    # not the quota's test
        my $res = $t->call_tool($sid, 'opencode_run_task', { task => 'r3', sessionId => $ses }, %o);
        last unless $res->{structuredContent};
        last if $res->{structuredContent}{runId} =~ /0\z/;
    }
    ok($tries <= 400, "a run_create whose run id ends in 0 (after $tries)");
    for my $k ("${P}runs:r1", "${P}session:$ses:runs") {
        ok(!defined $t->redis('ZSCORE', $k, $old), "$k: an entry older than retention + run_timeout_max trimmed");
        ok(defined $t->redis('ZSCORE', $k, $young), "$k: a younger one kept");
    }

    # an expiring or expired session is refused, and says so
    for my $state ('expiring', 'expired') {
        $t->redis('HSET', "${P}session:$ses", state => $state);
        refused($sid, 'opencode_run_task', { task => 'late', sessionId => $ses },
                qr/^Session expired: \Q$ses\E .*start a new session by omitting sessionId/,
                "a session in state $state", %o);
    }
    refused($sid, 'opencode_run_task', { task => 'x', sessionId => 'ses_' . ('9' x 24) },
            qr/^Unknown sessionId/, 'an unknown session still says unknown', %o);
    $t->redis('HDEL', "${P}session:$ses", 'state');
}

###############################################################################
# amplification: get_diff with a path reads one section, not the whole diff

sub section {
    my ($old, $new, $body) = @_;
    return "diff --git a/$old b/$new\n--- a/$old\n+++ b/$new\n$body";
}

{
    my $sid = session_for($t->token);
    my $run = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'diff' }),
                      'a run for diffs')->{runId};
    my $key = "${P}run:$run";

    # ~2 MiB of diff: one small file between two big ones, and a big one
    my $filler = join('', map { "+line $_ of filler text, filler text\n" } 1 .. 30000);
    my @parts = (
        [ 'big1.txt', 'big1.txt', "\@\@ -0,0 +1,30000 \@\@\n$filler" ],
        [ 'small.c',  'small.c',  "\@\@ -1 +1 \@\@\n-a\n+b\n" ],
        [ 'old.c',    'new.c',    "\@\@ -1 +1 \@\@\n-x\n+y\n" ],
        [ 'big2.txt', 'big2.txt', "\@\@ -0,0 +1,30000 \@\@\n$filler" ],
    );
    my ($diff, %index, %text) = ('');
    for my $p (@parts) {
        my $sec = section(@$p);
        $index{ $p->[0] } = $index{ $p->[1] } = [ length $diff, length $sec ];
        $text{ $p->[0] } = $text{ $p->[1] } = $sec;
        $diff .= $sec;
    }
    ok(length($diff) > 2_000_000, 'a diff of ' . length($diff) . ' bytes');
    $t->redis('SET', "$key:diff", $diff);

    # no index, a big diff: refused, and the diff never left Redis
    my ($before, $sent);
    refused($sid, 'opencode_get_diff', { runId => $run, path => 'small.c' },
            qr/index of this run's diff is unavailable.*too big/,
            'no diff_index, a 2 MiB diff: a path is refused', sent => \$sent);
    ok($sent < 64 * 1024, "... Redis sent $sent bytes (not the diff)");

    # with the index: only the section's page leaves Redis
    $t->redis('HSET', $key, diff_index => json_encode(\%index));
    $before = redis_out_bytes();
    my $sc = tool_ok($t->call_tool($sid, 'opencode_get_diff',
                                   { runId => $run, path => 'small.c' }),
                     'diff_index: small.c');
    $sent = redis_out_bytes() - $before;
    my $d = $sc->{diff} // '';
    is($d, $text{'small.c'}, '... exactly its section');
    is($sc->{totalBytes}, length $text{'small.c'}, '... totalBytes = the section');
    ok(!$sc->{truncated}, '... not truncated');
    ok($sent < 64 * 1024, "... Redis sent $sent bytes for it");

    for my $p ('old.c', 'new.c') {
        $sc = tool_ok($t->call_tool($sid, 'opencode_get_diff',
                                    { runId => $run, path => $p }), "rename: $p");
        is($sc->{diff}, $text{$p}, "... a rename is found under $p");
    }

    $before = redis_out_bytes();
    my @pages = $t->diff_pages($sid, { runId => $run, path => 'big2.txt' });
    $sent = redis_out_bytes() - $before;
    ok(join('', map { $_->{diff} } @pages) eq $text{'big2.txt'},
       'big2.txt read in ' . scalar(@pages) . ' pages from the index');
    ok($sent < length($text{'big2.txt'}) + 64 * 1024,
       "... Redis sent $sent bytes for a " . length($text{'big2.txt'})
       . '-byte section (the whole diff is ' . length($diff) . ')');

    $sc = tool_ok($t->call_tool($sid, 'opencode_get_diff',
                                { runId => $run, path => 'not/there.c' }),
                  'a path not in the index');
    is($sc->{diff}, '', '... empty diff');
    ok(!$sc->{truncated}, '... not truncated');

    # an index entry that does not fit the diff is not trusted
    $t->redis('HSET', $key, diff_index => json_encode(
        { 'small.c' => [ length($diff) - 5, 100 ], 'neg.c' => [ -1, 5 ] }));
    refused($sid, 'opencode_get_diff', { runId => $run, path => 'small.c' },
            qr/unavailable/, 'an index entry beyond the diff: not used');
    $t->redis('HSET', $key, diff_index => 'not json');
    refused($sid, 'opencode_get_diff', { runId => $run, path => 'small.c' },
            qr/unavailable/, 'an index that is not JSON: not used');

    # small diffs without an index are still searched
    my $small = section('a.c', 'a.c', "\@\@ -1 +1 \@\@\n-1\n+2\n")
              . section('b.c', 'b.c', "\@\@ -1 +1 \@\@\n-3\n+4\n");
    $t->redis('SET', "$key:diff", $small);
    $t->redis('HDEL', $key, 'diff_index');
    $sc = tool_ok($t->call_tool($sid, 'opencode_get_diff',
                                { runId => $run, path => 'b.c' }),
                  'no index, a small diff: searched');
    is($sc->{diff}, section('b.c', 'b.c', "\@\@ -1 +1 \@\@\n-3\n+4\n"),
       '... the section');

    # pages without a newline end on a whole character
    my $line = "+" . ("\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80" x 15000) . "\n";
    $t->redis('SET', "$key:diff", $line);
    @pages = $t->diff_pages($sid, { runId => $run });
    ok(@pages >= 3 && join('', map { $_->{diff} } @pages) eq $line,
       'a 135 KB line of multi-byte characters in ' . scalar(@pages) . ' pages, byte for byte');

    # the whole diff unfiltered is still paged from Redis
    $t->redis('SET', "$key:diff", $diff);
    $before = redis_out_bytes();
    $sc = tool_ok($t->call_tool($sid, 'opencode_get_diff', { runId => $run }),
                  'the first page of the whole diff');
    $sent = redis_out_bytes() - $before;
    ok($sc->{truncated} && $sent < 2 * 65536, "... one page ($sent bytes sent)");
}

###############################################################################
# revocation: one token refused by every worker, without a secret rotation

my $bin = SMCP::Test::token_tool_path();
my $redis_addr = '127.0.0.1:' . $t->redis_port;

sub cli_token {
    my (@args) = @_;
    my $sf = $t->secret_file;
    my $tok = `$bin --sub rv --repos '*' --secret-file $sf @args`;
    chomp $tok;
    return $tok;
}

sub revoke {
    my (@args) = @_;
    my $out = `$bin --revoke @args 2>&1`;
    return ($? >> 8, $out);
}

# every one of n pings (spread over the workers) gets this status
sub all_status {
    my ($tok, $sid, $n) = @_;
    my %st;
    for (1 .. $n) {
        my $r = $t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                             token => $tok, session => $sid);
        $st{ $r->{status} }++;
        $st{revoked}++ if ($r->{headers}{'www-authenticate'} // '') =~ /token revoked/;
    }
    return \%st;
}

{
    my $tok = cli_token();
    my (undef, $cl) = SMCP::Test::decode_jwt($tok);
    like($cl->{jti} // '', qr/^[0-9a-f]{32}$/, 'smcp-token puts a random jti in the token');
    my (undef, $cl2) = SMCP::Test::decode_jwt(cli_token());
    isnt($cl2->{jti}, $cl->{jti}, '... a new one in every token');
    my $other = cli_token();

    my $sid = session_for($tok);
    is_deeply(all_status($tok, $sid, 10), { 200 => 10 }, 'the token works');

    # revoke the whole token: its jti and exp go to Redis and the workers
    my ($rc, $out) = revoke("'$tok'", '--redis', $redis_addr);
    is($rc, 0, 'smcp-token --revoke TOKEN') or diag($out);
    like($out, qr/revoked $cl->{jti}/, '... says which id');
    is($t->redis('HGET', "${P}revoked", $cl->{jti}), $cl->{exp},
       'revoked hash: jti -> the token exp');

    # the PUBLISH reaches each worker on its own connection: until both
    # heard it, one may still serve the token
    ok(wait_until(20, sub { (all_status($tok, $sid, 4)->{401} // 0) == 4 }),
       'the revoked token is refused');
    is_deeply(all_status($tok, $sid, 20), { 401 => 20, revoked => 20 },
              '... by every worker, 20 times in a row ("token revoked")');
    is_deeply(all_status($other, session_for($other), 5), { 200 => 5 },
              'another token of the tenant still works');

    # the workers hold the set in memory: no Redis round trip decides
    $t->redis('HDEL', "${P}revoked", $cl->{jti});
    is_deeply(all_status($tok, $sid, 10), { 401 => 10, revoked => 10 },
              'still refused with the hash entry gone (the workers remember)');

    # a bare jti, with --exp
    my $tok2 = cli_token();
    my (undef, $c2) = SMCP::Test::decode_jwt($tok2);
    my $sid2 = session_for($tok2);
    ($rc, $out) = revoke($c2->{jti}, '--exp', $c2->{exp}, '--redis', $redis_addr);
    is($rc, 0, 'smcp-token --revoke JTI --exp') or diag($out);
    ok(wait_until(20, sub { all_status($tok2, $sid2, 1)->{401} }),
       '... refused too');

    for my $bad ('a/b', '', 'x' x 65, 'not.a.jwt') {
        ($rc, $out) = revoke("'$bad'", '--redis', $redis_addr);
        isnt($rc, 0, "smcp-token --revoke '$bad' refused");
    }
    ($rc, $out) = revoke('abc', '--redis', '127.0.0.1:1');
    isnt($rc, 0, 'smcp-token --revoke without a reachable Redis fails');

    # written behind the workers' back (no PUBLISH): read on the next
    # (re)connect of the pub/sub connection; meanwhile Redis is asked
    my $tok3 = cli_token();
    my (undef, $c3) = SMCP::Test::decode_jwt($tok3);
    my $sid3 = session_for($tok3);
    $t->redis('HSET', "${P}revoked", $c3->{jti}, $c3->{exp});
    is_deeply(all_status($tok3, $sid3, 4), { 200 => 4 },
              'a silent HSET is not seen by workers that trust their set');
    my $seen = length $t->error_log;
    $t->redis('CLIENT', 'KILL', 'TYPE', 'pubsub');
    is_deeply(all_status($tok3, $sid3, 10), { 401 => 10, revoked => 10 },
              'after the pub/sub connections were cut: refused at once');
    # each worker's line, logged since the cut (pid#tid: ...)
    ok(wait_until(30, sub {
        my %pid = map { $_ => 1 } substr($t->error_log, $seen)
                                  =~ /(\d+)#\d+: .*revoked token ids loaded/g;
        return keys(%pid) >= 2;
    }), 'both workers reloaded the hash');
    $t->redis('HDEL', "${P}revoked", $c3->{jti});
    is_deeply(all_status($tok3, $sid3, 10), { 401 => 10, revoked => 10 },
              '... and keep it in memory');

    # a jti that is not an id refuses the token
    my $r = $t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                         token => $t->token(jti => 'a b'));
    is($r->{status}, 401, 'a token with a malformed jti: 401');

    # a fresh nginx finds what was revoked before it started
    my $tok4 = cli_token();
    my (undef, $c4) = SMCP::Test::decode_jwt($tok4);
    my $sid4 = session_for($tok4);
    ($rc, $out) = revoke("'$tok4'", '--redis', $redis_addr);
    my $port = $t->start_nginx(name => 'fresh');
    my $r4 = $t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                          token => $tok4, session => $sid4, port => $port);
    is($r4->{status}, 401, 'a worker started after the revocation refuses it at once');
    $t->stop_nginx('fresh');
}

###############################################################################
# opencode_get_events frees what it builds: a worker's memory stays flat
# over 300 pages of 1000 events (the leak of one string per event would
# add ~25 MB)

sub rss_kb {
    my ($pid) = @_;
    open(my $fh, '<', "/proc/$pid/status") or return 0;
    local $/;
    my $st = <$fh>;
    return $st =~ /^VmRSS:\s+(\d+)/m ? $1 : 0;
}

{
    my $port = $t->start_nginx(name => 'one', workers => 1);
    my ($worker) = $t->worker_pids('one');
    my $sid = session_for($t->token);
    my $run = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'events' }),
                      'a run for events')->{runId};
    my $key = "${P}run:$run:events";
    $t->redis('XADD', $key, '*', type => 'agent', data => '{}', ts => now_ms())
        for 1 .. 999;
    my $body = json_encode($t->request_msg('tools/call', {
        name => 'opencode_get_events', arguments => { runId => $run, limit => 1000 } }));
    my $page = sub {
        return $t->http(method => 'POST', port => $port, body => $body,
                        headers => $t->mcp_headers(session => $sid));
    };
    my $r = $page->();
    my $j = json_decode($r->{body}) || {};
    is(scalar @{ $j->{result}{structuredContent}{events} || [] }, 1000,
       'a page of 1000 events');
    $page->() for 1 .. 30;
    my $rss0 = rss_kb($worker);
    my $fail = 0;
    for (1 .. 300) { $fail++ if $page->()->{status} != 200 }
    my $rss1 = rss_kb($worker);
    is($fail, 0, '300 more pages answered');
    ok($rss0 > 0 && $rss1 - $rss0 < 8 * 1024,
       "the worker's memory stays flat: RSS $rss0 kB -> $rss1 kB");
    $t->stop_nginx('one');
}

###############################################################################
# the new directives refuse nonsense at start

for my $c ([ 'cost_abc',  'sandbox_mcp_max_cost_usd abc;',   qr/sandbox_mcp_max_cost_usd/ ],
           [ 'cost_neg',  'sandbox_mcp_max_cost_usd -1;',    qr/sandbox_mcp_max_cost_usd/ ],
           [ 'cost_big',  'sandbox_mcp_max_cost_usd 2000000;', qr/sandbox_mcp_max_cost_usd/ ],
           [ 'queued_0',  'sandbox_mcp_max_queued 0;',       qr/sandbox_mcp_max_queued/ ],
           [ 'running_0', 'sandbox_mcp_max_running 0;',      qr/sandbox_mcp_max_running/ ],
           [ 'ret_0',     'sandbox_mcp_retention 0;',        qr/sandbox_mcp_retention/ ],
           [ 'idle_0',    'sandbox_mcp_session_idle 0;',     qr/sandbox_mcp_session_idle/ ]) {
    my $ok = eval { $t->start_nginx(name => "conf_$c->[0]", location => $c->[1]); 1 };
    ok(!$ok, "'$c->[1]': nginx does not start");
    like($@ // '', $c->[2], '... and names the directive');
}

###############################################################################
# Redis with a password: AUTH first on both connections of every worker,
# the password never in a log (last: new connections need it from here on)

{
    my $pw = 'pw-' . join('', map { ('a' .. 'z')[rand 26] } 1 .. 24);
    my $pwfile = $t->dir . '/redis-password';
    open(my $fh, '>', $pwfile) or die $!;
    print $fh "$pw\n";
    close $fh;

    $t->redis('CONFIG', 'SET', 'requirepass', $pw);
    my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };

    my $port = $t->start_nginx(name => 'auth',
        http => "sandbox_mcp_redis_password file:$pwfile;");
    my ($sid, $init) = $t->initialize(port => $port);
    is($init->{status}, 200, 'sandbox_mcp_redis_password file: initialize works');
    my $sc = tool_ok($t->call_tool($sid, 'opencode_run_task', { task => 'pw' },
                                   port => $port), '... and run_task');

    # revocation through a password-protected Redis
    my $tok = cli_token();
    my $sid2 = session_for_port($tok, $port);
    my ($rc, $out) = revoke("'$tok'", '--redis', $redis_addr);
    isnt($rc, 0, 'smcp-token --revoke without the password is refused');
    like($out, qr/NOAUTH|AUTH/, '... saying why');
    ($rc, $out) = revoke("'$tok'", '--redis', $redis_addr,
                         '--redis-password-file', $pwfile);
    is($rc, 0, 'smcp-token --revoke --redis-password-file') or diag($out);
    ok(wait_until(20, sub {
        $t->mcp_post($ping, token => $tok, session => $sid2, port => $port)
            ->{status} == 401 }), '... the token is refused (pub/sub authenticated too)');

    $ENV{SMCP_TEST_REDIS_PW} = $pw;
    my $port2 = $t->start_nginx(name => 'authenv',
        http => 'sandbox_mcp_redis_password env:SMCP_TEST_REDIS_PW;');
    delete $ENV{SMCP_TEST_REDIS_PW};
    my ($sid3, $init3) = $t->initialize(port => $port2);
    is($init3->{status}, 200, 'sandbox_mcp_redis_password env: works');

    # a wrong password: fail fast with 503, say AUTH, never the password
    open($fh, '>', $t->dir . '/wrong-password') or die $!;
    print $fh "not-$pw";
    close $fh;
    my $port3 = $t->start_nginx(name => 'badauth', redis_timeout => '10s',
        http => 'sandbox_mcp_redis_password file:' . $t->dir . '/wrong-password;');
    # each worker's command connection was refused (pid#tid: ...)
    ok(wait_until(30, sub {
        my %pid = map { $_ => 1 } $t->error_log('badauth')
                                  =~ /(\d+)#\d+: .*redis commands: AUTH refused/g;
        return keys(%pid) >= 2;
    }), 'error.log says AUTH was refused');
    my $r = $t->mcp_post($t->request_msg('initialize', {
        protocolVersion => '2025-11-25', capabilities => {},
        clientInfo => { name => 'x', version => '1' } }), port => $port3);
    is($r->{status}, 503, 'a wrong password: 503');
    # not after the Redis timeout (10 s here)
    ok($r->{elapsed} < 5, sprintf('... at once (%.3f s)', $r->{elapsed}));
    my @logs = map { $t->error_log($_) } qw(auth authenv badauth main);
    ok(!grep({ index($_, $pw) >= 0 } @logs), 'no error.log holds the password');

    # a directive without env: or file:, or naming nothing, stops nginx
    for my $c ([ 'plain', 'sandbox_mcp_redis_password secret;' ],
               [ 'env unset', 'sandbox_mcp_redis_password env:SMCP_NO_SUCH_VAR_X;' ],
               [ 'no file', 'sandbox_mcp_redis_password file:/nonexistent/pw;' ]) {
        my $ok = eval { $t->start_nginx(name => "bad" . ($c->[0] =~ s/ /_/gr), http => $c->[1]); 1 };
        ok(!$ok, "sandbox_mcp_redis_password $c->[0]: nginx does not start");
        like($@ // '', qr/sandbox_mcp_redis_password/, '... and says which directive');
    }

    $t->stop_nginx($_) for qw(auth authenv badauth);
}

$t->done;
