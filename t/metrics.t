#!/usr/bin/env perl
# Metrics end to end, scraped by a real Prometheus (Debian's `prometheus`,
# scrape_interval 1s, its storage in the test's directory, on a free
# loopback port): nginx's sandbox_mcp_metrics and the runner's --metrics
# listener.  A run goes through the whole stack (the real sandbox, the
# scripted fake model behind the egress proxy) and Prometheus' query API
# shows the series move: MCP calls, egress requests and bytes, Redis
# commands, runs by outcome, the sandbox start histogram, the queue.
# Also: /healthz sees the runner's heartbeat, and the runner's
# --log-format json lines parse, carry the run id and hold no secret.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp;
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Metrics;
use SMCP::Stack;
use SMCP::Test qw(json_decode wait_until which_bin require_prereqs);

require_prereqs(which_bin('prometheus') ? ()
                : ('prometheus (apt-get install prometheus)'));

# bad --metrics and --log-format values stop the runner at once, named
{
    my $bin = SMCP::Test::repo_root() . '/build/smcp-runner';
    my $secret = File::Temp->new;
    print $secret 'x' x 40;
    close $secret;
    for my $case ([ '--metrics', 'nonsense', qr/want IP:PORT/ ],
                  [ '--metrics', '127.0.0.1:99999', qr/want a port/ ],
                  [ '--metrics', '127.0.0.1:', qr/want a port/ ],
                  [ '--metrics', 'localhost:9464', qr/--metrics localhost:9464:/ ],
                  [ '--log-format', 'xml', qr/"text" or "json"/ ]) {
        my ($flag, $v, $re) = @$case;
        my $out = `$bin $flag '$v' --secret-file $secret --egress-url http://127.0.0.1:1 2>&1`;
        is($? >> 8, 2, "runner $flag $v: exit 2");
        like($out, $re, '... saying why');
    }
}

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-METRICS' => [ { text => 'Counted.' } ],
        # the model holds its answer: the runner is replaced meanwhile
        'SCENARIO-REATTACH' => [ { text => 'Re-attached.', hang => 8 } ],
    },
    server  => <<'SERVER');
        location = /metrics {
            sandbox_mcp_metrics;
        }

        location = /healthz {
            sandbox_mcp_health;
        }
SERVER
my $t = $s->t;

my $mport = $t->free_port;
my $r = $s->start_runner(args => [ '--metrics', "127.0.0.1:$mport",
                                   '--log-format', 'json' ]);

my $prom = SMCP::Metrics->start_prometheus($t, jobs => {
    nginx  => '127.0.0.1:' . $t->port,
    runner => "127.0.0.1:$mport",
});
ok($prom, 'prometheus started') or SMCP::Test::give_up('no prometheus');

ok(wait_until(30, sub {
    my $h = $prom->targets;
    return ($h->{nginx} // '') eq 'up' && ($h->{runner} // '') eq 'up';
}, 0.5), 'prometheus scrapes nginx and the runner')
    or diag(explain($prom->targets));

# series known before the run (0 or absent)
my %before = (
    run_task  => $prom->sum('smcp_mcp_requests_total{method="tools/call",'
                            . 'tool="opencode_run_task",status="ok"}'),
    completed => $prom->sum('smcp_runner_runs_total{outcome="completed"}'),
    started   => $prom->sum('smcp_runner_sandbox_start_seconds_count'),
    egress    => $prom->sum('smcp_egress_requests_total{route="anthropic"}'),
    redis     => $prom->sum('smcp_redis_command_duration_seconds_count'),
);
is($before{completed}, 0, 'no completed run yet');
is($before{egress}, 0, 'no egress request yet');

###############################################################################
# a run through the stack

my $run = $s->run_task(task => 'SCENARIO-METRICS: answer', title => 'metrics');
my $res = $s->wait_done($run->{runId}, 300);
is($res->{status}, 'completed', 'the run completed')
    or $s->diag_run($run->{runId}, $r);

my %want = (
    run_task  => [ 'smcp_mcp_requests_total{method="tools/call",'
                   . 'tool="opencode_run_task",status="ok"}', $before{run_task} + 1 ],
    completed => [ 'smcp_runner_runs_total{outcome="completed"}', 1 ],
    started   => [ 'smcp_runner_sandbox_start_seconds_count', 1 ],
    egress    => [ 'smcp_egress_requests_total{route="anthropic",status="2xx"}', 1 ],
    bytes     => [ 'smcp_egress_bytes_total{route="anthropic",direction="out"}', 1 ],
    redis     => [ 'smcp_redis_command_duration_seconds_count', $before{redis} + 1 ],
);

my %got;
wait_until(30, sub {
    $got{$_} = $prom->sum($want{$_}[0]) for keys %want;
    return !grep { $got{$_} < $want{$_}[1] } keys %want;
}, 1);

for my $k (sort keys %want) {
    ok($got{$k} >= $want{$k}[1], "prometheus: $want{$k}[0] = $got{$k} (>= $want{$k}[1])");
}

is($prom->sum('smcp_runner_runs_total{outcome="failed"}'), 0, 'prometheus: no failed run');
is($prom->sum('smcp_runner_docker_errors_total'), 0, 'prometheus: no Docker API error');
my $q = $prom->query('smcp_runner_queue_depth');
ok(@$q == 1 && $q->[0]{value} == 0, 'prometheus: queue depth 0 once the run was taken');
ok($prom->sum('histogram_quantile(0.5, smcp_runner_sandbox_start_seconds_bucket)') > 0,
   'prometheus: a sandbox start latency quantile');
ok($prom->sum('smcp_egress_bytes_total{route="anthropic",direction="in"}') > 0,
   'prometheus: egress bytes in');

###############################################################################
# /healthz sees the runner's heartbeat

{
    my $h = $t->http(method => 'GET', path => '/healthz', timeout => 10);
    my $j = json_decode($h->{body}) // {};
    is($h->{status}, 200, 'healthz: 200');
    is($j->{runners}, 'ok', 'healthz: the runner is alive');
    ok(($j->{runnersAlive} // 0) >= 1, 'healthz: runners alive >= 1');
    ok(defined $j->{heartbeatAgeMs} && $j->{heartbeatAgeMs} < 30000,
       "healthz: heartbeat $j->{heartbeatAgeMs} ms old");
}

###############################################################################
# the runner's listener against hostile clients: an oversized request, a
# client that sends nothing, other paths; it answers the next scrape

{
    my $sock = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$mport", Timeout => 5);
    print $sock 'GET /' . ('x' x 10000) . " HTTP/1.1\r\n\r\n" if $sock;
    my $ans = '';
    $sock->recv($ans, 512) if $sock;
    like($ans, qr{^HTTP/1\.1 404 }, 'runner metrics: an oversized request, 404');
    close $sock if $sock;

    my $idle = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$mport", Timeout => 5);
    ok($idle, 'runner metrics: a client that sends nothing');
    my $m = $t->http(port => $mport, method => 'GET', path => '/metrics', timeout => 10);
    is($m->{status}, 200, '... the next scrape is answered all the same');
    close $idle if $idle;
    $m = $t->http(port => $mport, method => 'POST', path => '/metrics', body => 'x');
    is($m->{status}, 404, 'runner metrics: POST, 404');
}

###############################################################################
# a runner replaced while a run goes on: the next one re-attaches

my $r2;
{
    my $run2 = $s->run_task(task => 'SCENARIO-REATTACH: wait', title => 'reattach');
    ok(wait_until(60, sub {
        my $h = $s->run_hash($run2->{runId});
        return ($h->{status} // '') eq 'running' && ($h->{container_id} // '') ne '';
    }, 0.3), 'the second run\'s sandbox runs');
    # mid-run: the model holds its answer 8 s from its request on
    ok(wait_until(120, sub {
        grep { ($_->{body} // '') =~ /SCENARIO-REATTACH/
               && ($_->{body} // '') !~ /title generator/i } $s->anthropic->requests
    }, 0.2), '... and waits for the model');
    $s->stop_runner($r, 'KILL');
    $r2 = $s->start_runner(args => [ '--metrics', "127.0.0.1:$mport",
                                     '--log-format', 'json' ]);
    my $res2 = $s->wait_done($run2->{runId}, 300);
    is($res2->{status}, 'completed', 'the second run completed after the re-attach')
        or $s->diag_run($run2->{runId}, $r2);
    my $n = 0;
    ok(wait_until(20, sub {
        $n = $prom->sum('smcp_runner_reattaches_total');
        return $n >= 1;
    }, 1), "prometheus: smcp_runner_reattaches_total = $n");
    ok(wait_until(20, sub {
        $prom->sum('smcp_runner_runs_total{outcome="completed"}') >= 1
    }, 1), 'prometheus: the new runner counts the completed run');
}

###############################################################################
# the runner's JSON log

{
    my $log = $s->runner_log($r);
    my @lines = grep { length } split /\n/, $log;
    my @bad = grep { !defined json_decode($_) } @lines;
    ok(@lines >= 3 && !@bad, scalar(@lines) . ' runner log lines, all JSON')
        or diag($bad[0]);
    my @mine = grep { ($_->{runId} // '') eq $run->{runId} }
               map { json_decode($_) // {} } @lines;
    ok(@mine >= 2, scalar(@mine) . ' lines carry the run id');
    ok((grep { $_->{msg} =~ /completed/ } @mine), 'the outcome line carries it');
    my @tenant = grep { ($_->{tenant} // '') eq $t->tenant } @mine;
    ok(@tenant >= 1, scalar(@tenant) . " of them the tenant (" . $t->tenant . ")");
    ok(!grep({ !$_->{time} || !$_->{level} } map { json_decode($_) } @lines),
       'every line has time and level');
    for my $k (sort keys %{ $s->real }) {
        unlike($log, qr/\Q$s->real->{$k}\E/, "runner log: no $k");
    }
    like($log, qr/^\{/m, 'runner log is JSON lines');
    unlike($log, qr/eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}/,
           'runner log: no token');
}

$prom->stop;
$s->stop_runner($r2);
$s->done;
