#!/usr/bin/env perl
# The host's floor (issue 22, point 2), end to end: MCP through nginx,
# build/smcp-runner, dockerd, the sandbox image with the real OpenCode;
# only the model is a fake.  No sandbox starts while the workspaces' disk
# or Redis is short; a run that meets the floor stays queued, saying why,
# and starts once the floor is met; runs already going are not touched.
#
#   1. --min-free-disk above what the engine's volumes directory has free:
#      a run stays `started`, no sandbox made, its error saying why (one
#      `waiting` event); the runner restarted with the floor lowered takes
#      the same queue entry and the run completes (the reason gone)
#   2. --min-free-redis 64m and Redis' maxmemory set (CONFIG SET) 32 MB
#      above what it uses: a run going on completes; a new one waits,
#      saying why; maxmemory restored, the same runner starts it
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_encode wait_until);

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-ONE'  => [ { text => 'One done.' } ],
        'SCENARIO-LONG' => [ bash_step('sleep 8; echo slept', 'Wait'), { text => 'Long done.' } ],
    },
);
my $t = $s->t;

# the reason a queued run waits, once it says one
sub waits_for {
    my ($id, $re) = @_;
    my $ok = wait_until(30, sub { ($s->run_hash($id)->{error} // '') =~ $re });
    ok($ok, "the run says why it waits: $re") or $s->diag_run($id);
    return $s->run_hash($id);
}

##############################################################################
# 1. the disk

subtest 'free disk below --min-free-disk: the run waits, then starts' => sub {
    my $r1 = $s->start_runner(args => [ '--min-free-disk', '1000000t' ]);
    my $run = $s->run_task(task => 'SCENARIO-ONE: hello', title => 'disk floor');
    my $id = $run->{runId};
    my $h = waits_for($id, qr/^waiting for the host: the free disk of \S+ is below --min-free-disk \(\d+ bytes\); the run stays queued/);
    is($h->{status}, 'started', 'still started (queued)');
    ok(!defined $h->{claimed_by} && !defined $h->{attempts}, 'never claimed');
    is_deeply([ $s->run_containers($id) ], [], 'no sandbox made');
    my $res = $s->result($id);
    like($res->{error} // '', qr/min-free-disk/, 'opencode_get_result shows why: ' . ($res->{error} // 'null'));
    my @w = grep { exists $_->{json}{waiting} } $s->stored_events($id);
    is(scalar(@w), 1, 'one `waiting` event');
    like($s->runner_log($r1), qr/host floor: waiting for the host: the free disk/, 'the runner log says so');

    $s->stop_runner($r1);
    my $r2 = $s->start_runner(args => [ '--min-free-disk', '1m', '--min-free-redis', '64m' ]);
    $res = $s->wait_done($id, 300);
    is($res->{status}, 'completed', 'the floor lowered: the same queued run completes')
        or $s->diag_run($id, $r2);
    is($res->{error}, undef, '... the reason gone');
    is(scalar(grep { exists $_->{json}{waiting} } $s->stored_events($id)), 1,
       '... and said once');
    $s->{floor_runner} = $r2;
};

##############################################################################
# 2. Redis

subtest 'Redis headroom below --min-free-redis: running runs go on, new ones wait' => sub {
    my $r2 = $s->{floor_runner};
    my $long = $s->run_task(task => 'SCENARIO-LONG: wait a while', title => 'long');
    ok(wait_until(60, sub { ($s->run_hash($long->{runId})->{status} // '') eq 'running' }),
       'a run is running');
    my ($used) = ($t->redis('INFO', 'memory') // '') =~ /^used_memory:(\d+)/m;
    $t->redis('CONFIG', 'SET', 'maxmemory', $used + 32 * 1024 * 1024);
    ok(wait_until(20, sub { $s->runner_log($r2) =~ /host floor: waiting for the host: Redis/ }),
       'the runner sees the floor (its main loop measures it every second)');
    my $run = $s->run_task(task => 'SCENARIO-ONE: later', title => 'redis floor');
    my $id = $run->{runId};
    my $h = waits_for($id, qr/^waiting for the host: Redis has less than --min-free-redis \(67108864 bytes\) of its maxmemory \(\d+ bytes\) free/);
    is($h->{status}, 'started', 'the new run: still started');
    is_deeply([ $s->run_containers($id) ], [], '... no sandbox made');

    my $res = $s->wait_done($long->{runId}, 300);
    is($res->{status}, 'completed', 'the run going on completes') or $s->diag_run($long->{runId}, $r2);
    is($res->{result}, 'Long done.', '... with its result');
    is(scalar(grep { ($_->{json}{type} // '') eq 'text' } $s->stored_events($long->{runId})), 1,
       '... and its events');
    is($s->run_hash($id)->{status}, 'started', 'the new run still waits');

    $t->redis('CONFIG', 'SET', 'maxmemory', 0);
    $res = $s->wait_done($id, 300);
    is($res->{status}, 'completed', 'maxmemory restored: the same runner starts it')
        or $s->diag_run($id, $r2);
    is($res->{error}, undef, '... the reason gone');
    like($s->runner_log($r2), qr/host floor: met again/, 'the runner log says so');
    is(scalar(grep { exists $_->{json}{waiting} } $s->stored_events($long->{runId})), 0,
       'the run that was going on was never held');
};

$t->redis('CONFIG', 'SET', 'maxmemory', 0);
$s->done;
