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

my $runner = $s->start_runner(concurrency => 2);

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
        ref $p eq 'ARRAY' && !$p->[0];
    }), 'every queue entry was acknowledged');
    ok($s->runner_alive($runner), 'the runner is up');
};

remove_container($canary);
$s->stop_runner($runner, 'TERM');
$s->done;
