#!/usr/bin/env perl
# Ids the runner reads from Redis go into Docker API paths: a hostile or
# corrupt value must not reach dockerd.  With a real runner, dockerd and a
# canary container (a path built from a hostile container_id would name
# it):
#
#   1. a running run whose container_id is "<canary id>/kill?signal=KILL"
#      (what a path would become) is failed with a clear error at
#      re-attach; the canary lives
#   2. a run whose session is not a session id ("../ses_x") is failed
#      before any sandbox is made
#   3. queue entries naming no run id ("../run_x", a run id with a suffix)
#      are acknowledged and skipped
#   4. the queue keeps no entry of a run that ended (an ack deletes it),
#      and a runner's start cuts the entries older runners acknowledged
#      and left (0.1.0's), below the oldest pending one (a gone
#      consumer's, kept: --claim-idle is long here) and the first not yet
#      delivered (this file's runs: read) (issue 24's soak found the
#      stream growing by one entry a run)
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(run_container remove_container container_inspect_field);
use SMCP::Stack;
use SMCP::Test qw(json_encode wait_until);

my $s = SMCP::Stack->new(scripts => {});
my $t = $s->t;

# 4. what a runner of 0.1.0 left: two entries acknowledged, one pending
# (its consumer gone), all three older than every run of this file
$t->redis('XGROUP', 'CREATE', 'smcp:queue', 'runners', '0', 'MKSTREAM');
my @old = map { $t->redis('XADD', 'smcp:queue', '*', run => "run_0ld${_}0000000000000000000") }
          1 .. 3;
$t->redis('XREADGROUP', 'GROUP', 'runners', 'rt-gone', 'COUNT', '3', 'STREAMS',
          'smcp:queue', '>');
$t->redis('XACK', 'smcp:queue', 'runners', @old[0, 1]);

my $canary = run_container(cmd => ['sleep', '600']);
ok($canary =~ /^[0-9a-f]{64}$/, 'a canary container runs');

# 1. a hostile container_id, for a run taken over (re-attach)
my $bad = $s->run_task(task => 'a run whose container id is hostile', title => 'bad id');
$t->redis('HSET', "smcp:run:$bad->{runId}", status => 'running',
          container_id => "$canary/kill?signal=KILL",
          started_at => int(time() * 1000), deadline => int(time() * 1000) + 600_000);

# 2. a hostile session
my $ses = $s->run_task(task => 'a run whose session is hostile', title => 'bad session');
$t->redis('HSET', "smcp:run:$ses->{runId}", session => '../ses_x');

# 3. queue entries without a run id
$t->redis('XADD', 'smcp:queue', '*', run => '../run_x');
$t->redis('XADD', 'smcp:queue', '*', run => "$bad->{runId}/../x");

my $runner = $s->start_runner(concurrency => 2, claim_idle => 600_000);

subtest 'a hostile container_id' => sub {
    my $r = $s->wait_done($bad->{runId}, 300);
    is($r->{status}, 'failed', 'the run is failed');
    like($r->{error} // '', qr/container_id is malformed/, 'saying why: ' . ($r->{error} // ''));
    is(container_inspect_field($canary, '{{.State.Running}}'), 'true', 'the canary still runs');
    like($s->runner_log($runner), qr/run=\Q$bad->{runId}\E.*container_id is malformed/,
         'the runner logged it');
};

subtest 'a hostile session' => sub {
    my $r = $s->wait_done($ses->{runId}, 300);
    is($r->{status}, 'failed', 'the run is failed');
    like($r->{error} // '', qr/no valid tenant or session/, 'saying why: ' . ($r->{error} // ''));
    is(scalar($s->run_containers($ses->{runId})), 0, 'no sandbox was made for it');
    my (undef, $vols) = SMCP::Docker::docker('volume', 'ls', '-q');
    unlike($vols, qr/\.\./, 'no volume with the hostile name');
};

subtest 'queue entries without a run id' => sub {
    ok(wait_until(20, sub {
        my $p = $t->redis('XPENDING', 'smcp:queue', 'runners');
        ref $p eq 'ARRAY' && !grep { $_->[0] ne 'rt-gone' } @{ $p->[3] || [] };
    }), 'every queue entry was acknowledged');
    ok($s->runner_alive($runner), 'the runner is up');
};

subtest 'the queue keeps no entry of an ended run' => sub {
    my %left = map { ($_->[0] => 1) } @{ $t->redis('XRANGE', 'smcp:queue', '-', '+') || [] };
    ok(!$left{ $old[0] } && !$left{ $old[1] },
       "the acknowledged entries 0.1.0 left were cut at the runner's start");
    ok($left{ $old[2] }, '... not the one a gone consumer holds pending');
    my $only_pending = sub {
        my $l = $t->redis('XRANGE', 'smcp:queue', '-', '+') || [];
        @$l == 1 && $l->[0][0] eq $old[2];
    };
    ok(wait_until(30, $only_pending, 0.2),
       'once every run of this file ended, the stream holds that one alone')
        or diag(json_encode($t->redis('XRANGE', 'smcp:queue', '-', '+')));
    my $more = $s->run_task(task => 'one more', title => 'one more');
    is($s->wait_done($more->{runId}, 300)->{status}, 'completed', 'a run completes');
    ok(wait_until(20, $only_pending, 0.2), '... and leaves no entry either');
};

remove_container($canary);
$s->stop_runner($runner, 'TERM');
$s->done;
