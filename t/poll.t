#!/usr/bin/perl

# The core flow again on the static nginx (module built in with
# --add-module) under `events { use poll; }`: level-triggered events catch
# what edge-triggered epoll hides (stale ready flags, no-op delete events,
# partial reads of big replies).  Under CI the static binary must exist.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode json_decode now_ms wait_until is_pong pong_ok tool_ok);

my $t = SMCP::Test->new(
    need_static      => 1,
    poll             => 1,
    workers          => 2,
    listen           => 'reuseport',
    redis_appendonly => 1,
    redis_timeout    => '10s',  # well apart from a 503 answered at once
);
$t->start;

my $P = 'smcp:';
my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };

like($t->read_file('nginx.conf'), qr/use poll;/, 'config uses poll');
unlike($t->read_file('nginx.conf'), qr/load_module/, 'no load_module line');

my ($sid, $ir) = $t->initialize;
like($sid // '', qr/^[0-9a-f]{64}$/, 'initialize under poll') or diag($ir->{body});
is($t->redis('EXISTS', "${P}mcp:" . ($sid // 'x')), 1, 'session in Redis');

# many requests per worker: a stale ready flag under poll hangs the second one
# (until the client gives up on it: each has 10 s)
{
    my $bad = 0;
    my $t0 = time();
    for my $i (1 .. 60) {
        my $r = $t->mcp_post({ jsonrpc => '2.0', id => $i, method => 'ping' },
                             session => $sid, timeout => 10);
        $bad++ unless is_pong($r);
    }
    is($bad, 0, sprintf('60 sequential requests all answered, none hung (%.2f s)',
                        time() - $t0));

    # concurrent requests
    my @p = map { $t->mcp_start({ jsonrpc => '2.0', id => $_, method => 'tools/list' },
                                session => $sid) } 1 .. 20;
    my @r = map { $t->mcp_finish($_, 30) } @p;
    is(scalar(grep { $_->{status} == 200 && @{ $_->{json}{result}{tools} || [] } == 9 } @r),
       20, '20 concurrent tools/list all answered (the 9 tools)');
}

# run_task, Redis records
my $res = $t->call_tool($sid, 'opencode_run_task',
                        { task => 'poll flow', title => 'poll' });
my $sc = tool_ok($res, 'run_task');
my $run = $sc->{runId} // 'run_000000000000000000000000';
is($sc->{status}, 'started', 'started');
is($t->redis('HGET', "${P}run:$run", 'status'), 'started', 'run hash in Redis');
ok(defined $t->redis('ZSCORE', "${P}runs:alice", $run), 'run in runs:alice');

# get_result long-poll woken by PUBLISH
{
    my $t0 = time();
    my $s = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result',
                                       { runId => $run, waitSeconds => 1 }),
                  'long-poll expiring');
    my $el = time() - $t0;
    is($s->{status}, 'started', 'still started');
    # waited its 1 s: not answered at once, nor held to max_wait (60 s)
    ok($el >= 0.8 && $el < 20, sprintf('waited about 1 s (%.2f)', $el));

    # woken by the PUBLISH: long before their 60 s
    my @p = map {
        $t->mcp_start($t->request_msg('tools/call', { name => 'opencode_get_result',
            arguments => { runId => $run, waitSeconds => 60 } }), session => $sid)
    } 1 .. 2;
    ok($t->wait_long_polls(2), 'two long-polls wait');
    $t->redis('HSET', "${P}run:$run", status => 'completed', result => 'poll ok',
              finished_at => now_ms(), started_at => now_ms() - 10, exit_code => 0);
    $t->redis('PUBLISH', "${P}run:$run", 'completed');
    for my $p (@p) {
        my $r = $t->mcp_finish($p, 90);
        my $s = SMCP::Test::sc($r->{json} && $r->{json}{result}) || {};
        is($s->{status}, 'completed', 'long-poll woken: completed');
        ok($r->{elapsed} < 30, sprintf('... early (%.2f s of its 60)', $r->{elapsed}));
    }
}

# a big value through hiredis under poll (several reads per reply)
{
    my $diff = join '', map { "+line $_ " . ('x' x 100) . "\n" } 1 .. 3000;
    $diff = "diff --git a/f b/f\n--- a/f\n+++ b/f\n\@\@ -0,0 +1,3000 \@\@\n$diff";
    $t->redis('SET', "${P}run:$run:diff", $diff);
    my ($all, $cur, $n) = ('', undef, 0);
    while ($n++ < 20) {
        my $s = SMCP::Test::sc(scalar $t->call_tool($sid, 'opencode_get_diff',
                    { runId => $run, defined $cur ? (cursor => $cur) : () })) or last;
        $all .= $s->{diff} // '';
        $cur = $s->{nextCursor};
        last unless defined $cur;
    }
    ok($all eq $diff, "a 300 KB diff read back in pages ($n) under poll");
}

# list_runs
{
    for my $i (1 .. 4) {
        $t->call_tool($sid, 'opencode_run_task', { task => "more $i" });
    }
    my $s = tool_ok(scalar $t->call_tool($sid, 'opencode_list_runs', { limit => 3 }),
                  'list_runs');
    is(scalar @{ $s->{runs} || [] }, 3, 'limit 3');
    ok(defined $s->{nextCursor}, 'nextCursor');
    my @all = map { $_->{runId} } @{ $s->{runs} || [] };
    my $s2 = tool_ok(scalar $t->call_tool($sid, 'opencode_list_runs',
                   { limit => 3, cursor => $s->{nextCursor} }), 'list_runs page 2');
    push @all, map { $_->{runId} } @{ $s2->{runs} || [] };
    is(scalar @all, 5, 'five runs over two pages');
    my %u = map { $_ => 1 } @all;
    is(scalar keys %u, 5, 'no duplicates');
}

# Redis restart recovery
{
    my @w = $t->worker_pids;
    $t->stop_redis(signal => 'KILL');
    my $r = $t->mcp_post($ping, session => $sid, timeout => 5);
    is($r->{status}, 503, 'Redis down: 503');
    is($r->{headers}{'retry-after'}, '1', 'Retry-After');
    # at once, not after the 10 s Redis timeout
    ok($r->{elapsed} < 5, sprintf('fast (%.3f s)', $r->{elapsed}));
    $t->start_redis;
    my $t0 = time();
    my $ok = wait_until(30, sub { is_pong($t->mcp_post($ping, session => $sid, timeout => 5)) },
                        0.1);
    ok($ok, sprintf('recovered after Redis restart (%.2f s)', time() - $t0));
    # by the reconnect (backoff at most 1 s), not only a restart of nginx
    ok(time() - $t0 < 20, 'within 20 s');
    my $bad = 0;
    for (1 .. 20) { $bad++ unless is_pong($t->mcp_post($ping, session => $sid, timeout => 5)) }
    is($bad, 0, '20 requests after recovery');
    is_deeply([ $t->worker_pids ], \@w, 'same worker PIDs');

    # pub/sub after recovery under poll
    my $res = $t->call_tool($sid, 'opencode_run_task', { task => 'after restart' });
    my $id = (SMCP::Test::sc($res) || {})->{runId} // 'run_1';
    my $lp = $t->mcp_start($t->request_msg('tools/call', { name => 'opencode_get_result',
        arguments => { runId => $id, waitSeconds => 60 } }), session => $sid);
    ok($t->wait_long_polls(1), 'a long-poll waits');
    $t->redis('HSET', "${P}run:$id", status => 'failed', finished_at => now_ms(),
              error => 'boom');
    $t->redis('PUBLISH', "${P}run:$id", 'failed');
    my $lr = $t->mcp_finish($lp, 90);
    is((SMCP::Test::sc($lr->{json} && $lr->{json}{result}) || {})->{status}, 'failed',
       'long-poll after recovery woken');
    ok($lr->{elapsed} < 30, sprintf('... early (%.2f s of its 60)', $lr->{elapsed}));
}

# reload under poll
{
    ok($t->reload, 'reload');
    pong_ok($t->mcp_post($ping, session => $sid), 'serving after reload');
}

# a worker must not spin at 100% CPU under poll (no-op delWrite)
{
    my @w = $t->worker_pids;
    my %cpu0 = map { $_ => _cpu($_) } @w;
    sleep(2);
    my @busy = grep { defined $cpu0{$_} && (_cpu($_) - $cpu0{$_}) > 100 } @w;  # >50% of 2 s
    ok(!@busy, 'idle workers do not spin') or diag("busy: @busy");
}

sub _cpu {
    my ($pid) = @_;
    open(my $fh, '<', "/proc/$pid/stat") or return undef;
    my $s = <$fh>;
    close $fh;
    $s =~ s/^.*\) //s;
    my @f = split / /, $s;
    return $f[11] + $f[12];    # utime + stime in ticks
}

$t->done;
