#!/usr/bin/env perl
# The runner losing its footing mid-run, for real (t/runner.t has the
# setup's story): MCP through nginx, build/smcp-runner, dockerd, the sandbox
# image with the real OpenCode; only the model (and GitHub) are fakes.
#
#   1. the runner is killed with SIGKILL mid-run and started again (same
#      --name): the run completes, and the stored agent events are exactly
#      the ones the model's script implies, none lost, none twice (no two
#      with the same Docker timestamp and data); a second run of that
#      runner, whose model hangs, still ends at its deadline
#   1b. the runner is killed between its sandbox's start and `running`
#      (a hook of the runner's test build holds it there: the run
#      `started`, claimed by the dead process, its container up) and
#      started again (the release build, same --name): the
#      new runner adopts that container (no second one), marks the run
#      `running` once, and the run completes with exactly the script's
#      events
#   2. Docker goes away for a few seconds: the runner talks to dockerd
#      through a unix-socket forwarder started here, which is stopped
#      (closing every connection) and started again; the run ends and the
#      runner's log names the Docker error.  The real dockerd is never
#      touched.
#   3. Docker goes away for longer than the runner retries (until the run
#      ended): the run still ends (`failed`, a clear error) instead of
#      staying `running`, and its sandbox does not outlive it once Docker is
#      back (and a restarted runner's reconciliation removes it in any case)
#   4. the engine does not answer the runner's start check of its image
#      (the forwarder closes those connections): the runner asks again
#      and goes on, instead of exiting 2, which says its configuration is
#      wrong (.ci/supervise stops then)
#   5. the engine away when a run's log has ended (a dockerd restart ends
#      the log stream first, then answers nothing for seconds: the soak's
#      dockerd_restart failed such runs at once): the forwarder closes the
#      runner's first three waits for the container's exit; the runner
#      asks again and the run completes with every event
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Events qw(agent_data);
use SMCP::Stack;
use SMCP::Test qw(wait_until);

# the hanging run starts once the crash run's first tool call is stored
# (OpenCode's start and a model round trip: 44 s on a loaded 2-core
# machine, beside five other Docker files) and must still be inside its
# deadline when the runner is killed (as soon as it is `running`, a
# container start) and started again
my $HANG_TIMEOUT = 40;
my $OUTAGE = 4;           # seconds Docker is away in 2.
my $RETRIES = 31;         # how long the runner retries Docker (3.: until then)

my $s = SMCP::Stack->new(scripts => {
    # the second answer held 20 s: the run is still going when the
    # hanging run, started after its first tool call, is `running`
    'SCENARIO-CRASH'  => SMCP::Stack::four_steps('CRASH', 20, 2),
    'SCENARIO-HANG'   => [ { hang => 150 } ],
    'SCENARIO-DOCKER' => SMCP::Stack::four_steps('DOCKER', 3, 1),
    'SCENARIO-EARLY'  => SMCP::Stack::four_steps('EARLY', 1, 1),
    'SCENARIO-END'    => SMCP::Stack::four_steps('END', 0, 0),
    'SCENARIO-LONG'   => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/long.txt', content => "long\n" } } },
        { hang => 150 },
    ],
});
my $t = $s->t;

my $runner;

sub tool_uses_stored {
    my ($id) = @_;
    return scalar grep { ($_->{type} // '') eq 'agent' && ($_->{json}{type} // '') eq 'tool_use' }
                  $s->stored_events($id);
}

##############################################################################
# 1. SIGKILL mid-run, restart with the same name

$runner = $s->start_runner(concurrency => 2);
my $name = $runner->{name};

subtest 'runner killed with SIGKILL mid-run, restarted' => sub {
    my $t0 = time();
    my $crash = $s->run_task(task => 'SCENARIO-CRASH: two files, show them, answer', title => 'crash');
    my $id = $crash->{runId};
    ok(wait_until(300, sub { tool_uses_stored($id) >= 1 }, 0.1),
       'the first tool call is stored') or $s->diag_run($id, $runner);
    my $hang = $s->run_task(task => 'SCENARIO-HANG: the model never answers', title => 'hang',
                            timeoutSeconds => $HANG_TIMEOUT);
    my $th = time();
    ok(wait_until(30, sub { $s->result($hang->{runId})->{status} eq 'running' }, 0.1),
       'the hanging run is running too') or $s->diag_run($hang->{runId}, $runner);
    note(sprintf('first tool call %.2f s, the hanging run running %.2f s later',
                 $th - $t0, time() - $th));
    my $stored_before = () = $s->container_events($id);

    $s->stop_runner($runner, 'KILL');
    my $killed = time();
    note(sprintf('runner SIGKILLed %.2f s after run_task, %d events stored', $killed - $t0,
                 $stored_before));
    my @cont = $s->run_containers($id);
    is(scalar(@cont), 1, 'the sandbox goes on without its runner');
    # the container prints while nobody follows it
    ok(wait_until(120, sub { (grep { ($_->{body} // '') =~ /SCENARIO-CRASH/ } $s->anthropic->requests) >= 3 }, 0.2),
       'OpenCode went on (its third model request came while the runner was dead)');
    is(scalar(() = $s->container_events($id)), $stored_before,
       'no container line stored meanwhile (egress events are nginx\'s)');
    is($s->result($id)->{status}, 'running', 'the run is still `running`');

    $runner = $s->start_runner(concurrency => 2, name => $name);
    my $r = $s->wait_done($id, 300);
    $s->timing('SIGKILL + restart: run_task -> completed', time() - $t0);
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($id, $runner);
    is($r->{result}, 'Done with CRASH.', 'result');
    is_deeply([sort map { $_->{path} } @{ $r->{filesChanged} || [] }], ['crash-1.txt', 'crash-2.txt'],
              'filesChanged');
    like($s->runner_log($runner), qr/run=\Q$id\E.*re-attached/, 'runner log: re-attached');
    $s->check_events_exact($id, 'after the restart');
    my @bash = grep { ($_->{type} // '') eq 'tool_use' && $_->{part}{tool} eq 'bash' }
               agent_data($s->events($id));
    is($bash[0] && $bash[0]{part}{state}{output}, "one\ntwo\n", 'the bash output');
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container was removed');

    # the hanging run, re-attached too: its deadline still holds (the one
    # stored when it started; the model's 150 s hang would end it later)
    my $hid = $hang->{runId};
    my $h = $s->wait_done($hid, 300);
    my $hh = $s->run_hash($hid);
    my $past = (($hh->{finished_at} // 0) - ($hh->{deadline} // 0)) / 1000;
    is($h->{status}, 'failed', "the re-attached hanging run failed at its deadline ($HANG_TIMEOUT s)")
        or do {
            diag("status $h->{status} " . sprintf('%.1f s after run_task', time() - $t0));
            diag('BUG: a re-attached run has no deadline any more');
            $s->diag_run($hid, $runner);
        };
    like($h->{error} // '', qr/deadline/i, '... with the deadline error');
    ok($hh->{deadline} && $past >= 0 && $past < 30,
       sprintf('... %.1f s after the deadline stored when it started', $past));
    if (!SMCP::Stack::terminal($h->{status})) {
        # end it, so the rest of the file runs on a clean runner
        $s->call('opencode_cancel_run', { runId => $hid });
        my $c = $s->wait_done($hid, 30);
        note("the hanging run, cancelled: $c->{status}");
    }
    ok(wait_until(60, sub { !$s->run_containers($hid) }), 'the hanging run\'s container was removed');
};

$s->stop_runner($runner, 'TERM');

##############################################################################
# 1b. SIGKILL between the sandbox's start and `running`, restart

subtest 'runner killed between the sandbox start and `running`' => sub {
    my $r1 = $s->start_runner(concurrency => 2, name => "$name-early",
                              test_hooks => 1,
                              env => { SMCP_RUNNER_TEST_HOLD_RUNNING => 600 });
    my $t0 = time();
    my $run = $s->run_task(task => 'SCENARIO-EARLY: two files, show them, answer', title => 'early');
    my $id = $run->{runId};
    my @cont;
    ok(wait_until(60, sub { @cont = $s->run_containers_running($id); @cont == 1 }, 0.1),
       'the sandbox runs') or $s->diag_run($id, $r1);
    my $h = $s->run_hash($id);
    is($h->{status}, 'started', 'the run is still `started` (held before `running`)');
    ok(length($h->{claimed_by} // ''), 'claimed by the runner');
    $s->stop_runner($r1, 'KILL');
    note(sprintf('runner SIGKILLed %.2f s after run_task, claimed_by %s',
                 time() - $t0, $h->{claimed_by} // ''));

    my $r2 = $s->start_runner(concurrency => 2, name => "$name-early");
    my $r = $s->wait_done($id, 300);
    $s->timing('SIGKILL before running + restart: run_task -> completed', time() - $t0);
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($id, $r2);
    is($r->{result}, 'Done with EARLY.', 'result');
    is_deeply([sort map { $_->{path} } @{ $r->{filesChanged} || [] }], ['early-1.txt', 'early-2.txt'],
              'filesChanged');
    my $h2 = $s->run_hash($id);
    my $short = substr($cont[0] // '', 0, 12);
    like($h2->{container_id} // '', qr/^\Q$short\E/, 'the run ran in the container the dead runner started (no second one)');
    like($s->runner_log($r2), qr/run=\Q$id\E.*adopted container/, 'runner log: the container adopted')
        or diag($s->runner_log_tail($r2, 15));
    $s->check_events_exact($id, 'after the restart');
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container was removed');
    $s->stop_runner($r2, 'TERM');
};

##############################################################################
# 2. Docker away for a few seconds

my $sock = $t->dir . '/docker.sock';
my $fwd = $s->start_docker_forwarder($sock);
my $r2 = $s->start_runner(concurrency => 2, name => "$name-fwd", docker_socket => $sock);

subtest "Docker unreachable for $OUTAGE s mid-run" => sub {
    my $t0 = time();
    my $run = $s->run_task(task => 'SCENARIO-DOCKER: two files, show them, answer', title => 'docker');
    my $id = $run->{runId};
    ok(wait_until(300, sub { tool_uses_stored($id) >= 1 }, 0.1),
       'the first tool call is stored') or $s->diag_run($id, $r2);
    $s->stop_docker_forwarder($fwd, $sock);
    my $down = time();
    sleep($OUTAGE);
    $fwd = $s->start_docker_forwarder($sock);
    note(sprintf('Docker away for %.2f s', time() - $down));

    my $r = $s->wait_done($id, 300);
    $s->timing("Docker away $OUTAGE s: run_task -> $r->{status}", time() - $t0);
    ok(SMCP::Stack::terminal($r->{status}), "the run ended: $r->{status}")
        or $s->diag_run($id, $r2);
    if ($r->{status} eq 'failed') {
        like($r->{error} // '', qr/docker|sandbox/i, 'failed with a clear error: ' . ($r->{error} // ''));
    } else {
        is($r->{status}, 'completed', 'completed');
        $s->check_events_exact($id, 'across the outage');
    }
    my $log = $s->runner_log($r2);
    my @err = grep { /level=error/ && /docker/i } split /\n/, $log;
    ok(@err, 'the runner log names the Docker error') or diag($log);
    note("runner: $_") for @err;
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container was removed');
};

##############################################################################
# 3. Docker away for longer than the runner retries

subtest "Docker unreachable mid-run for longer than the runner retries ($RETRIES s)" => sub {
    my $t0 = time();
    my $run = $s->run_task(task => 'SCENARIO-LONG: write, then the model hangs', title => 'long');
    my $id = $run->{runId};
    ok(wait_until(300, sub { tool_uses_stored($id) >= 1 }, 0.1),
       'the first tool call is stored') or $s->diag_run($id, $r2);
    $s->stop_docker_forwarder($fwd, $sock);
    my $down = time();
    # Docker stays away until the run ended (or the wait gave up): it ended
    # while Docker was away, by the order of the two
    my $r = $s->wait_done($id, 300);
    my $ended = time() - $down;
    $s->timing("Docker away: down -> $r->{status}", $ended);
    ok(SMCP::Stack::terminal($r->{status}),
       sprintf('the run ended while Docker was away: %s after %.1f s (the runner '
               . 'retries %d s)', $r->{status}, $ended, $RETRIES))
        or $s->diag_run($id, $r2);
    is($r->{status}, 'failed', 'failed');
    like($r->{error} // '', qr/docker|dockerd/i, 'a clear error: ' . ($r->{error} // 'null'));
    $fwd = $s->start_docker_forwarder($sock);
    note(sprintf('Docker back after %.1f s', time() - $down));

    # the sandbox of a failed run must not go on
    my $gone = wait_until(20, sub { !$s->run_containers($id) }, 0.5);
    ok($gone, 'the container of the failed run is gone once Docker is back (runner still running)')
        or do {
            my @c = $s->run_containers($id);
            diag("left: @c " . join(' ', map {
                SMCP::Docker::container_inspect_field($_, '{{.State.Status}}') // '?' } @c));
            diag('BUG: the runner gave up on the run while Docker was '
                 . 'away; its kill/remove failed then and nothing retries them while it runs');
        };
    ok($s->runner_alive($r2), 'the runner is still up');
    note("runner log:\n" . $s->runner_log_tail($r2, 15));

    # a restart of the runner reconciles: containers of ended runs go
    $s->stop_runner($r2, 'TERM');
    $r2 = $s->start_runner(concurrency => 2, name => "$name-fwd", docker_socket => $sock);
    ok(wait_until(20, sub { !$s->run_containers($id) }, 0.5),
       'after a runner restart the container is gone (reconciliation)')
        or diag($s->runner_log_tail($r2, 10));
    if (!$gone) {
        like($s->runner_log($r2), qr/run=\Q$id\E.*removing the container of an ended run/,
             'runner log: removing the container of an ended run');
    }
};

##############################################################################
# 4. the engine does not answer a start check: asked again (exit status 2
# says the configuration is wrong, and .ci/supervise stops then)

subtest 'the engine does not answer the image check at start' => sub {
    $s->stop_runner($r2, 'TERM');
    $s->stop_docker_forwarder($fwd, $sock);
    $fwd = $s->start_docker_forwarder($sock, drop => qr{^GET \S*/images/\S+/json }, times => 2);
    $r2 = $s->start_runner(concurrency => 2, name => "$name-fwd", docker_socket => $sock);
    ok(wait_until(30, sub { $s->runner_log($r2) =~ /cannot be inspected.*retrying in 2 s/ }),
       'the runner says so, and asks again') or diag($s->runner_log_tail($r2, 10));
    ok(wait_until(30, sub { $t->redis('ZSCORE', 'smcp:runners', "$name-fwd") }),
       '... then goes on: its heartbeat') or diag($s->runner_log_tail($r2, 10));
    ok($s->runner_alive($r2), '... up, not exited 2');
};

##############################################################################
# 5. the engine away at a run's end: its wait asked again

subtest 'the engine away when the log has ended: the wait is asked again' => sub {
    $s->stop_runner($r2, 'TERM');
    $s->stop_docker_forwarder($fwd, $sock);
    $fwd = $s->start_docker_forwarder($sock, drop => qr{^POST \S*/containers/\S+/wait},
                                      times => 3);
    $r2 = $s->start_runner(concurrency => 2, name => "$name-fwd", docker_socket => $sock);
    my $run = $s->run_task(task => 'SCENARIO-END: two files, show them, answer', title => 'end');
    my $r = $s->wait_done($run->{runId}, 300);
    is($r->{status}, 'completed', 'the run completes') or $s->diag_run($run->{runId}, $r2);
    $s->check_events_exact($run->{runId}, 'across the waits');
    my $n = () = $s->runner_log($r2) =~ /run=\Q$run->{runId}\E.*asking again/g;
    is($n, 3, 'the runner asked three times more, and said so');
};

$s->stop_runner($r2, 'TERM');
$s->stop_docker_forwarder($fwd, $sock);
$s->done;
