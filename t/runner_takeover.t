#!/usr/bin/env perl
# Two runners share one queue (distinct --name, --claim-idle 3000), for
# real (t/runner.t has the setup's story):
#
#   1. a run that lasts longer than --claim-idle is followed by one runner
#      only: a second runner started meanwhile leaves the live run alone,
#      and the stored events are exactly the script's (none twice)
#   2. the runner of a run is killed with SIGKILL and not restarted: a
#      runner started afterwards takes the run over once it has been
#      silent for --claim-idle and completes it, no event lost or stored
#      twice
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack;
use SMCP::Test qw(wait_until);

my $s = SMCP::Stack->new(scripts => {
    'SCENARIO-SHARE'  => SMCP::Stack::four_steps('SHARE', 4, 4),
    'SCENARIO-ORPHAN' => SMCP::Stack::four_steps('ORPHAN', 3, 2),
});
my $base = $s->runner_name;
my %R;

##############################################################################
# 1. x (concurrency 1: busy with the run, it looks for nothing else) runs
# it; y, started once x has it, must not take it

subtest 'a live runner keeps its run' => sub {
    my $t0 = time();
    $R{x} = $s->start_runner(name => "$base-x", claim_idle => 3000, concurrency => 1);
    my $run = $s->run_task(task => 'SCENARIO-SHARE: two files, show them, answer', title => 'share');
    my $id = $run->{runId};
    ok(wait_until(60, sub { $s->result($id)->{status} eq 'running' }, 0.1), 'running')
        or $s->diag_run($id, @R{sort keys %R});
    like($s->run_hash($id)->{claimed_by} // '', qr{^\Q$R{x}{name}\E/}, 'claimed by runner x');
    $R{y} = $s->start_runner(name => "$base-y", claim_idle => 3000, concurrency => 2);
    my $r = $s->wait_done($id, 300);
    $s->timing('one run, two runners: run_task -> completed', time() - $t0);
    is($r->{status}, 'completed', 'completed') or $s->diag_run($id, @R{sort keys %R});
    my $h = $s->run_hash($id);
    my $ran = ($h->{finished_at} - $h->{started_at}) / 1000;
    ok($ran > 8, sprintf('it ran %.1f s, well past --claim-idle (3 s)', $ran));
    my @foreign = grep { /run=\Q$id\E/ } split /\n/, $s->runner_log($R{y});
    is(scalar(@foreign), 0, 'runner y left the live run of runner x alone')
        or do {
            diag(join "\n", @foreign);
            diag('BUG: a live run is taken over: its runner touches '
                 . 'its queue entry every 10 s, whatever --claim-idle is');
        };
    $s->check_events_exact($id, 'one follower');
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container was removed');
    $s->stop_runner(delete $R{y}, 'TERM');
};

##############################################################################
# 2. x runs it and is killed; z, started afterwards, takes it over

subtest 'a dead runner\'s run is taken over' => sub {
    my $t0 = time();
    my $run = $s->run_task(task => 'SCENARIO-ORPHAN: two files, show them, answer', title => 'orphan');
    my $id = $run->{runId};
    ok(wait_until(300, sub { grep { ($_->{json}{type} // '') eq 'tool_use' } $s->container_events($id) },
                  0.1), 'the first tool call is stored') or $s->diag_run($id, @R{sort keys %R});
    like($s->run_hash($id)->{claimed_by} // '', qr{^\Q$R{x}{name}\E/}, 'claimed by runner x');
    $s->stop_runner(delete $R{x}, 'KILL');
    my $killed = time();
    my $stored = () = $s->container_events($id);
    note("runner x SIGKILLed with $stored container lines stored");
    $R{z} = $s->start_runner(name => "$base-z", claim_idle => 3000, concurrency => 2);
    my $took = wait_until(90, sub { $s->runner_log($R{z}) =~ /run=\Q$id\E.*re-attached/ }, 0.2);
    ok($took, sprintf('runner z re-attached to it, %.1f s after the kill', time() - $killed));
    my $r = $s->wait_done($id, 300);
    $s->timing('SIGKILL, take-over by another: run_task -> completed', time() - $t0);
    is($r->{status}, 'completed', 'completed') or $s->diag_run($id, @R{sort keys %R});
    is($r->{result}, 'Done with ORPHAN.', 'result');
    $s->check_events_exact($id, 'after the take-over');
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container was removed');
};

##############################################################################

for my $k (sort keys %R) {
    ok($s->runner_alive($R{$k}), "runner $k is still up");
    $s->stop_runner($R{$k}, 'TERM');
}
$s->done;
