#!/usr/bin/env perl
# The runner's failure paths, for real (t/runner.t has the setup's story):
# MCP through nginx, build/smcp-runner, dockerd, the sandbox image with the
# real OpenCode; only the model (and GitHub) are fakes.  Three runs at once
# (concurrency 3):
#
#   1. the model answers 401: `failed`, the provider's message in error
#   2. the model hangs: the run's timeoutSeconds (180) ends it: `failed`,
#      an error about the deadline, the container stopped and removed
#   3. opencode_cancel_run while the model hangs: `cancelled`, and the
#      container is gone (docker ps -a) by the time the status says so
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
use SMCP::Test qw(json_encode wait_until iso_ms);

my $AUTH_MSG = 'invalid x-api-key (scripted refusal 4711)';
# long enough for OpenCode to reach the model first on a loaded 2-core
# machine (it has taken over 40 s, with 4 test files side by side, and
# 112 s with three runs of this file starting together beside two other
# files of sandboxes), and short of the model's 240 s hang
my $TIMEOUT = 180;

my $s = SMCP::Stack->new(scripts => {
    'SCENARIO-AUTH' => [
        { error => { status => 401, type => 'authentication_error', message => $AUTH_MSG } },
    ],
    'SCENARIO-HANG' => [ { hang => 240 } ],
    'SCENARIO-CANCEL' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/partial.txt', content => "partial work\n" } } },
        { hang => 120 },
    ],
});
my $t = $s->t;
my $runner = $s->start_runner(concurrency => 3);

my $t0 = time();
my $auth = $s->run_task(task => 'SCENARIO-AUTH: the provider refuses the key', title => 'auth');
my $hang = $s->run_task(task => 'SCENARIO-HANG: the model never answers', title => 'hang',
                        timeoutSeconds => $TIMEOUT);
my $cancel = $s->run_task(task => 'SCENARIO-CANCEL: write, then wait for the model',
                          title => 'cancel');

##############################################################################
# 1. 401 from the provider

subtest 'the model answers 401' => sub {
    my $r = $s->wait_done($auth->{runId}, 300);
    $s->timing('401 (run_task -> failed)', time() - $t0);
    is($r->{status}, 'failed', 'failed') or $s->diag_run($auth->{runId}, $runner);
    like($r->{error} // '', qr/\Q$AUTH_MSG\E/, "error: the provider's message")
        or diag('error: ' . ($r->{error} // 'null'));
    isnt($r->{exitCode}, 0, 'exitCode not 0 (' . ($r->{exitCode} // 'null') . ')');
    my $h = $s->run_hash($auth->{runId});
    is(iso_ms($r->{startedAt}), $h->{started_at}, 'startedAt: started_at of the run hash');
    is(iso_ms($r->{finishedAt}), $h->{finished_at}, 'finishedAt: finished_at');
    my @err = grep { ($_->{type} // '') eq 'error' } agent_data($s->events($auth->{runId}));
    ok(@err, 'get_events: the agent\'s error event') or $s->diag_run($auth->{runId}, $runner);
    my @req = grep { ($_->{body} // '') =~ /SCENARIO-AUTH/ } $s->anthropic->requests;
    ok(@req >= 1, 'the fake model was asked (' . scalar(@req) . ' request(s)) and said 401');
    ok(!grep({ $_->{status} != 401 } @req), 'every answer was the 401');
};

##############################################################################
# 3. cancel while the model hangs (before 2: it ends sooner)

subtest 'opencode_cancel_run mid-run' => sub {
    my $id = $cancel->{runId};
    my $seen = wait_until(90, sub {
        scalar grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($id)) }, 0.3);
    ok($seen, 'the write tool call is stored (the run is mid-way)') or $s->diag_run($id, $runner);
    ok(wait_until(30, sub { grep { ($_->{body} // '') =~ /SCENARIO-CANCEL/ && !$_->{status} }
                            $s->anthropic->requests }), 'the model is hanging');
    is($s->result($id)->{status}, 'running', 'status running before the cancel');
    ok(scalar($s->run_containers($id)), 'its container exists');

    my $tc = time();
    my $c = SMCP::Test::sc($s->call('opencode_cancel_run', { runId => $id }));
    ok($c, 'opencode_cancel_run answered') or diag(json_encode($c));
    note('cancel_run answered: status ' . ($c && $c->{status} // 'null')
         . ', cancelRequested ' . ($c && $c->{cancelRequested} ? 'true' : 'false'));
    my $r = $s->wait_done($id, 300);
    my @left = $s->run_containers($id);    # at once
    my $dt = time() - $tc;
    $s->timing('cancel_run -> cancelled', $dt);
    is($r->{status}, 'cancelled', sprintf('cancelled (%.2f s after the cancel)', $dt))
        or $s->diag_run($id, $runner);
    is(scalar(@left), 0, 'the container is gone (docker ps -a) when the status says cancelled')
        or diag("still there: @left " . join(' ', map {
            SMCP::Docker::container_inspect_field($_, '{{.State.Status}}') // '?' } @left));
    if (@left) {
        diag('BUG: the run is `cancelled` while its container '
             . 'still exists; the runner removes it only after storing the outcome');
    }
    # the same, from Docker's own clock
    my $fin = $s->run_hash($id)->{finished_at} / 1000;
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container is removed (eventually)');
    my @de = $s->docker_events(run => $id);
    my ($die) = grep { $_->{action} eq 'die' } @de;
    my ($destroy) = grep { $_->{action} eq 'destroy' } @de;
    ok($die && $die->{time} <= $fin + 0.001,
       sprintf('docker: the container died %.3f s before the run was marked cancelled',
               $die ? $fin - $die->{time} : 0));
    # finished_at is in whole milliseconds (truncated): 1 ms of slack;
    # swarm: the service went before (run_containers above), its task's
    # container goes after, in the background
    ok($destroy && $destroy->{time} <= $fin + 0.001,
       sprintf('docker: the container was destroyed before the run was marked cancelled '
               . '(destroy - finished_at = %+.4f s)', $destroy ? $destroy->{time} - $fin : 0))
        or diag('BUG: the runner stores the outcome before it '
                . 'removes the container; docker events: ' . json_encode(\@de))
        if SMCP::Stack::backend() ne 'swarm';
    is($r->{error}, 'cancelled', 'error: cancelled');
    ok($r->{cancelRequested}, 'cancelRequested');
    my @ev = $s->events($id);
    my @tu = grep { ($_->{type} // '') eq 'tool_use' } agent_data(@ev);
    is(scalar(@tu), 1, 'the write made before the cancel is in the events');
    like($s->runner_log($runner), qr/run=\Q$id\E.*cancel requested/, 'runner log: cancel requested');
};

##############################################################################
# 2. the deadline

subtest "the model hangs: timeoutSeconds $TIMEOUT" => sub {
    my $id = $hang->{runId};
    my $r = $s->wait_done($id, 300);
    $s->timing("deadline (run_task -> failed, timeout $TIMEOUT s)", time() - $t0);
    is($r->{status}, 'failed', 'failed') or $s->diag_run($id, $runner);
    like($r->{error} // '', qr/deadline/i, 'error mentions the deadline')
        or diag('error: ' . ($r->{error} // 'null'));
    is($r->{timeoutSeconds}, $TIMEOUT, "timeoutSeconds $TIMEOUT");
    my $h = $s->run_hash($id);
    # the deadline counts from the claim (between created_at and
    # started_at); the runner stores it (ms) when the run starts
    my ($created, $started, $deadline, $finished) =
        map { $_ // 0 } @$h{qw(created_at started_at deadline finished_at)};
    ok($deadline >= $created + $TIMEOUT * 1000 && $deadline <= $started + $TIMEOUT * 1000,
       "the deadline: $TIMEOUT s after the claim");
    ok($finished >= $deadline, sprintf('stopped at it, not before (%.2f s after)',
                                       ($finished - $deadline) / 1000));
    # by the deadline, not by the model's 240 s hang
    ok($finished - $deadline < 30_000, '... within 30 s of it');
    note(sprintf('deadline: finished_at - created_at = %.3f s, - started_at = %.3f s '
                 . '(timeoutSeconds %d)', ($finished - $created) / 1000,
                 ($finished - $started) / 1000, $TIMEOUT));
    ok(scalar(grep { ($_->{body} // '') =~ /SCENARIO-HANG/ && !$_->{status} }
              $s->anthropic->requests), 'the model was hanging');
    my $fin = $h->{finished_at} / 1000;
    my @de = $s->docker_events(run => $id);
    my ($die) = grep { $_->{action} eq 'die' } @de;
    ok($die && $die->{time} <= $fin + 0.001, 'docker: the container was stopped before the run was marked failed')
        or diag(json_encode(\@de));
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container is removed');
    ($die) = grep { $_->{action} eq 'destroy' } $s->docker_events(run => $id);
    note(sprintf('deadline: destroy - finished_at = %+.4f s', $die->{time} - $fin)) if $die;
    like($s->runner_log($runner), qr/run=\Q$id\E.*deadline reached/, 'runner log: deadline reached');
};

##############################################################################

ok($s->runner_alive($runner), 'the runner is still up');
my $out;
wait_until(SMCP::Stack::backend() eq 'swarm' ? 30 : 0, sub {
    (undef, $out) = SMCP::Docker::docker('ps', '-aq', '--filter', 'label=smcp.runner=' . $runner->{name});
    $out eq '' });
is($out, '', 'no container of the runner left');
note("runner log:\n" . $s->runner_log($runner)) if $ENV{SMCP_TEST_VERBOSE};
$s->stop_runner($runner, 'TERM');
$s->done;
