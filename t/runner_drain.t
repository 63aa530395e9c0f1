#!/usr/bin/env perl
# The runner's drain (SIGUSR1), for real (t/runner.t has the setup's story:
# MCP through nginx, build/smcp-runner, dockerd, the sandbox image with
# the real OpenCode; the model is a fake):
#
#   1. a runner drains while a run of its runs (the sandbox prints
#      tick-1, tick-2, ... until the test opens its gate): its log says
#      "draining", its metrics smcp_runner_draining 1, nginx's /healthz
#      "runners":"draining" with runnersDraining 1 (its heartbeat); a run
#      queued meanwhile is not taken; the running one finishes, whole (its
#      events exactly the script's, every tick once), and the runner says
#      "drained" and stays up, idle; the queued run waits for the next
#      runner, which takes it (/healthz "ok" again, runnersDraining 0)
#   2. a second SIGUSR1 leaves the running run to the next runner: the
#      runner detaches and exits, the sandbox goes on, a runner started
#      with the same name re-attaches and the run completes, whole
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(open_gate);
use SMCP::Metrics qw(scrape_value);
use SMCP::Stack qw(gate_step);
use SMCP::Test qw(json_decode wait_until);

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-DRAIN' => [ gate_step('drain-gate'), { text => 'Finished while draining.' } ],
        'SCENARIO-QUEUED' => [ { text => 'Taken by the next runner.' } ],
        'SCENARIO-HANDOVER' => [ gate_step('hand-gate'), { text => 'Finished after the handover.' } ],
    },
    server => 'location = /healthz { sandbox_mcp_health; }',
);
my $t = $s->t;
my $mport = $t->free_port;

sub healthz {
    my $r = $t->http(method => 'GET', path => '/healthz');
    return json_decode($r->{body} // '') // {};
}

sub ticks {
    my ($id) = @_;
    return scalar grep { ($_->{type} // '') eq 'log' && ($_->{data} // '') =~ /^tick-\d+$/ }
        $s->stored_events($id);
}

my @metrics = (args => [ '--metrics', "127.0.0.1:$mport" ]);

##############################################################################
# 1. drain: the running run finishes, the queued one waits for the next runner

my $runner = $s->start_runner(concurrency => 2, @metrics);
my $run = $s->run_task(task => 'SCENARIO-DRAIN: wait for the gate', title => 'drain');
my $id = $run->{runId};
ok(wait_until(180, sub { ticks($id) >= 2 }, 0.3),
   'a run is running: its sandbox prints ticks') or $s->diag_run($id, $runner);
is(scrape_value($mport, 'smcp_runner_draining'), 0, 'metrics: smcp_runner_draining 0 before the signal');

# (the runners of this file share their name, and so their log: each
# line carries the pid of the one that wrote it)
kill 'USR1', $runner->{pid};
ok(wait_until(60, sub { $s->runner_log($runner) =~ /pid=$runner->{pid} msg="draining: 1 run\(s\) to finish/ }, 0.2),
   'SIGUSR1: the runner logs "draining: 1 run(s) to finish"')
    or diag($s->runner_log_tail($runner, 10));
is(scrape_value($mport, 'smcp_runner_draining'), 1, 'metrics: smcp_runner_draining 1');
my $h = {};
ok(wait_until(60, sub { $h = healthz(); ($h->{runners} // '') eq 'draining' }, 0.3),
   '/healthz: "runners":"draining" (the heartbeat says so)') or diag(explain($h));
is($h->{runnersDraining}, 1, '... runnersDraining 1');
is($h->{runnersAlive}, 1, '... runnersAlive 1');

my $queued = $s->run_task(task => 'SCENARIO-QUEUED: answer', title => 'queued');
my $qid = $queued->{runId};

ok(open_gate($id, 'drain-gate'), 'the running run\'s gate opened');
my $r = $s->wait_done($id, 120);
is($r->{status}, 'completed', 'the running run completes while the runner drains')
    or $s->diag_run($id, $runner);
is($r->{result}, 'Finished while draining.', '... with its answer');
$s->check_events_exact($id, 'the run that finished during the drain',
                       agent => \@SMCP::Stack::GATE_AGENT, ticks => 1);

ok(wait_until(60, sub { $s->runner_log($runner) =~ /pid=$runner->{pid} msg="drained: no run left/ }, 0.2),
   'then the runner logs "drained: no run left"') or diag($s->runner_log_tail($runner, 10));
ok($s->runner_alive($runner), '... and stays up, idle');
is(scrape_value($mport, 'smcp_runner_runs_active'), 0, 'metrics: smcp_runner_runs_active 0');
is(scrape_value($mport, 'smcp_runner_draining'), 1, 'metrics: still smcp_runner_draining 1');
my $qh = $s->run_hash($qid);
is($qh->{status}, 'started', 'the run queued during the drain was not taken');
ok(!$qh->{claimed_by}, '... nor claimed');
unlike($s->runner_log($runner), qr/run=\Q$qid\E/, '... the draining runner never looked at it');

$s->stop_runner($runner, 'TERM');
my $next = $s->start_runner(concurrency => 2, @metrics);
$r = $s->wait_done($qid, 180);
is($r->{status}, 'completed', 'the next runner takes the queued run') or $s->diag_run($qid, $next);
is($r->{result}, 'Taken by the next runner.', '... with its answer');
ok(($s->run_hash($qid)->{claimed_at} // 0) > ($s->run_hash($id)->{finished_at} // 9e15),
   '... claimed after the drained run finished');
ok(wait_until(60, sub { $h = healthz(); ($h->{runners} // '') eq 'ok' }, 0.3),
   '/healthz: "runners":"ok" again') or diag(explain($h));
is($h->{runnersDraining}, 0, '... runnersDraining 0 (the new runner of that name takes runs)');
is(scrape_value($mport, 'smcp_runner_draining'), 0, 'metrics: smcp_runner_draining 0');

##############################################################################
# 2. a second SIGUSR1: the run is left to the next runner, which re-attaches

$run = $s->run_task(task => 'SCENARIO-HANDOVER: wait for the gate', title => 'handover');
$id = $run->{runId};
ok(wait_until(180, sub { ticks($id) >= 2 }, 0.3), 'another run is running')
    or $s->diag_run($id, $next);
kill 'USR1', $next->{pid};
ok(wait_until(60, sub { $s->runner_log($next) =~ /pid=$next->{pid} msg="draining: 1 run/ }, 0.2),
   'first SIGUSR1: draining');
# (once it said so: two signals of a kind sent at once are one)
kill 'USR1', $next->{pid};
ok(wait_until(20, sub { !$s->runner_alive($next) }, 0.2), 'second SIGUSR1: the runner exits')
    or diag($s->runner_log_tail($next, 10));
like($s->runner_log($next), qr/pid=$next->{pid} msg="stopping: 1 run\(s\) detach and go on in their containers/,
     '... its run detached');
my @running = $s->run_containers_running($id);
is(scalar(@running), 1, '... its sandbox goes on');
my $third = $s->start_runner(concurrency => 2, name => $next->{name}, @metrics);
ok(wait_until(30, sub { $s->runner_log($third) =~ /run=\Q$id\E.*re-attached/ }, 0.3),
   'a runner of the same name re-attaches') or diag($s->runner_log_tail($third, 10));
ok(open_gate($id, 'hand-gate'), 'the gate opened');
$r = $s->wait_done($id, 120);
is($r->{status}, 'completed', 'the run left to the next runner completes')
    or $s->diag_run($id, $third);
is($r->{result}, 'Finished after the handover.', '... with its answer');
$s->check_events_exact($id, 'the run handed over', agent => \@SMCP::Stack::GATE_AGENT,
                       ticks => 1);

$s->stop_runner($third, 'TERM');
$s->done;
