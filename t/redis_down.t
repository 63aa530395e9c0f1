#!/usr/bin/perl

# Redis outages: requests get 503 + Retry-After fast while Redis is down
# (well under the Redis timeout, 10 s here),
# workers survive (same PIDs) and keep answering, the module reconnects on
# its own when Redis is back, a long-poll in flight ends with an answer,
# nginx started while Redis is down recovers too, and a Redis that stops
# answering is cut off by sandbox_mcp_redis_timeout.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode json_decode now_ms wait_until is_pong);

my $t = SMCP::Test->new(
    workers          => 2,
    listen           => 'reuseport',
    redis_timeout    => '10s',
    redis_appendonly => 1,
);
$t->start;

my $P = 'smcp:';
my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };

my ($sid) = $t->initialize;
ok($sid, 'session') or SMCP::Test::give_up('no session');
my ($res) = $t->call_tool($sid, 'opencode_run_task', { task => 'outage test' });
my $run = (SMCP::Test::sc($res) || {})->{runId};
ok($run, 'a run') or diag(json_encode($res));
$run //= 'run_000000000000000000000000';

my @workers = $t->worker_pids;
is(scalar @workers, 2, "two workers (@workers)");

sub check_503 {
    my ($r, $name) = @_;
    subtest $name => sub {
        is($r->{status}, 503, 'HTTP 503');
        is($r->{headers}{'retry-after'}, '1', 'Retry-After: 1');
        like($r->{headers}{'content-type'} // '', qr{^application/json},
             'Content-Type application/json');
        my $e = ref $r->{json} eq 'HASH' ? $r->{json}{error} : undef;
        is($e && $e->{code}, -32603, 'JSON-RPC -32603');
        like($e && $e->{message} // '', qr/redis/i, 'message mentions Redis');
        ok($r->{elapsed} < 5, sprintf('fast: %.3f s (redis timeout is 10 s)', $r->{elapsed}));
    };
}

# wait for recovery: returns seconds until a ping succeeded (undef: never)
sub recovery_time {
    my ($limit, %o) = @_;
    my $t0 = time();
    my $ok = wait_until($limit, sub {
        my $r = $t->mcp_post($ping, session => $sid, timeout => 5, %o);
        return is_pong($r);
    }, 0.1);
    return $ok ? time() - $t0 : undef;
}

###############################################################################
# Redis dies with a long-poll in flight

{
    my $lp = $t->mcp_start($t->request_msg('tools/call', {
        name => 'opencode_get_result', arguments => { runId => $run, waitSeconds => 60 } }),
        session => $sid);
    ok($t->wait_long_polls(1), 'a long-poll waits');
    my $t_kill = time();
    $t->stop_redis(signal => 'KILL');

    my $r = $t->mcp_finish($lp, 90);
    my $after = time() - $t_kill;
    ok(!$r->{timed_out} && $r->{status} > 0, 'the long-poll in flight got an answer')
        or diag("status $r->{status} $r->{body}");
    ok($after < 60 + 10 + 5,
       sprintf('... %.2f s after Redis died: no later than the wait + redis timeout', $after));
    ok($r->{status} == 503
       || ($r->{status} == 200 && ref $r->{json} eq 'HASH'),
       "... a 503 or a JSON-RPC answer (HTTP $r->{status})");
    is($r->{headers}{'retry-after'}, '1', '... with Retry-After') if $r->{status} == 503;
    # a lost connection wakes every waiter, which then fails fast
    ok($after < 30, sprintf('... promptly (%.2f s), not at the end of its 60 s wait', $after));
}

###############################################################################
# Redis down: fast 503s, workers alive and serving

{
    for my $i (1 .. 6) {
        check_503($t->mcp_post($ping, session => $sid), "ping while Redis is down ($i)");
    }
    my ($nsid, $ir) = $t->initialize;
    check_503($ir, 'initialize while Redis is down');
    my (undef, $cr) = $t->call_tool($sid, 'opencode_list_runs', {});
    check_503($cr, 'tools/call while Redis is down');

    # what does not need Redis still works
    my $r = $t->mcp_post($ping, session => $sid, token => undef);
    is($r->{status}, 401, 'missing token still 401 while Redis is down');
    $r = $t->mcp_post($ping, session => $sid, host => 'evil.example.com');
    is($r->{status}, 403, 'bad Host still 403');
    $r = $t->http(path => '/plain');
    is($r->{status}, 200, 'other locations unaffected');

    is_deeply([ $t->worker_pids ], \@workers, 'same worker PIDs (no crash, no respawn)');
}

###############################################################################
# Redis back on the same port: automatic recovery

{
    $t->start_redis;
    my $rt = recovery_time(30);
    ok(defined $rt, 'requests succeed again after Redis restarted');
    # by the module's reconnect (its backoff is at most 1 s)
    ok(defined $rt && $rt < 20, sprintf('recovered within %.2f s', $rt // -1));

    my $bad = 0;
    for my $i (1 .. 30) {
        $bad++ unless is_pong($t->mcp_post($ping, session => $sid));
    }
    is($bad, 0, '30 requests over both workers succeed after recovery');

    my ($s2) = $t->initialize;
    ok($s2, 'new sessions can be created');
    my ($res) = $t->call_tool($sid, 'opencode_get_result', { runId => $run });
    is((SMCP::Test::sc($res) || {})->{status}, 'started', 'run data survived (AOF)');

    # the pub/sub side reconnected too: a long-poll is woken by PUBLISH
    for my $i (1 .. 2) {    # twice, to likely reach both workers
        my ($r2) = $t->call_tool($sid, 'opencode_run_task', { task => "after outage $i" });
        my $id = (SMCP::Test::sc($r2) || {})->{runId} // 'run_1';
        my $lp = $t->mcp_start($t->request_msg('tools/call', {
            name => 'opencode_get_result', arguments => { runId => $id, waitSeconds => 60 } }),
            session => $sid);
        ok($t->wait_long_polls(1), "long-poll $i after recovery waits");
        $t->redis('HSET', "${P}run:$id", status => 'completed', finished_at => now_ms(),
                  result => 'ok');
        $t->redis('PUBLISH', "${P}run:$id", 'completed');
        my $r = $t->mcp_finish($lp, 90);
        my $sc = SMCP::Test::sc($r->{json} && $r->{json}{result}) || {};
        is($sc->{status}, 'completed', "long-poll $i after recovery sees completed");
        ok($r->{elapsed} < 30, sprintf('long-poll %d woken by PUBLISH after recovery '
                                       . '(%.2f s of its 60)', $i, $r->{elapsed}));
    }
    is_deeply([ $t->worker_pids ], \@workers, 'still the same worker PIDs');
}

###############################################################################
# a second outage (graceful shutdown this time), then back again

{
    $t->stop_redis(signal => 'TERM');
    check_503($t->mcp_post($ping, session => $sid), 'second outage: 503');
    sleep(2.5);    # let reconnect attempts back off
    check_503($t->mcp_post($ping, session => $sid), 'still 503 during backoff, still fast');
    $t->start_redis;
    my $rt = recovery_time(30);
    ok(defined $rt && $rt < 20, sprintf('recovered again (%.2f s)', $rt // -1));
}

###############################################################################
# nginx started while Redis is down

{
    $t->stop_redis(signal => 'TERM');
    my $port2 = $t->start_nginx(name => 'cold', workers => 1, listen => '');
    check_503($t->mcp_post($ping, session => $sid, port => $port2),
              'instance started without Redis: 503');
    $t->start_redis;
    my $rt = recovery_time(30, port => $port2);
    ok(defined $rt && $rt < 20,
       sprintf('instance started without Redis recovers (%.2f s)', $rt // -1));
    $t->stop_nginx('cold');
}

###############################################################################
# Redis stops answering (SIGSTOP): sandbox_mcp_redis_timeout cuts it off

{
    ok(defined recovery_time(5), 'healthy before the stall');
    $t->pause_redis;
    my $t0 = time();
    my @p = map { $t->mcp_start($ping, session => $sid) } 1 .. 3;
    my @r = map { $t->mcp_finish($_, 40) } @p;
    $t->resume_redis;
    for my $i (0 .. $#r) {
        my $r = $r[$i];
        ok(!$r->{timed_out} && $r->{status} == 503,
           "stalled Redis: request $i answered 503 (HTTP $r->{status})");
        # cut off by the timeout: not before it, and answered
        ok($r->{elapsed} >= 8 && $r->{elapsed} < 30,
           sprintf('... after about the 10 s timeout (%.2f s)', $r->{elapsed}));
        is($r->{headers}{'retry-after'}, '1', '... with Retry-After');
    }
    my $rt = recovery_time(30);
    ok(defined $rt && $rt < 20, sprintf('recovered after the stall (%.2f s)', $rt // -1));
    is_deeply([ $t->worker_pids ], \@workers, 'same worker PIDs at the end');
}

$t->done;
